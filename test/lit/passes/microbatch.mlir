// gpipe-microbatch: the batch B of the graph inputs becomes B/M on every value
// that carries it (followed through broadcasting, GEMM rows and columns,
// transposes, reshapes, concat and slice along other axes), reshape targets
// included; values that do not carry it (parameters, constants, what is
// computed from them) keep their types; the loss gets `microbatches = M`; the
// function gets pipe.microbatches and pipe.batch_size. With M = 1 only the
// function attributes change.
// RUN: gpipe-opt %s --split-input-file --gpipe-microbatch=microbatches=4 | FileCheck %s
// RUN: gpipe-opt %s --split-input-file --gpipe-microbatch=microbatches=1 | FileCheck %s --check-prefix=ONE
// RUN: gpipe-opt %s --split-input-file --gpipe-microbatch | FileCheck %s --check-prefix=ONE

// B = 8, M = 4: the inputs become 2-row tensors; the first GEMM (batch on A)
// keeps its [32, 16] weight and [32] bias; the scalar constant is unchanged;
// the reshape target's first dimension 4 becomes 1; two transposes move the
// batch to the last axis and back; the transposed activation feeds a GEMM
// with transA, whose batch (A's axis 1) becomes the output's rows; a second
// result that carries the batch shrinks in the function type too.
// CHECK-LABEL: func.func @mlp(
// CHECK-SAME: %[[X:[^:]+]]: tensor<2x16xf32> {nn.input = "x"}, %[[L:[^:]+]]: tensor<2xi64> {nn.input = "y"})
// CHECK-SAME: -> (tensor<f32> {nn.loss}, tensor<2x4xf32>)
// CHECK-SAME: attributes {pipe.batch_size = 8 : i64, pipe.microbatches = 4 : i64}
// CHECK-NEXT: %[[W1:.+]] = nn.param @fc1.weight : tensor<32x16xf32>
// CHECK-NEXT: %[[B1:.+]] = nn.param @fc1.bias : tensor<32xf32>
// CHECK-NEXT: %[[H:.+]] = nn.gemm %[[X]], %[[W1]], %[[B1]] {transB = true} : (tensor<2x16xf32>, tensor<32x16xf32>, tensor<32xf32>) -> tensor<2x32xf32>
// CHECK-NEXT: %[[C:.+]] = nn.constant dense<5.000000e-01> : tensor<f32>
// CHECK-NEXT: %[[S:.+]] = nn.mul %[[H]], %[[C]] : tensor<2x32xf32>, tensor<f32> -> tensor<2x32xf32>
// CHECK-NEXT: %[[R:.+]] = nn.reshape %[[S]] : tensor<2x32xf32> -> tensor<1x2x32xf32>
// CHECK-NEXT: %[[T:.+]] = nn.transpose %[[R]], [1, 2, 0] : tensor<1x2x32xf32> -> tensor<2x32x1xf32>
// CHECK-NEXT: %[[T2:.+]] = nn.transpose %[[T]], [2, 0, 1] : tensor<2x32x1xf32> -> tensor<1x2x32xf32>
// CHECK-NEXT: %[[F:.+]] = nn.reshape %[[T2]] : tensor<1x2x32xf32> -> tensor<2x32xf32>
// CHECK-NEXT: %[[FT:.+]] = nn.transpose %[[F]], [1, 0] : tensor<2x32xf32> -> tensor<32x2xf32>
// CHECK-NEXT: %[[W2:.+]] = nn.param @fc2.weight : tensor<4x32xf32>
// CHECK-NEXT: %[[Y:.+]] = nn.gemm %[[FT]], %[[W2]] {transA = true, transB = true} : (tensor<32x2xf32>, tensor<4x32xf32>) -> tensor<2x4xf32>
// CHECK-NEXT: %[[LOSS:.+]] = nn.softmax_cross_entropy %[[Y]], %[[L]] {ignore_index = -100 : i64, microbatches = 4 : i64} : tensor<2x4xf32>, tensor<2xi64>
// CHECK-NEXT: return %[[LOSS]], %[[Y]] : tensor<f32>, tensor<2x4xf32>

