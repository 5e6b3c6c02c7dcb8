// gpipe-autodiff through the pooling family: max pooling's gradient scatters
// dy to the recorded indices, average pooling's spreads it over the window
// (the forward's attributes), padding's slices the unpadded range, one
// nn.slice per padded axis.
// RUN: gpipe-opt %s --split-input-file --gpipe-autodiff | FileCheck %s

nn.parameter @w : tensor<2x2x6x6xf32>
// CHECK-LABEL: func.func @pools(
// CHECK: %[[W:.+]] = nn.param @w
// CHECK: %[[P:.+]] = nn.pad %[[W]]
// CHECK: %[[Y:[^,]+]], %[[I:[^ ]+]] = nn.max_pool %[[P]]
// CHECK: %[[A:.+]] = nn.avg_pool %[[Y]]
// CHECK: %[[DF:.+]] = nn.softmax_cross_entropy_grad
// CHECK: %[[DA:.+]] = nn.reshape %[[DF]] : tensor<2x2xf32> -> tensor<2x2x1x1xf32>
// CHECK: %[[DY:.+]] = nn.avg_pool_grad %[[DA]] {count_include_pad, dilations = array<i64: 1, 1>, kernel_shape = array<i64: 3, 3>, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>} : tensor<2x2x1x1xf32> -> tensor<2x2x3x3xf32>
// CHECK: %[[DP:.+]] = nn.max_pool_grad %[[I]], %[[DY]] : tensor<2x2x3x3xi64>, tensor<2x2x3x3xf32> -> tensor<2x2x7x7xf32>
// CHECK: %[[S2:.+]] = nn.slice %[[DP]] {axis = 2 : i64, start = 1 : i64} : tensor<2x2x7x7xf32> -> tensor<2x2x6x7xf32>
// CHECK: %[[S3:.+]] = nn.slice %[[S2]] {axis = 3 : i64, start = 0 : i64} : tensor<2x2x6x7xf32> -> tensor<2x2x6x6xf32>
// CHECK: nn.param_grad %[[W]], %[[S3]]
func.func @pools(%labels: tensor<2xi64>) -> (tensor<f32> {nn.loss}) {
  %w = nn.param @w : tensor<2x2x6x6xf32>
  %p = nn.pad %w {pads = array<i64: 0, 0, 1, 0, 0, 0, 0, 1>, value = 0.5 : f32} : tensor<2x2x6x6xf32> -> tensor<2x2x7x7xf32>
  %y, %i = nn.max_pool %p {kernel_shape = array<i64: 3, 3>, strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>} : tensor<2x2x7x7xf32> -> tensor<2x2x3x3xf32>, tensor<2x2x3x3xi64>
  %a = nn.avg_pool %y {kernel_shape = array<i64: 3, 3>, strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, count_include_pad} : tensor<2x2x3x3xf32> -> tensor<2x2x1x1xf32>
  %f = nn.reshape %a : tensor<2x2x1x1xf32> -> tensor<2x2xf32>
  %loss = nn.softmax_cross_entropy %f, %labels : tensor<2x2xf32>, tensor<2xi64>
  return %loss : tensor<f32>
}
