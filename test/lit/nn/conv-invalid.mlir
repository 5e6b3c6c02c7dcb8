// Verifier errors of the convolution family: one case per message.
// RUN: gpipe-opt %s --split-input-file --verify-diagnostics

// Only 1-D and 2-D convolutions (rank 3 or 4).
func.func @rank(%x: tensor<2x3x4x4x4xf32>, %w: tensor<4x3x1x1x1xf32>) {
  // expected-error @+1 {{'nn.conv' op input must be rank 3 or 4 ([N, C, spatial...] with 1 or 2 spatial dims), got 'tensor<2x3x4x4x4xf32>'}}
  %y = nn.conv %x, %w {strides = array<i64: 1, 1, 1>, pads = array<i64: 0, 0, 0, 0, 0, 0>, dilations = array<i64: 1, 1, 1>} : (tensor<2x3x4x4x4xf32>, tensor<4x3x1x1x1xf32>) -> tensor<2x4x4x4x4xf32>
  return
}

// -----

// The weight has the input's rank.
func.func @weight_rank(%x: tensor<2x3x8xf32>, %w: tensor<4x3x3x3xf32>) {
  // expected-error @+1 {{'nn.conv' op input, weight and output must have the same rank, got 'tensor<2x3x8xf32>', 'tensor<4x3x3x3xf32>' and 'tensor<2x4x6xf32>'}}
  %y = nn.conv %x, %w {strides = array<i64: 1>, pads = array<i64: 0, 0>, dilations = array<i64: 1>} : (tensor<2x3x8xf32>, tensor<4x3x3x3xf32>) -> tensor<2x4x6xf32>
  return
}

// -----

// One stride and dilation per spatial dim, a begin and an end pad for each.
func.func @attr_sizes(%x: tensor<2x3x8xf32>, %w: tensor<4x3x3xf32>) {
  // expected-error @+1 {{'nn.conv' op expects 1 strides, 1 dilations and 2 pads for 1 spatial dims, got 1, 1 and 1}}
  %y = nn.conv %x, %w {strides = array<i64: 1>, pads = array<i64: 0>, dilations = array<i64: 1>} : (tensor<2x3x8xf32>, tensor<4x3x3xf32>) -> tensor<2x4x6xf32>
  return
}

// -----

func.func @stride_zero(%x: tensor<2x3x8xf32>, %w: tensor<4x3x3xf32>) {
  // expected-error @+1 {{'nn.conv' op strides and dilations must be >= 1}}
  %y = nn.conv %x, %w {strides = array<i64: 0>, pads = array<i64: 0, 0>, dilations = array<i64: 1>} : (tensor<2x3x8xf32>, tensor<4x3x3xf32>) -> tensor<2x4x6xf32>
  return
}

// -----

func.func @negative_pad(%x: tensor<2x3x8xf32>, %w: tensor<4x3x3xf32>) {
  // expected-error @+1 {{'nn.conv' op pads must be >= 0}}
  %y = nn.conv %x, %w {strides = array<i64: 1>, pads = array<i64: -1, 1>, dilations = array<i64: 1>} : (tensor<2x3x8xf32>, tensor<4x3x3xf32>) -> tensor<2x4x6xf32>
  return
}

// -----

// The group divides the channels and the filters.
func.func @group(%x: tensor<2x3x8xf32>, %w: tensor<4x1x3xf32>) {
  // expected-error @+1 {{'nn.conv' op group 2 must be >= 1 and divide the 3 input channels and the 4 filters}}
  %y = nn.conv %x, %w {strides = array<i64: 1>, pads = array<i64: 0, 0>, dilations = array<i64: 1>, group = 2 : i64} : (tensor<2x3x8xf32>, tensor<4x1x3xf32>) -> tensor<2x4x6xf32>
  return
}

// -----

// Each filter sees C / group channels.
func.func @weight_channels(%x: tensor<2x4x8xf32>, %w: tensor<4x4x3xf32>) {
  // expected-error @+1 {{'nn.conv' op weight must have C/group = 2 channels on axis 1, got 'tensor<4x4x3xf32>'}}
  %y = nn.conv %x, %w {strides = array<i64: 1>, pads = array<i64: 0, 0>, dilations = array<i64: 1>, group = 2 : i64} : (tensor<2x4x8xf32>, tensor<4x4x3xf32>) -> tensor<2x4x6xf32>
  return
}

// -----

// The (dilated) kernel fits in the padded input.
func.func @kernel_too_big(%x: tensor<2x3x4xf32>, %w: tensor<4x3x3xf32>) {
  // expected-error @+1 {{'nn.conv' op kernel extent 5 exceeds the padded input (4) on spatial dim 0}}
  %y = nn.conv %x, %w {strides = array<i64: 1>, pads = array<i64: 0, 0>, dilations = array<i64: 2>} : (tensor<2x3x4xf32>, tensor<4x3x3xf32>) -> tensor<2x4x1xf32>
  return
}

// -----

// The output shape follows from the attributes: (8 + 1 + 1 - 3) / 2 + 1 = 4.
func.func @output_shape(%x: tensor<2x3x8xf32>, %w: tensor<4x3x3xf32>) {
  // expected-error @+1 {{'nn.conv' op output must be 'tensor<2x4x4xf32>', got 'tensor<2x4x8xf32>'}}
  %y = nn.conv %x, %w {strides = array<i64: 2>, pads = array<i64: 1, 1>, dilations = array<i64: 1>} : (tensor<2x3x8xf32>, tensor<4x3x3xf32>) -> tensor<2x4x8xf32>
  return
}

// -----

// One bias per filter.
func.func @bias(%x: tensor<2x3x8xf32>, %w: tensor<4x3x3xf32>, %b: tensor<3xf32>) {
  // expected-error @+1 {{'nn.conv' op bias must be [4], got 'tensor<3xf32>'}}
  %y = nn.conv %x, %w, %b {strides = array<i64: 1>, pads = array<i64: 0, 0>, dilations = array<i64: 1>} : (tensor<2x3x8xf32>, tensor<4x3x3xf32>, tensor<3xf32>) -> tensor<2x4x6xf32>
  return
}

// -----

// The input gradient's result is the forward input: dy must be the conv of it.
func.func @input_grad(%dy: tensor<2x4x5xf32>, %w: tensor<4x3x3xf32>) {
  // expected-error @+1 {{'nn.conv_input_grad' op output gradient must be 'tensor<2x4x6xf32>', got 'tensor<2x4x5xf32>'}}
  %dx = nn.conv_input_grad %dy, %w {strides = array<i64: 1>, pads = array<i64: 0, 0>, dilations = array<i64: 1>} : (tensor<2x4x5xf32>, tensor<4x3x3xf32>) -> tensor<2x3x8xf32>
  return
}

// -----

// The weight gradient's result is the weight.
func.func @weight_grad(%x: tensor<2x3x8xf32>, %dy: tensor<2x4x6xf32>) {
  // expected-error @+1 {{'nn.conv_weight_grad' op weight must have C/group = 3 channels on axis 1, got 'tensor<4x2x3xf32>'}}
  %dw = nn.conv_weight_grad %x, %dy {strides = array<i64: 1>, pads = array<i64: 0, 0>, dilations = array<i64: 1>} : (tensor<2x3x8xf32>, tensor<2x4x6xf32>) -> tensor<4x2x3xf32>
  return
}