nn.parameter @fc1.weight : tensor<32x16xf32>
nn.parameter @fc1.bias : tensor<32xf32>
nn.parameter @fc2.weight : tensor<4x32xf32>
// With M = 1 nothing but the function attributes changes; the loss gets no
// `microbatches`.
// ONE-LABEL: func.func @mlp(
// ONE-SAME: tensor<8x16xf32> {nn.input = "x"}, %{{[^:]+}}: tensor<8xi64> {nn.input = "y"})
// ONE-SAME: -> (tensor<f32> {nn.loss}, tensor<8x4xf32>)
// ONE-SAME: attributes {pipe.batch_size = 8 : i64, pipe.microbatches = 1 : i64}
// ONE: nn.gemm {{.+}} -> tensor<8x32xf32>
// ONE: nn.reshape {{.+}} : tensor<8x32xf32> -> tensor<4x2x32xf32>
// ONE: nn.transpose {{.+}} : tensor<4x2x32xf32> -> tensor<2x32x4xf32>
// ONE: nn.gemm {{.+}} -> tensor<8x4xf32>
// ONE-NOT: microbatches = 
// ONE: nn.softmax_cross_entropy {{.+}} {ignore_index = -100 : i64} : tensor<8x4xf32>, tensor<8xi64>
// ONE-NEXT: return
func.func @mlp(%x: tensor<8x16xf32> {nn.input = "x"}, %labels: tensor<8xi64> {nn.input = "y"}) -> (tensor<f32> {nn.loss}, tensor<8x4xf32>) {
  %w1 = nn.param @fc1.weight : tensor<32x16xf32>
  %b1 = nn.param @fc1.bias : tensor<32xf32>
  %h = nn.gemm %x, %w1, %b1 {transB = true} : (tensor<8x16xf32>, tensor<32x16xf32>, tensor<32xf32>) -> tensor<8x32xf32>
  %c = nn.constant dense<0.5> : tensor<f32>
  %s = nn.mul %h, %c : tensor<8x32xf32>, tensor<f32> -> tensor<8x32xf32>
  %r = nn.reshape %s : tensor<8x32xf32> -> tensor<4x2x32xf32>
  %t = nn.transpose %r, [1, 2, 0] : tensor<4x2x32xf32> -> tensor<2x32x4xf32>
  %t2 = nn.transpose %t, [2, 0, 1] : tensor<2x32x4xf32> -> tensor<4x2x32xf32>
  %f = nn.reshape %t2 : tensor<4x2x32xf32> -> tensor<8x32xf32>
  %ft = nn.transpose %f, [1, 0] : tensor<8x32xf32> -> tensor<32x8xf32>
  %w2 = nn.param @fc2.weight : tensor<4x32xf32>
  %y = nn.gemm %ft, %w2 {transA = true, transB = true} : (tensor<32x8xf32>, tensor<4x32xf32>) -> tensor<8x4xf32>
  %loss = nn.softmax_cross_entropy %y, %labels {ignore_index = -100 : i64} : tensor<8x4xf32>, tensor<8xi64>
  return %loss, %y : tensor<f32>, tensor<8x4xf32>
}

// -----

nn.parameter @w : tensor<4x16xf32>
nn.parameter @b : tensor<4x1xf32>
// The batch on GEMM operand B: with transB (B is [B, K], the batch is B's
// axis 0) and without (B is [K, B], axis 1); both put the batch on the
// output's columns. C ([4, 1]) broadcasts along them. The labels' reshape
// [B, 1] -> [B] shrinks too (an i64 tensor).
// CHECK-LABEL: func.func @gemm_batch_on_b(
// CHECK-SAME: %[[X:[^:]+]]: tensor<2x16xf32>, %[[L:[^:]+]]: tensor<2x1xi64>) -> (tensor<f32> {nn.loss})
// CHECK-NEXT: %[[W:.+]] = nn.param @w : tensor<4x16xf32>
// CHECK-NEXT: %[[B:.+]] = nn.param @b : tensor<4x1xf32>
// CHECK-NEXT: %[[YT:.+]] = nn.gemm %[[W]], %[[X]], %[[B]] {transB = true} : (tensor<4x16xf32>, tensor<2x16xf32>, tensor<4x1xf32>) -> tensor<4x2xf32>
// CHECK-NEXT: %[[XT:.+]] = nn.transpose %[[X]], [1, 0] : tensor<2x16xf32> -> tensor<16x2xf32>
// CHECK-NEXT: %[[ZT:.+]] = nn.gemm %[[W]], %[[XT]] : (tensor<4x16xf32>, tensor<16x2xf32>) -> tensor<4x2xf32>
// CHECK-NEXT: %[[S:.+]] = nn.add %[[YT]], %[[ZT]] : tensor<4x2xf32>, tensor<4x2xf32> -> tensor<4x2xf32>
// CHECK-NEXT: %[[Y:.+]] = nn.transpose %[[S]], [1, 0] : tensor<4x2xf32> -> tensor<2x4xf32>
// CHECK-NEXT: %[[L1:.+]] = nn.reshape %[[L]] : tensor<2x1xi64> -> tensor<2xi64>
// CHECK-NEXT: %[[LOSS:.+]] = nn.softmax_cross_entropy %[[Y]], %[[L1]] {microbatches = 4 : i64} : tensor<2x4xf32>, tensor<2xi64>
// CHECK-NEXT: return %[[LOSS]] : tensor<f32>
// ONE-LABEL: func.func @gemm_batch_on_b(
// ONE-SAME: tensor<8x16xf32>, %{{[^:]+}}: tensor<8x1xi64>) -> (tensor<f32> {nn.loss})
// ONE: nn.gemm {{.+}} -> tensor<4x8xf32>
func.func @gemm_batch_on_b(%x: tensor<8x16xf32>, %labels: tensor<8x1xi64>) -> (tensor<f32> {nn.loss}) {
  %w = nn.param @w : tensor<4x16xf32>
  %bias = nn.param @b : tensor<4x1xf32>
  %yt = nn.gemm %w, %x, %bias {transB = true} : (tensor<4x16xf32>, tensor<8x16xf32>, tensor<4x1xf32>) -> tensor<4x8xf32>
  %xt = nn.transpose %x, [1, 0] : tensor<8x16xf32> -> tensor<16x8xf32>
  %zt = nn.gemm %w, %xt : (tensor<4x16xf32>, tensor<16x8xf32>) -> tensor<4x8xf32>
  %s = nn.add %yt, %zt : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %y = nn.transpose %s, [1, 0] : tensor<4x8xf32> -> tensor<8x4xf32>
  %l = nn.reshape %labels : tensor<8x1xi64> -> tensor<8xi64>
  %loss = nn.softmax_cross_entropy %y, %l : tensor<8x4xf32>, tensor<8xi64>
  return %loss : tensor<f32>
}

