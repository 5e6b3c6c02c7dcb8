// The pooling family's ops in their custom form (nn.max_pool,
// nn.max_pool_grad, nn.avg_pool, nn.avg_pool_grad, nn.pad): parsed, printed,
// re-parsed and printed again; then through the generic form.
// RUN: gpipe-opt %s | gpipe-opt | FileCheck %s
// RUN: gpipe-opt %s --mlir-print-op-generic | gpipe-opt | FileCheck %s

// 2-D max pooling with its indices, and its gradient.
// CHECK-LABEL: func.func @max_pool_2d(
// CHECK: %[[Y:.+]], %[[I:.+]] = nn.max_pool %{{.+}} {dilations = array<i64: 1, 1>, kernel_shape = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 2, 2>} : tensor<4x2x8x8xf32> -> tensor<4x2x4x4xf32>, tensor<4x2x4x4xi64>
// CHECK: nn.max_pool_grad %[[I]], %[[Y]] : tensor<4x2x4x4xi64>, tensor<4x2x4x4xf32> -> tensor<4x2x8x8xf32>
func.func @max_pool_2d(%x: tensor<4x2x8x8xf32>) -> tensor<4x2x8x8xf32> {
  %y, %i = nn.max_pool %x {kernel_shape = array<i64: 2, 2>, strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>} : tensor<4x2x8x8xf32> -> tensor<4x2x4x4xf32>, tensor<4x2x4x4xi64>
  %dx = nn.max_pool_grad %i, %y : tensor<4x2x4x4xi64>, tensor<4x2x4x4xf32> -> tensor<4x2x8x8xf32>
  return %dx : tensor<4x2x8x8xf32>
}

// 1-D max pooling with padding, dilation and ceil_mode: 10 + 2 - 5 = 7,
// ceil(7 / 2) + 1 = 5 windows.
// CHECK-LABEL: func.func @max_pool_1d(
// CHECK: nn.max_pool %{{.+}} {ceil_mode, dilations = array<i64: 2>, kernel_shape = array<i64: 3>, pads = array<i64: 1, 1>, strides = array<i64: 2>} : tensor<2x3x10xf32> -> tensor<2x3x5xf32>, tensor<2x3x5xi64>
func.func @max_pool_1d(%x: tensor<2x3x10xf32>) -> tensor<2x3x5xf32> {
  %y, %i = nn.max_pool %x {kernel_shape = array<i64: 3>, strides = array<i64: 2>, pads = array<i64: 1, 1>, dilations = array<i64: 2>, ceil_mode} : tensor<2x3x10xf32> -> tensor<2x3x5xf32>, tensor<2x3x5xi64>
  return %y : tensor<2x3x5xf32>
}

// Average pooling (ceil_mode, count_include_pad) and its gradient.
// CHECK-LABEL: func.func @avg_pool(
// CHECK: %[[Y:.+]] = nn.avg_pool %{{.+}} {ceil_mode, count_include_pad, dilations = array<i64: 1, 1>, kernel_shape = array<i64: 3, 3>, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 2, 2>} : tensor<4x2x4x4xf32> -> tensor<4x2x3x3xf32>
// CHECK: nn.avg_pool_grad %[[Y]] {ceil_mode, count_include_pad, dilations = array<i64: 1, 1>, kernel_shape = array<i64: 3, 3>, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 2, 2>} : tensor<4x2x3x3xf32> -> tensor<4x2x4x4xf32>
func.func @avg_pool(%x: tensor<4x2x4x4xf32>) -> tensor<4x2x4x4xf32> {
  %y = nn.avg_pool %x {kernel_shape = array<i64: 3, 3>, strides = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, ceil_mode, count_include_pad} : tensor<4x2x4x4xf32> -> tensor<4x2x3x3xf32>
  %dx = nn.avg_pool_grad %y {kernel_shape = array<i64: 3, 3>, strides = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, ceil_mode, count_include_pad} : tensor<4x2x3x3xf32> -> tensor<4x2x4x4xf32>
  return %dx : tensor<4x2x4x4xf32>
}

// Constant padding: one before H, one after W.
// CHECK-LABEL: func.func @pad(
// CHECK: nn.pad %{{.+}} {pads = array<i64: 0, 0, 1, 0, 0, 0, 0, 1>, value = 5.000000e-01 : f32} : tensor<4x2x3x3xf32> -> tensor<4x2x4x4xf32>
func.func @pad(%x: tensor<4x2x3x3xf32>) -> tensor<4x2x4x4xf32> {
  %y = nn.pad %x {pads = array<i64: 0, 0, 1, 0, 0, 0, 0, 1>, value = 5.0e-01 : f32} : tensor<4x2x3x3xf32> -> tensor<4x2x4x4xf32>
  return %y : tensor<4x2x4x4xf32>
}
