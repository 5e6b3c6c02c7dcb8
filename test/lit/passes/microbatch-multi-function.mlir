// gpipe-microbatch on a module with two functions: each function is split
// exactly once, and each function's type stays that of its block. Threading
// is disabled so that one pass instance runs on both functions, one after
// the other (the first one must not be shrunk again, nor its values checked,
// when the second one runs).
// RUN: gpipe-opt %s --mlir-disable-threading --gpipe-microbatch=microbatches=4 | FileCheck %s
// RUN: gpipe-opt %s --gpipe-microbatch=microbatches=4 | FileCheck %s

// CHECK-LABEL: func.func @first(
// CHECK-SAME: %[[X:[^:]+]]: tensor<2x3xf32>, %[[L:[^:]+]]: tensor<2xi64>) -> (tensor<f32> {nn.loss})
// CHECK-SAME: attributes {pipe.batch_size = 8 : i64, pipe.microbatches = 4 : i64}
// CHECK-NEXT: %[[T:.+]] = nn.tanh %[[X]] : tensor<2x3xf32>
// CHECK-NEXT: nn.softmax_cross_entropy %[[T]], %[[L]] {microbatches = 4 : i64} : tensor<2x3xf32>, tensor<2xi64>
// CHECK-LABEL: func.func @second(
// CHECK-SAME: %[[X:[^:]+]]: tensor<4x3xf32>, %[[L:[^:]+]]: tensor<4xi64>) -> (tensor<f32> {nn.loss})
// CHECK-SAME: attributes {pipe.batch_size = 16 : i64, pipe.microbatches = 4 : i64}
// CHECK-NEXT: %[[T:.+]] = nn.relu %[[X]] : tensor<4x3xf32>
// CHECK-NEXT: nn.softmax_cross_entropy %[[T]], %[[L]] {microbatches = 4 : i64} : tensor<4x3xf32>, tensor<4xi64>
func.func @first(%x: tensor<8x3xf32>, %labels: tensor<8xi64>) -> (tensor<f32> {nn.loss}) {
  %t = nn.tanh %x : tensor<8x3xf32>
  %loss = nn.softmax_cross_entropy %t, %labels : tensor<8x3xf32>, tensor<8xi64>
  return %loss : tensor<f32>
}
func.func @second(%x: tensor<16x3xf32>, %labels: tensor<16xi64>) -> (tensor<f32> {nn.loss}) {
  %t = nn.relu %x : tensor<16x3xf32>
  %loss = nn.softmax_cross_entropy %t, %labels : tensor<16x3xf32>, tensor<16xi64>
  return %loss : tensor<f32>
}