// -----

nn.parameter @scale : tensor<6x1xf32>
// Broadcasting aligns trailing axes: a rank-1 batch vector [B] added to a
// [6, B] tensor carries the batch on the result's axis 1. A slice and a
// concat along a non-batch axis keep the batch; a slice that keeps the whole
// batch axis is allowed. Values computed from parameters only ([6, 1]) are
// unchanged.
// CHECK-LABEL: func.func @broadcast_concat_slice(
// CHECK-SAME: %[[X:[^:]+]]: tensor<2x6xf32>, %[[L:[^:]+]]: tensor<2xi64>)
// CHECK-NEXT: %[[COL:.+]] = nn.slice %[[X]] {axis = 1 : i64, start = 0 : i64} : tensor<2x6xf32> -> tensor<2x1xf32>
// CHECK-NEXT: %[[V:.+]] = nn.reshape %[[COL]] : tensor<2x1xf32> -> tensor<2xf32>
// CHECK-NEXT: %[[XT:.+]] = nn.transpose %[[X]], [1, 0] : tensor<2x6xf32> -> tensor<6x2xf32>
// CHECK-NEXT: %[[A:.+]] = nn.add %[[XT]], %[[V]] : tensor<6x2xf32>, tensor<2xf32> -> tensor<6x2xf32>
// CHECK-NEXT: %[[P:.+]] = nn.param @scale : tensor<6x1xf32>
// CHECK-NEXT: %[[Q:.+]] = nn.tanh %[[P]] : tensor<6x1xf32>
// CHECK-NEXT: %[[M:.+]] = nn.mul %[[A]], %[[Q]] : tensor<6x2xf32>, tensor<6x1xf32> -> tensor<6x2xf32>
// CHECK-NEXT: %[[MT:.+]] = nn.transpose %[[M]], [1, 0] : tensor<6x2xf32> -> tensor<2x6xf32>
// CHECK-NEXT: %[[ALL:.+]] = nn.slice %[[MT]] {axis = 0 : i64, start = 0 : i64} : tensor<2x6xf32> -> tensor<2x6xf32>
// CHECK-NEXT: %[[CAT:.+]] = nn.concat %[[ALL]], %[[X]], %[[COL]] {axis = 1 : i64} : (tensor<2x6xf32>, tensor<2x6xf32>, tensor<2x1xf32>) -> tensor<2x13xf32>
// CHECK-NEXT: nn.softmax_cross_entropy %[[CAT]], %[[L]] {microbatches = 4 : i64} : tensor<2x13xf32>, tensor<2xi64>
func.func @broadcast_concat_slice(%x: tensor<8x6xf32>, %labels: tensor<8xi64>) -> (tensor<f32> {nn.loss}) {
  %col = nn.slice %x {axis = 1 : i64, start = 0 : i64} : tensor<8x6xf32> -> tensor<8x1xf32>
  %v = nn.reshape %col : tensor<8x1xf32> -> tensor<8xf32>
  %xt = nn.transpose %x, [1, 0] : tensor<8x6xf32> -> tensor<6x8xf32>
  %a = nn.add %xt, %v : tensor<6x8xf32>, tensor<8xf32> -> tensor<6x8xf32>
  %p = nn.param @scale : tensor<6x1xf32>
  %q = nn.tanh %p : tensor<6x1xf32>
  %m = nn.mul %a, %q : tensor<6x8xf32>, tensor<6x1xf32> -> tensor<6x8xf32>
  %mt = nn.transpose %m, [1, 0] : tensor<6x8xf32> -> tensor<8x6xf32>
  %all = nn.slice %mt {axis = 0 : i64, start = 0 : i64} : tensor<8x6xf32> -> tensor<8x6xf32>
  %cat = nn.concat %all, %x, %col {axis = 1 : i64} : (tensor<8x6xf32>, tensor<8x6xf32>, tensor<8x1xf32>) -> tensor<8x13xf32>
  %loss = nn.softmax_cross_entropy %cat, %labels : tensor<8x13xf32>, tensor<8xi64>
  return %loss : tensor<f32>
}

// -----

