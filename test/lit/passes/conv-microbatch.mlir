// gpipe-microbatch through nn.conv: the batch splits along N of the input
// and the output; the weight and bias keep their shapes. A weight computed
// from the graph inputs cannot be split.
// RUN: gpipe-opt %s --split-input-file --gpipe-microbatch=microbatches=4 --verify-diagnostics | FileCheck %s

nn.parameter @w : tensor<4x3x3x3xf32>
nn.parameter @b : tensor<4xf32>
// B = 8, M = 4: x and y get 2 samples.
// CHECK-LABEL: func.func @conv2d(
// CHECK-SAME: tensor<2x3x6x6xf32>
// CHECK: nn.conv %{{.+}} : (tensor<2x3x6x6xf32>, tensor<4x3x3x3xf32>, tensor<4xf32>) -> tensor<2x4x3x3xf32>
// CHECK: nn.reshape %{{.+}} : tensor<2x4x3x3xf32> -> tensor<2x36xf32>
func.func @conv2d(%x: tensor<8x3x6x6xf32>, %l: tensor<8xi64>) -> (tensor<f32> {nn.loss}) {
  %w = nn.param @w : tensor<4x3x3x3xf32>
  %b = nn.param @b : tensor<4xf32>
  %y = nn.conv %x, %w, %b {strides = array<i64: 2, 2>, pads = array<i64: 1, 1, 0, 0>, dilations = array<i64: 1, 1>} : (tensor<8x3x6x6xf32>, tensor<4x3x3x3xf32>, tensor<4xf32>) -> tensor<8x4x3x3xf32>
  %f = nn.reshape %y : tensor<8x4x3x3xf32> -> tensor<8x36xf32>
  %loss = nn.softmax_cross_entropy %f, %l : tensor<8x36xf32>, tensor<8xi64>
  return %loss : tensor<f32>
}

// -----

// The weight is one of the graph inputs: every micro-batch would need all of
// it, and it would shrink.
func.func @weight_input(%x: tensor<8x3x8xf32>, %w: tensor<8x3x3xf32>, %l: tensor<8xi64>) -> (tensor<f32> {nn.loss}) {
  // expected-error @+1 {{cannot split the batch into micro-batches: a convolution's weight or bias depends on the graph inputs}}
  %y = nn.conv %x, %w {strides = array<i64: 1>, pads = array<i64: 0, 0>, dilations = array<i64: 1>} : (tensor<8x3x8xf32>, tensor<8x3x3xf32>) -> tensor<8x8x6xf32>
  %f = nn.reshape %y : tensor<8x8x6xf32> -> tensor<8x48xf32>
  %loss = nn.softmax_cross_entropy %f, %l : tensor<8x48xf32>, tensor<8xi64>
  return %loss : tensor<f32>
}
