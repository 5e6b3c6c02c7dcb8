// gpipe-microbatch through the pooling family: pools and pads split along the
// batch N (axis 0), max pooling's indices with them.
// RUN: gpipe-opt %s --split-input-file --gpipe-microbatch=microbatches=4 | FileCheck %s

// B = 8, M = 4: every [N, C, ..] value, indices included, becomes 2 samples.
// CHECK-LABEL: func.func @pools(
// CHECK-SAME: %[[X:[^:]+]]: tensor<2x2x8x8xf32>
// CHECK: %[[P:.+]] = nn.pad %[[X]] {{.+}} : tensor<2x2x8x8xf32> -> tensor<2x2x9x9xf32>
// CHECK: nn.max_pool %[[P]] {{.+}} : tensor<2x2x9x9xf32> -> tensor<2x2x4x4xf32>, tensor<2x2x4x4xi64>
// CHECK: nn.avg_pool %{{.+}} : tensor<2x2x4x4xf32> -> tensor<2x2x1x1xf32>
// CHECK: nn.reshape %{{.+}} : tensor<2x2x1x1xf32> -> tensor<2x2xf32>
func.func @pools(%x: tensor<8x2x8x8xf32>, %labels: tensor<8xi64>) -> (tensor<f32> {nn.loss}) {
  %p = nn.pad %x {pads = array<i64: 0, 0, 1, 0, 0, 0, 0, 1>, value = 0.0 : f32} : tensor<8x2x8x8xf32> -> tensor<8x2x9x9xf32>
  %y, %i = nn.max_pool %p {kernel_shape = array<i64: 2, 2>, strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>} : tensor<8x2x9x9xf32> -> tensor<8x2x4x4xf32>, tensor<8x2x4x4xi64>
  %a = nn.avg_pool %y {kernel_shape = array<i64: 4, 4>, strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>} : tensor<8x2x4x4xf32> -> tensor<8x2x1x1xf32>
  %f = nn.reshape %a : tensor<8x2x1x1xf32> -> tensor<8x2xf32>
  %loss = nn.softmax_cross_entropy %f, %labels : tensor<8x2xf32>, tensor<8xi64>
  return %loss : tensor<f32>
}