nn.parameter @w : tensor<5x5xf32>
// Scalar graph inputs carry no batch (the batch comes from the others); a
// GEMM whose A and C both carry the batch on the output's rows (a residual
// added through C) splits.
// CHECK-LABEL: func.func @scalar_input_and_gemm_c(
// CHECK-SAME: %[[T:[^:]+]]: tensor<f32>, %[[X:[^:]+]]: tensor<3x5xf32>, %[[L:[^:]+]]: tensor<3xi64>)
// CHECK-SAME: attributes {pipe.batch_size = 12 : i64, pipe.microbatches = 4 : i64}
// CHECK-NEXT: %[[W:.+]] = nn.param @w : tensor<5x5xf32>
// CHECK-NEXT: %[[G:.+]] = nn.gemm %[[X]], %[[W]], %[[X]] : (tensor<3x5xf32>, tensor<5x5xf32>, tensor<3x5xf32>) -> tensor<3x5xf32>
// CHECK-NEXT: %[[D:.+]] = nn.div %[[G]], %[[T]] : tensor<3x5xf32>, tensor<f32> -> tensor<3x5xf32>
// CHECK-NEXT: nn.softmax_cross_entropy %[[D]], %[[L]] {microbatches = 4 : i64} : tensor<3x5xf32>, tensor<3xi64>
// ONE-LABEL: func.func @scalar_input_and_gemm_c(
// ONE-SAME: attributes {pipe.batch_size = 12 : i64, pipe.microbatches = 1 : i64}
func.func @scalar_input_and_gemm_c(%t: tensor<f32>, %x: tensor<12x5xf32>, %labels: tensor<12xi64>) -> (tensor<f32> {nn.loss}) {
  %w = nn.param @w : tensor<5x5xf32>
  %g = nn.gemm %x, %w, %x : (tensor<12x5xf32>, tensor<5x5xf32>, tensor<12x5xf32>) -> tensor<12x5xf32>
  %d = nn.div %g, %t : tensor<12x5xf32>, tensor<f32> -> tensor<12x5xf32>
  %loss = nn.softmax_cross_entropy %d, %labels : tensor<12x5xf32>, tensor<12xi64>
  return %loss : tensor<f32>
}

// -----

// The importer's form of a per-position NLL over [B, C, T] log-probabilities:
// the class axis moved last, [B, T, C] flattened to [B*T, C], the labels
// [B, T] to [B*T]; log_softmax along the classes, reduce_max over them and
// clip keep the batch; the loss records M.
// CHECK-LABEL: func.func @nll_positions(
// CHECK-SAME: %[[X:[^:]+]]: tensor<2x5x3xf32>, %[[L:[^:]+]]: tensor<2x3xi64>)
// CHECK-NEXT: %[[C:.+]] = nn.clip %[[X]] {min = -1.000000e+01 : f32} : tensor<2x5x3xf32>
// CHECK-NEXT: %[[M:.+]] = nn.reduce_max %[[C]] : tensor<2x5x3xf32> -> tensor<2x1x3xf32>
// CHECK-NEXT: %[[S:.+]] = nn.sub %[[C]], %[[M]] : tensor<2x5x3xf32>, tensor<2x1x3xf32> -> tensor<2x5x3xf32>
// CHECK-NEXT: %[[Y:.+]] = nn.log_softmax %[[S]] {axis = 1 : i64} : tensor<2x5x3xf32>
// CHECK-NEXT: %[[T:.+]] = nn.transpose %[[Y]], [0, 2, 1] : tensor<2x5x3xf32> -> tensor<2x3x5xf32>
// CHECK-NEXT: %[[F:.+]] = nn.reshape %[[T]] : tensor<2x3x5xf32> -> tensor<6x5xf32>
// CHECK-NEXT: %[[FL:.+]] = nn.reshape %[[L]] : tensor<2x3xi64> -> tensor<6xi64>
// CHECK-NEXT: nn.nll_loss %[[F]], %[[FL]] {ignore_index = 1 : i64, microbatches = 4 : i64} : tensor<6x5xf32>, tensor<6xi64>
// ONE-LABEL: func.func @nll_positions(
// ONE: nn.nll_loss {{.+}} {ignore_index = 1 : i64} : tensor<24x5xf32>, tensor<24xi64>
func.func @nll_positions(%x: tensor<8x5x3xf32>, %labels: tensor<8x3xi64>) -> (tensor<f32> {nn.loss}) {
  %c = nn.clip %x {min = -10.0 : f32} : tensor<8x5x3xf32>
  %m = nn.reduce_max %c : tensor<8x5x3xf32> -> tensor<8x1x3xf32>
  %s = nn.sub %c, %m : tensor<8x5x3xf32>, tensor<8x1x3xf32> -> tensor<8x5x3xf32>
  %y = nn.log_softmax %s {axis = 1 : i64} : tensor<8x5x3xf32>
  %t = nn.transpose %y, [0, 2, 1] : tensor<8x5x3xf32> -> tensor<8x3x5xf32>
  %f = nn.reshape %t : tensor<8x3x5xf32> -> tensor<24x5xf32>
  %fl = nn.reshape %labels : tensor<8x3xi64> -> tensor<24xi64>
  %loss = nn.nll_loss %f, %fl {ignore_index = 1 : i64} : tensor<24x5xf32>, tensor<24xi64>
  return %loss : tensor<f32>
}

// -----

// nn.exp splits as every elementwise op (BatchSplittableOpInterface's
// elementwise rule): the batch stays on the axis it came in on.
// CHECK-LABEL: func.func @exp(
// CHECK-SAME: %[[X:[^:]+]]: tensor<2x5xf32>, %[[L:[^:]+]]: tensor<2xi64>)
// CHECK-NEXT: %[[E:.+]] = nn.exp %[[X]] : tensor<2x5xf32>
// CHECK-NEXT: nn.softmax_cross_entropy %[[E]], %[[L]] {microbatches = 4 : i64} : tensor<2x5xf32>, tensor<2xi64>
// ONE-LABEL: func.func @exp(
// ONE-SAME: tensor<8x5xf32>
func.func @exp(%x: tensor<8x5xf32>, %labels: tensor<8xi64>) -> (tensor<f32> {nn.loss}) {
  %e = nn.exp %x : tensor<8x5xf32>
  %loss = nn.softmax_cross_entropy %e, %labels : tensor<8x5xf32>, tensor<8xi64>
  return %loss : tensor<f32>
}

