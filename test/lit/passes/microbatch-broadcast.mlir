// gpipe-microbatch: a tensor without the batch broadcast to the batch's size
// (a ViT's class token expanded to every sample, torch's
// `cls.expand(B, -1, -1)`) and concatenated with, or added to, batch-carrying
// tensors gets a broadcast of its own that carries the batch: each
// micro-batch broadcasts the token to B / M samples. A broadcast whose input
// already has the batch's size on that axis is not one (it stays refused).
// RUN: gpipe-opt %s --split-input-file --gpipe-microbatch=microbatches=4 --verify-diagnostics | FileCheck %s

nn.parameter @cls : tensor<1x1x8xf32>
nn.parameter @pos : tensor<1x5x8xf32>

// CHECK-LABEL: func.func @class_token(
// CHECK-SAME: %[[X:[^:]+]]: tensor<2x4x8xf32>
// CHECK: %[[CLS:.+]] = nn.param @cls
// CHECK: %[[B1:.+]] = nn.broadcast_to %[[CLS]] : tensor<1x1x8xf32> -> tensor<2x1x8xf32>
// CHECK: %[[CAT:.+]] = nn.concat %[[B1]], %[[X]] {axis = 1 : i64} : (tensor<2x1x8xf32>, tensor<2x4x8xf32>) -> tensor<2x5x8xf32>
// CHECK: %[[B2:.+]] = nn.broadcast_to %[[CLS]] : tensor<1x1x8xf32> -> tensor<2x1x8xf32>
// CHECK: nn.add %{{.+}}, %[[B2]] : tensor<2x1x8xf32>, tensor<2x1x8xf32> -> tensor<2x1x8xf32>
func.func @class_token(%x: tensor<8x4x8xf32>, %l: tensor<8xi64>) -> (tensor<f32> {nn.loss}) {
  %cls = nn.param @cls : tensor<1x1x8xf32>
  %pos = nn.param @pos : tensor<1x5x8xf32>
  // One broadcast, read by the concat and by an add: each gets its own copy.
  %b = nn.broadcast_to %cls : tensor<1x1x8xf32> -> tensor<8x1x8xf32>
  %cat = nn.concat %b, %x {axis = 1 : i64} : (tensor<8x1x8xf32>, tensor<8x4x8xf32>) -> tensor<8x5x8xf32>
  %h = nn.add %cat, %pos : tensor<8x5x8xf32>, tensor<1x5x8xf32> -> tensor<8x5x8xf32>
  %first = nn.slice %h {axis = 1 : i64, start = 0 : i64} : tensor<8x5x8xf32> -> tensor<8x1x8xf32>
  %t = nn.add %first, %b : tensor<8x1x8xf32>, tensor<8x1x8xf32> -> tensor<8x1x8xf32>
  %r = nn.reshape %t : tensor<8x1x8xf32> -> tensor<8x8xf32>
  %loss = nn.softmax_cross_entropy %r, %l : tensor<8x8xf32>, tensor<8xi64>
  return %loss : tensor<f32>
}

// -----

nn.parameter @tok : tensor<8x1x8xf32>

// A tensor that has the batch's size without coming from the batch (a
// parameter of 8 rows, not broadcast from one row) is not split: it would
// give every micro-batch the same 8 / M rows.
func.func @not_broadcast(%x: tensor<8x4x8xf32>, %l: tensor<8xi64>) -> (tensor<f32> {nn.loss}) {
  %tok = nn.param @tok : tensor<8x1x8xf32>
  %b = nn.broadcast_to %tok : tensor<8x1x8xf32> -> tensor<8x1x8xf32>
  // expected-error @+1 {{concat of tensors that do not all carry the batch on one axis}}
  %cat = nn.concat %b, %x {axis = 1 : i64} : (tensor<8x1x8xf32>, tensor<8x4x8xf32>) -> tensor<8x5x8xf32>
  %r = nn.reshape %cat : tensor<8x5x8xf32> -> tensor<8x40xf32>
  %loss = nn.softmax_cross_entropy %r, %l : tensor<8x40xf32>, tensor<8xi64>
  return %loss : tensor<f32>
}
