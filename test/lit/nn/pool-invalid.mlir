// Verifier errors of the pooling family (nn.max_pool, nn.max_pool_grad,
// nn.avg_pool, nn.avg_pool_grad, nn.pad): one case per message.
// RUN: gpipe-opt %s --split-input-file --verify-diagnostics

// Only 1-D and 2-D windows: the input is [N, C, W] or [N, C, H, W].
func.func @rank(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{input must be [N, C, W] or [N, C, H, W] (rank 3 or 4), got rank 2}}
  %y, %i = nn.max_pool %x {kernel_shape = array<i64: 2>, strides = array<i64: 2>, pads = array<i64: 0, 0>, dilations = array<i64: 1>} : tensor<4x8xf32> -> tensor<4x4xf32>, tensor<4x4xi64>
  return
}

// -----

func.func @keep_nc(%x: tensor<4x2x8xf32>) {
  // expected-error @+1 {{output 'tensor<4x3x4xf32>' must keep the input's rank and [N, C] 'tensor<4x2x8xf32>'}}
  %y, %i = nn.max_pool %x {kernel_shape = array<i64: 2>, strides = array<i64: 2>, pads = array<i64: 0, 0>, dilations = array<i64: 1>} : tensor<4x2x8xf32> -> tensor<4x3x4xf32>, tensor<4x3x4xi64>
  return
}

// -----

func.func @attr_sizes(%x: tensor<4x2x8x8xf32>) {
  // expected-error @+1 {{expected 2 kernel sizes, strides and dilations and 4 pads for 2 spatial axes}}
  %y, %i = nn.max_pool %x {kernel_shape = array<i64: 2, 2>, strides = array<i64: 2, 2>, pads = array<i64: 0, 0>, dilations = array<i64: 1, 1>} : tensor<4x2x8x8xf32> -> tensor<4x2x4x4xf32>, tensor<4x2x4x4xi64>
  return
}

// -----

func.func @stride(%x: tensor<4x2x8xf32>) {
  // expected-error @+1 {{kernel sizes, strides and dilations must be >= 1 (spatial axis 0)}}
  %y, %i = nn.max_pool %x {kernel_shape = array<i64: 2>, strides = array<i64: 0>, pads = array<i64: 0, 0>, dilations = array<i64: 1>} : tensor<4x2x8xf32> -> tensor<4x2x4xf32>, tensor<4x2x4xi64>
  return
}

// -----

// A pad as wide as the window would give windows of padding only.
func.func @pad_too_big(%x: tensor<4x2x8xf32>) {
  // expected-error @+1 {{pad 2 of spatial axis 0 must be >= 0 and smaller than the window's extent 2}}
  %y, %i = nn.max_pool %x {kernel_shape = array<i64: 2>, strides = array<i64: 2>, pads = array<i64: 2, 0>, dilations = array<i64: 1>} : tensor<4x2x8xf32> -> tensor<4x2x5xf32>, tensor<4x2x5xi64>
  return
}

// -----

func.func @no_fit(%x: tensor<4x2x2xf32>) {
  // expected-error @+1 {{the window (extent 5) does not fit spatial axis 0 of size 2 and its pads}}
  %y, %i = nn.max_pool %x {kernel_shape = array<i64: 5>, strides = array<i64: 1>, pads = array<i64: 1, 1>, dilations = array<i64: 1>} : tensor<4x2x2xf32> -> tensor<4x2x1xf32>, tensor<4x2x1xi64>
  return
}

// -----

// floor((9 - 2) / 2) + 1 = 4; ceil_mode would give 5.
func.func @out_size(%x: tensor<4x2x9xf32>) {
  // expected-error @+1 {{output size 5 of spatial axis 0 should be 4}}
  %y, %i = nn.max_pool %x {kernel_shape = array<i64: 2>, strides = array<i64: 2>, pads = array<i64: 0, 0>, dilations = array<i64: 1>} : tensor<4x2x9xf32> -> tensor<4x2x5xf32>, tensor<4x2x5xi64>
  return
}

// -----

func.func @indices_shape(%x: tensor<4x2x8xf32>) {
  // expected-error @+1 {{indices must have the output's shape}}
  %y, %i = nn.max_pool %x {kernel_shape = array<i64: 2>, strides = array<i64: 2>, pads = array<i64: 0, 0>, dilations = array<i64: 1>} : tensor<4x2x8xf32> -> tensor<4x2x4xf32>, tensor<4x2x3xi64>
  return
}

// -----

func.func @max_grad_shapes(%i: tensor<4x2x3xi64>, %g: tensor<4x2x4xf32>) {
  // expected-error @+1 {{indices 'tensor<4x2x3xi64>' and grad 'tensor<4x2x4xf32>' must have one shape}}
  %dx = nn.max_pool_grad %i, %g : tensor<4x2x3xi64>, tensor<4x2x4xf32> -> tensor<4x2x8xf32>
  return
}

// -----

func.func @max_grad_result(%i: tensor<4x2x4xi64>, %g: tensor<4x2x4xf32>) {
  // expected-error @+1 {{result 'tensor<4x3x8xf32>' must be a pool input of the grad's rank and [N, C] 'tensor<4x2x4xf32>'}}
  %dx = nn.max_pool_grad %i, %g : tensor<4x2x4xi64>, tensor<4x2x4xf32> -> tensor<4x3x8xf32>
  return
}

// -----

func.func @avg_dilation(%x: tensor<4x2x8xf32>) {
  // expected-error @+1 {{average pooling needs dilations of 1}}
  %y = nn.avg_pool %x {kernel_shape = array<i64: 2>, strides = array<i64: 2>, pads = array<i64: 0, 0>, dilations = array<i64: 2>} : tensor<4x2x8xf32> -> tensor<4x2x3xf32>
  return
}

// -----

// The gradient checks its window against its result (the forward's input).
func.func @avg_grad_size(%g: tensor<4x2x4xf32>) {
  // expected-error @+1 {{output size 4 of spatial axis 0 should be 3}}
  %dx = nn.avg_pool_grad %g {kernel_shape = array<i64: 3>, strides = array<i64: 3>, pads = array<i64: 0, 0>, dilations = array<i64: 1>} : tensor<4x2x4xf32> -> tensor<4x2x9xf32>
  return
}

// -----

func.func @pad_count(%x: tensor<4x3xf32>) {
  // expected-error @+1 {{expected 4 pads and a result of rank 2}}
  %y = nn.pad %x {pads = array<i64: 0, 1>, value = 0.0 : f32} : tensor<4x3xf32> -> tensor<4x4xf32>
  return
}

// -----

func.func @pad_negative(%x: tensor<4x3xf32>) {
  // expected-error @+1 {{pads must be >= 0 (axis 1)}}
  %y = nn.pad %x {pads = array<i64: 0, -1, 0, 0>, value = 0.0 : f32} : tensor<4x3xf32> -> tensor<4x2xf32>
  return
}

// -----

func.func @pad_size(%x: tensor<4x3xf32>) {
  // expected-error @+1 {{result size 5 of axis 1 should be 4}}
  %y = nn.pad %x {pads = array<i64: 0, 1, 0, 0>, value = 0.0 : f32} : tensor<4x3xf32> -> tensor<4x5xf32>
  return
}