// -----

// nn.softmax on another axis than the batch's: the batch passes through.
// CHECK-LABEL: func.func @softmax(
// CHECK-SAME: %[[X:[^:]+]]: tensor<2x5xf32>, %[[L:[^:]+]]: tensor<2xi64>)
// CHECK-NEXT: %[[S:.+]] = nn.softmax %[[X]] {axis = 1 : i64} : tensor<2x5xf32>
// ONE-LABEL: func.func @softmax(
// ONE-SAME: tensor<8x5xf32>
func.func @softmax(%x: tensor<8x5xf32>, %labels: tensor<8xi64>) -> (tensor<f32> {nn.loss}) {
  %s = nn.softmax %x {axis = 1 : i64} : tensor<8x5xf32>
  %loss = nn.softmax_cross_entropy %s, %labels : tensor<8x5xf32>, tensor<8xi64>
  return %loss : tensor<f32>
}

// -----

// A mean-squared error built from ops: the sum over the batch (nn.reduce_to
// to a scalar) is each micro-batch's share, divided by the mini-batch's count
// (the constant keeps B = 8): the shares add up to the mini-batch's mean. A
// reduction over other axes keeps the batch on its axis.
// CHECK-LABEL: func.func @mse(
// CHECK-SAME: %[[X:[^:]+]]: tensor<2x5xf32>, %[[T:[^:]+]]: tensor<2x5xf32>)
// CHECK-NEXT: %[[D:.+]] = nn.sub %[[X]], %[[T]] : tensor<2x5xf32>, tensor<2x5xf32> -> tensor<2x5xf32>
// CHECK-NEXT: %[[C:.+]] = nn.constant
// CHECK-NEXT: %[[P:.+]] = nn.pow %[[D]], %[[C]] : tensor<2x5xf32>, tensor<f32> -> tensor<2x5xf32>
// CHECK-NEXT: %[[R:.+]] = nn.reduce_to %[[P]] : tensor<2x5xf32> -> tensor<2x1xf32>
// CHECK-NEXT: %[[S:.+]] = nn.reduce_to %[[R]] : tensor<2x1xf32> -> tensor<f32>
// CHECK-NEXT: %[[N:.+]] = nn.constant dense<4.000000e+01> : tensor<f32>
// CHECK-NEXT: nn.div %[[S]], %[[N]] : tensor<f32>, tensor<f32> -> tensor<f32>
// ONE-LABEL: func.func @mse(
// ONE-SAME: tensor<8x5xf32>
func.func @mse(%x: tensor<8x5xf32>, %t: tensor<8x5xf32>) -> (tensor<f32> {nn.loss}) {
  %d = nn.sub %x, %t : tensor<8x5xf32>, tensor<8x5xf32> -> tensor<8x5xf32>
  %two = nn.constant dense<2.0> : tensor<f32>
  %p = nn.pow %d, %two : tensor<8x5xf32>, tensor<f32> -> tensor<8x5xf32>
  %r = nn.reduce_to %p : tensor<8x5xf32> -> tensor<8x1xf32>
  %s = nn.reduce_to %r : tensor<8x1xf32> -> tensor<f32>
  %n = nn.constant dense<40.0> : tensor<f32>
  %loss = nn.div %s, %n : tensor<f32>, tensor<f32> -> tensor<f32>
  return %loss : tensor<f32>
}

// -----

nn.parameter @w : tensor<f32>
// Two means over the batch, weighted and added: still a sum of shares; a
// broadcast keeps the batch on its (moved) axis.
// CHECK-LABEL: func.func @weighted_losses(
// CHECK-SAME: %[[X:[^:]+]]: tensor<2x5xf32>, %[[L:[^:]+]]: tensor<2xi64>)
// CHECK: nn.broadcast_to %[[X]] : tensor<2x5xf32> -> tensor<3x2x5xf32>
// CHECK: nn.softmax_cross_entropy %[[X]], %[[L]] {microbatches = 4 : i64}
// CHECK: nn.reduce_to {{.*}} : tensor<3x2x5xf32> -> tensor<f32>
func.func @weighted_losses(%x: tensor<8x5xf32>, %labels: tensor<8xi64>) -> (tensor<f32> {nn.loss}) {
  %w = nn.param @w : tensor<f32>
  %b = nn.broadcast_to %x : tensor<8x5xf32> -> tensor<3x8x5xf32>
  %xent = nn.softmax_cross_entropy %x, %labels : tensor<8x5xf32>, tensor<8xi64>
  %s = nn.reduce_to %b : tensor<3x8x5xf32> -> tensor<f32>
  %ws = nn.mul %w, %s : tensor<f32>, tensor<f32> -> tensor<f32>
  %n = nn.neg %ws : tensor<f32>
  %loss = nn.sub %xent, %n : tensor<f32>, tensor<f32> -> tensor<f32>
  return %loss : tensor<f32>
}

// -----

nn.parameter @w : tensor<2x3x5xf32>
// nn.batch_matmul: the batch on a batch dim passes through to the result's
// (aligned from the right); a parameter broadcast along it keeps its type;
// both operands carrying it on the same batch dim (q @ k^T); the batch on
// A's rows (a rank-2 A) becomes the result's rows.
// CHECK-LABEL: func.func @batch_matmul(
// CHECK-SAME: %[[X:[^:]+]]: tensor<2x2x4x3xf32>, %[[R:[^:]+]]: tensor<2x3xf32>, %[[L:[^:]+]]: tensor<2xi64>)
// CHECK-NEXT: %[[W:.+]] = nn.param @w : tensor<2x3x5xf32>
// CHECK-NEXT: %[[Y:.+]] = nn.batch_matmul %[[X]], %[[W]] : (tensor<2x2x4x3xf32>, tensor<2x3x5xf32>) -> tensor<2x2x4x5xf32>
// CHECK-NEXT: %[[S:.+]] = nn.batch_matmul %[[Y]], %[[Y]] {transB = true} : (tensor<2x2x4x5xf32>, tensor<2x2x4x5xf32>) -> tensor<2x2x4x4xf32>
// CHECK-NEXT: %[[T:.+]] = nn.batch_matmul %[[R]], %[[W]] : (tensor<2x3xf32>, tensor<2x3x5xf32>) -> tensor<2x2x5xf32>
// ONE-LABEL: func.func @batch_matmul(
// ONE: nn.batch_matmul {{.+}} -> tensor<8x2x4x5xf32>
func.func @batch_matmul(%x: tensor<8x2x4x3xf32>, %r: tensor<8x3xf32>, %labels: tensor<8xi64>) -> (tensor<f32> {nn.loss}) {
  %w = nn.param @w : tensor<2x3x5xf32>
  %y = nn.batch_matmul %x, %w : (tensor<8x2x4x3xf32>, tensor<2x3x5xf32>) -> tensor<8x2x4x5xf32>
  %s = nn.batch_matmul %y, %y {transB = true} : (tensor<8x2x4x5xf32>, tensor<8x2x4x5xf32>) -> tensor<8x2x4x4xf32>
  %t = nn.batch_matmul %r, %w : (tensor<8x3xf32>, tensor<2x3x5xf32>) -> tensor<2x8x5xf32>
  %f = nn.reshape %s : tensor<8x2x4x4xf32> -> tensor<8x32xf32>
  %loss = nn.softmax_cross_entropy %f, %labels : tensor<8x32xf32>, tensor<8xi64>
  return %loss : tensor<f32>
}

// -----

// nn.layer_norm normalizing axes after the batch's: the batch passes through
// to the output and to the statistics (leading shape); the scale and bias
// keep their types.
// CHECK-LABEL: func.func @layer_norm(
// CHECK-SAME: %[[X:[^:]+]]: tensor<2x5xf32>, %[[L:[^:]+]]: tensor<2xi64>)
// CHECK-NEXT: %[[S:.+]] = nn.constant dense<1.000000e+00> : tensor<5xf32>
// CHECK-NEXT: %[[B:.+]] = nn.constant dense<0.000000e+00> : tensor<5xf32>
// CHECK-NEXT: %[[Y:[^,]+]], %[[YM:[^,]+]], %[[YR:[^ ]+]] = nn.layer_norm %[[X]], %[[S]], %[[B]] {axis = 1 : i64, epsilon = 9.99999974E-6 : f32} : tensor<2x5xf32>, tensor<5xf32> -> tensor<2xf32>
// ONE-LABEL: func.func @layer_norm(
// ONE-SAME: tensor<8x5xf32>
func.func @layer_norm(%x: tensor<8x5xf32>, %labels: tensor<8xi64>) -> (tensor<f32> {nn.loss}) {
  %s = nn.constant dense<1.0> : tensor<5xf32>
  %b = nn.constant dense<0.0> : tensor<5xf32>
  %y:3 = nn.layer_norm %x, %s, %b {axis = 1 : i64, epsilon = 1.0e-05 : f32} : tensor<8x5xf32>, tensor<5xf32> -> tensor<8xf32>
  %loss = nn.softmax_cross_entropy %y#0, %labels : tensor<8x5xf32>, tensor<8xi64>
  return %loss : tensor<f32>
}

// -----

nn.parameter @tok : tensor<50x4xf32>
nn.parameter @pos : tensor<3x4xf32>
// nn.gather: token ids carrying the batch (int64 data [B, T]) give rows
// carrying it on the same axis; the tables and the constant position
// indices keep their types; labels [B, T] reach the loss through a reshape
// to [B*T]. A table carrying the batch on a later axis (a Gather on axis 1,
// transposed to the front by the importer) keeps it after the indices'
// dimensions.
// CHECK-LABEL: func.func @gather(
// CHECK-SAME: %[[IDS:[^:]+]]: tensor<2x3xi64>, %[[Y:[^:]+]]: tensor<2x3xi64>, %[[H:[^:]+]]: tensor<2x5xf32>)
// CHECK: %[[E:.+]] = nn.gather %{{.+}}, %[[IDS]] : tensor<50x4xf32>, tensor<2x3xi64> -> tensor<2x3x4xf32>
// CHECK: %[[PE:.+]] = nn.gather %{{.+}}, %{{.+}} : tensor<3x4xf32>, tensor<3xi64> -> tensor<3x4xf32>
// CHECK: %[[HT:.+]] = nn.transpose %[[H]], [1, 0] : tensor<2x5xf32> -> tensor<5x2xf32>
// CHECK: nn.gather %[[HT]], %{{.+}} : tensor<5x2xf32>, tensor<i64> -> tensor<2xf32>
// CHECK: nn.reshape %[[Y]] : tensor<2x3xi64> -> tensor<6xi64>
// CHECK: nn.softmax_cross_entropy {{.+}} {microbatches = 4 : i64} : tensor<6x4xf32>, tensor<6xi64>
// ONE-LABEL: func.func @gather(
// ONE: nn.gather {{.+}} -> tensor<8x3x4xf32>
func.func @gather(%ids: tensor<8x3xi64>, %y: tensor<8x3xi64>, %h: tensor<8x5xf32>) -> (tensor<f32> {nn.loss}) {
  %t = nn.param @tok : tensor<50x4xf32>
  %e = nn.gather %t, %ids : tensor<50x4xf32>, tensor<8x3xi64> -> tensor<8x3x4xf32>
  %p = nn.param @pos : tensor<3x4xf32>
  %i = nn.constant dense<[0, 1, 2]> : tensor<3xi64>
  %pe = nn.gather %p, %i : tensor<3x4xf32>, tensor<3xi64> -> tensor<3x4xf32>
  %s = nn.add %e, %pe : tensor<8x3x4xf32>, tensor<3x4xf32> -> tensor<8x3x4xf32>
  %ht = nn.transpose %h, [1, 0] : tensor<8x5xf32> -> tensor<5x8xf32>
  %zero = nn.constant dense<0> : tensor<i64>
  %first = nn.gather %ht, %zero : tensor<5x8xf32>, tensor<i64> -> tensor<8xf32>
  %fr = nn.reshape %first : tensor<8xf32> -> tensor<8x1x1xf32>
  %s2 = nn.add %s, %fr : tensor<8x3x4xf32>, tensor<8x1x1xf32> -> tensor<8x3x4xf32>
  %r = nn.reshape %s2 : tensor<8x3x4xf32> -> tensor<24x4xf32>
  %yl = nn.reshape %y : tensor<8x3xi64> -> tensor<24xi64>
  %loss = nn.softmax_cross_entropy %r, %yl : tensor<24x4xf32>, tensor<24xi64>
  return %loss : tensor<f32>
}

// -----

// A reshape behind the batch axis (as torch's attention: [T, B, d] ->
// [T, B * heads, d / heads] and back): the dimensions before the axis are
// kept and the batch is the outer factor of the merged one, which M divides.
// CHECK-LABEL: func.func @reshape_batch_second(
// CHECK-SAME: %[[X:[^:]+]]: tensor<2x6xf32>, %[[L:[^:]+]]: tensor<2xi64>)
// CHECK-NEXT: %[[A:.+]] = nn.reshape %[[X]] : tensor<2x6xf32> -> tensor<2x3x2xf32>
// CHECK-NEXT: %[[T:.+]] = nn.transpose %[[A]], [1, 0, 2] : tensor<2x3x2xf32> -> tensor<3x2x2xf32>
// CHECK-NEXT: %[[M:.+]] = nn.reshape %[[T]] : tensor<3x2x2xf32> -> tensor<3x4xf32>
// CHECK-NEXT: nn.reshape %[[M]] : tensor<3x4xf32> -> tensor<3x2x2xf32>
// ONE-LABEL: func.func @reshape_batch_second(
func.func @reshape_batch_second(%x: tensor<8x6xf32>, %labels: tensor<8xi64>) -> (tensor<f32> {nn.loss}) {
  %a = nn.reshape %x : tensor<8x6xf32> -> tensor<8x3x2xf32>
  %t = nn.transpose %a, [1, 0, 2] : tensor<8x3x2xf32> -> tensor<3x8x2xf32>
  %m = nn.reshape %t : tensor<3x8x2xf32> -> tensor<3x16xf32>
  %r = nn.reshape %m : tensor<3x16xf32> -> tensor<3x8x2xf32>
  %b = nn.transpose %r, [1, 0, 2] : tensor<3x8x2xf32> -> tensor<8x3x2xf32>
  %u = nn.reshape %b : tensor<8x3x2xf32> -> tensor<8x6xf32>
  %loss = nn.softmax_cross_entropy %u, %labels : tensor<8x6xf32>, tensor<8xi64>
  return %loss : tensor<f32>
}

// -----

// torch's nn.MultiheadAttention works sequence-first and flattens [T, B, d]
// to [T * B, d] for its projection GEMMs: the batch then shares the merged
// axis with T (blocks of B rows, one per position), a micro-batch is a slice
// of each block, and the GEMM's rows and the elementwise ops after it keep
// it; the reshape back to [T, B, d] gives the batch its own axis again. A
// zero splat of the batch's shape (torch's zeros_like, folded at import) gets
// a copy of the micro-batch's shape.
// CHECK-LABEL: func.func @merged_rows(
// CHECK-SAME: %[[X:[^:]+]]: tensor<2x4x16xf32>, %[[L:[^:]+]]: tensor<2x4xi64>)
// CHECK-NEXT: %[[T:.+]] = nn.transpose %[[X]], [1, 0, 2] : tensor<2x4x16xf32> -> tensor<4x2x16xf32>
// CHECK-NEXT: %[[R:.+]] = nn.reshape %[[T]] : tensor<4x2x16xf32> -> tensor<8x16xf32>
// CHECK-NEXT: %[[W:.+]] = nn.param @w : tensor<16x16xf32>
// CHECK-NEXT: %[[G:.+]] = nn.gemm %[[R]], %[[W]] {transB = true} : (tensor<8x16xf32>, tensor<16x16xf32>) -> tensor<8x16xf32>
// CHECK-NEXT: nn.constant dense<0.000000e+00> : tensor<32x16xf32>
// CHECK-NEXT: %[[Z:.+]] = nn.constant dense<0.000000e+00> : tensor<8x16xf32>
// CHECK-NEXT: %[[A:.+]] = nn.add %[[G]], %[[Z]] : tensor<8x16xf32>, tensor<8x16xf32> -> tensor<8x16xf32>
// CHECK-NEXT: %[[H:.+]] = nn.tanh %[[A]] : tensor<8x16xf32>
// CHECK-NEXT: %[[B:.+]] = nn.reshape %[[H]] : tensor<8x16xf32> -> tensor<4x2x16xf32>
// CHECK-NEXT: %[[U:.+]] = nn.transpose %[[B]], [1, 0, 2] : tensor<4x2x16xf32> -> tensor<2x4x16xf32>
// CHECK-NEXT: %[[F:.+]] = nn.reshape %[[U]] : tensor<2x4x16xf32> -> tensor<8x16xf32>
// CHECK-NEXT: %[[FL:.+]] = nn.reshape %[[L]] : tensor<2x4xi64> -> tensor<8xi64>
// CHECK-NEXT: nn.softmax_cross_entropy %[[F]], %[[FL]]
// ONE-LABEL: func.func @merged_rows(
// ONE: nn.constant dense<0.000000e+00> : tensor<32x16xf32>
// ONE-NOT: nn.constant
// ONE: nn.softmax_cross_entropy
nn.parameter @w : tensor<16x16xf32>
func.func @merged_rows(%x: tensor<8x4x16xf32>, %labels: tensor<8x4xi64>) -> (tensor<f32> {nn.loss}) {
  %t = nn.transpose %x, [1, 0, 2] : tensor<8x4x16xf32> -> tensor<4x8x16xf32>
  %r = nn.reshape %t : tensor<4x8x16xf32> -> tensor<32x16xf32>
  %w = nn.param @w : tensor<16x16xf32>
  %g = nn.gemm %r, %w {transB = true} : (tensor<32x16xf32>, tensor<16x16xf32>) -> tensor<32x16xf32>
  %z = nn.constant dense<0.0> : tensor<32x16xf32>
  %a = nn.add %g, %z : tensor<32x16xf32>, tensor<32x16xf32> -> tensor<32x16xf32>
  %h = nn.tanh %a : tensor<32x16xf32>
  %b = nn.reshape %h : tensor<32x16xf32> -> tensor<4x8x16xf32>
  %u = nn.transpose %b, [1, 0, 2] : tensor<4x8x16xf32> -> tensor<8x4x16xf32>
  %f = nn.reshape %u : tensor<8x4x16xf32> -> tensor<32x16xf32>
  %fl = nn.reshape %labels : tensor<8x4xi64> -> tensor<32xi64>
  %loss = nn.softmax_cross_entropy %f, %fl : tensor<32x16xf32>, tensor<32xi64>
  return %loss : tensor<f32>
}

// -----

// nn.attention on [B, H, T, d] from the data: the batch passes from q, k and
// v (axis 0) to the output and the log-sum-exp; the mask [T, T] keeps its
// type.
// CHECK-LABEL: func.func @attention(
// CHECK-SAME: %[[X:[^:]+]]: tensor<2x2x4x8xf32>, %[[L:[^:]+]]: tensor<2xi64>)
// CHECK-NEXT: %[[M:.+]] = nn.constant dense<0.000000e+00> : tensor<4x4xf32>
// CHECK-NEXT: %[[O:[^,]+]], %{{[^ ]+}} = nn.attention %[[X]], %[[X]], %[[X]] mask %[[M]] {scale = 0.353553385 : f32} : (tensor<2x2x4x8xf32>, tensor<2x2x4x8xf32>, tensor<2x2x4x8xf32>, tensor<4x4xf32>) -> (tensor<2x2x4x8xf32>, tensor<2x2x4xf32>)
// CHECK-NEXT: nn.reshape %[[O]] : tensor<2x2x4x8xf32> -> tensor<2x64xf32>
// ONE-LABEL: func.func @attention(
// ONE-SAME: tensor<8x2x4x8xf32>
func.func @attention(%x: tensor<8x2x4x8xf32>, %labels: tensor<8xi64>) -> (tensor<f32> {nn.loss}) {
  %m = nn.constant dense<0.0> : tensor<4x4xf32>
  %o, %lse = nn.attention %x, %x, %x mask %m {scale = 0.353553385 : f32} : (tensor<8x2x4x8xf32>, tensor<8x2x4x8xf32>, tensor<8x2x4x8xf32>, tensor<4x4xf32>) -> (tensor<8x2x4x8xf32>, tensor<8x2x4xf32>)
  %f = nn.reshape %o : tensor<8x2x4x8xf32> -> tensor<8x64xf32>
  %loss = nn.softmax_cross_entropy %f, %labels : tensor<8x64xf32>, tensor<8xi64>
  return %loss : tensor<f32>
}
