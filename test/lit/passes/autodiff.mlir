// gpipe-autodiff: the gradient IR built for each op's rule, the summing of
// gradients, and the pruning of gradients nobody needs.
// RUN: gpipe-opt %s --split-input-file --gpipe-autodiff | FileCheck %s

nn.parameter @fc.weight : tensor<8x16xf32>
nn.parameter @fc.bias : tensor<8xf32>
// A Linear layer (ONNX Gemm, transB = 1, with bias) and its loss: the seed is
// 1.0, dY comes from the loss gradient (ignore_index carried over), and
// dW = dY^T X (gemm transA), db = reduce_to(dY). X is a data input: no gemm
// computes dX = dY W.
// CHECK-LABEL: func.func @linear(
// CHECK-SAME: %[[X:[^:]+]]: tensor<4x16xf32>, %[[L:[^:]+]]: tensor<4xi64>
// CHECK: %[[W:.+]] = nn.param @fc.weight
// CHECK: %[[B:.+]] = nn.param @fc.bias
// CHECK: %[[Y:.+]] = nn.gemm %[[X]], %[[W]], %[[B]] {transB = true}
// CHECK: %[[LOSS:.+]] = nn.softmax_cross_entropy %[[Y]], %[[L]] {ignore_index = -100 : i64}
// CHECK: %[[ONE:.+]] = nn.constant dense<1.000000e+00> : tensor<f32>
// CHECK: %[[DY:.+]] = nn.softmax_cross_entropy_grad %[[Y]], %[[L]], %[[ONE]] {ignore_index = -100 : i64} : tensor<4x8xf32>, tensor<4xi64>
// CHECK-NOT: nn.gemm
// CHECK: %[[DW:.+]] = nn.gemm %[[DY]], %[[X]] {transA = true} : (tensor<4x8xf32>, tensor<4x16xf32>) -> tensor<8x16xf32>
// CHECK-NOT: nn.gemm
// CHECK: %[[DB:.+]] = nn.reduce_to %[[DY]] : tensor<4x8xf32> -> tensor<8xf32>
// CHECK-NOT: nn.gemm
// CHECK: nn.param_grad %[[W]], %[[DW]] : tensor<8x16xf32>
// CHECK-NEXT: nn.param_grad %[[B]], %[[DB]] : tensor<8xf32>
// CHECK-NEXT: return %[[LOSS]] : tensor<f32>
func.func @linear(%x: tensor<4x16xf32>, %labels: tensor<4xi64>) -> (tensor<f32> {nn.loss}) {
  %w = nn.param @fc.weight : tensor<8x16xf32>
  %b = nn.param @fc.bias : tensor<8xf32>
  %y = nn.gemm %x, %w, %b {transB = true} : (tensor<4x16xf32>, tensor<8x16xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %loss = nn.softmax_cross_entropy %y, %labels {ignore_index = -100 : i64} : tensor<4x8xf32>, tensor<4xi64>
  return %loss : tensor<f32>
}

// -----

nn.parameter @fc1.weight : tensor<32x16xf32>
nn.parameter @fc2.weight : tensor<8x32xf32>
// Two layers with a relu: the hidden activation's gradient dH = dY W2 is
// computed (it feeds dW1), relu_grad takes the relu's output (positive
// exactly where the input is; the next gemm keeps it anyway), and the first
// layer's data input gets no gradient (no gemm
// to tensor<4x16xf32>). The int64 labels go through a reshape that is not
// differentiated.
// CHECK-LABEL: func.func @mlp(
// CHECK-SAME: %[[X:[^:]+]]: tensor<4x16xf32>, %[[L:[^:]+]]: tensor<4x1xi64>
// CHECK: %[[W1:.+]] = nn.param @fc1.weight
// CHECK: %[[W2:.+]] = nn.param @fc2.weight
// CHECK: %[[H:.+]] = nn.gemm %[[X]], %[[W1]] {transB = true}
// CHECK: %[[A:.+]] = nn.relu %[[H]]
// CHECK: %[[Y:.+]] = nn.gemm %[[A]], %[[W2]] {transB = true}
// CHECK: %[[L1:.+]] = nn.reshape %[[L]] : tensor<4x1xi64> -> tensor<4xi64>
// CHECK-NOT: nn.reshape
// CHECK: %[[DY:.+]] = nn.softmax_cross_entropy_grad %[[Y]], %[[L1]],
// CHECK-NEXT: %[[DA:.+]] = nn.gemm %[[DY]], %[[W2]] : (tensor<4x8xf32>, tensor<8x32xf32>) -> tensor<4x32xf32>
// CHECK-NEXT: %[[DW2:.+]] = nn.gemm %[[DY]], %[[A]] {transA = true} : (tensor<4x8xf32>, tensor<4x32xf32>) -> tensor<8x32xf32>
// CHECK-NEXT: %[[DH:.+]] = nn.relu_grad %[[A]], %[[DA]] : tensor<4x32xf32>
// CHECK-NOT: -> tensor<4x16xf32>
// CHECK: %[[DW1:.+]] = nn.gemm %[[DH]], %[[X]] {transA = true} : (tensor<4x32xf32>, tensor<4x16xf32>) -> tensor<32x16xf32>
// CHECK-NOT: -> tensor<4x16xf32>
// CHECK: nn.param_grad %[[W1]], %[[DW1]] : tensor<32x16xf32>
// CHECK-NEXT: nn.param_grad %[[W2]], %[[DW2]] : tensor<8x32xf32>
// CHECK-NEXT: return
func.func @mlp(%x: tensor<4x16xf32>, %labels: tensor<4x1xi64>) -> (tensor<f32> {nn.loss}) {
  %w1 = nn.param @fc1.weight : tensor<32x16xf32>
  %w2 = nn.param @fc2.weight : tensor<8x32xf32>
  %h = nn.gemm %x, %w1 {transB = true} : (tensor<4x16xf32>, tensor<32x16xf32>) -> tensor<4x32xf32>
  %a = nn.relu %h : tensor<4x32xf32>
  %y = nn.gemm %a, %w2 {transB = true} : (tensor<4x32xf32>, tensor<8x32xf32>) -> tensor<4x8xf32>
  %l = nn.reshape %labels : tensor<4x1xi64> -> tensor<4xi64>
  %loss = nn.softmax_cross_entropy %y, %l : tensor<4x8xf32>, tensor<4xi64>
  return %loss : tensor<f32>
}

// -----

nn.parameter @a : tensor<2x3xf32>
nn.parameter @b : tensor<3x5xf32>
// Y = A B (A: 2x3, B: 3x5): dA = dY B^T, dB = A^T dY.
// CHECK-LABEL: func.func @gemm_nn(
// CHECK: %[[A:.+]] = nn.param @a
// CHECK: %[[B:.+]] = nn.param @b
// CHECK: %[[DY:.+]] = nn.softmax_cross_entropy_grad
// CHECK-NEXT: %[[DA:.+]] = nn.gemm %[[DY]], %[[B]] {transB = true} : (tensor<2x5xf32>, tensor<3x5xf32>) -> tensor<2x3xf32>
// CHECK-NEXT: %[[DB:.+]] = nn.gemm %[[A]], %[[DY]] {transA = true} : (tensor<2x3xf32>, tensor<2x5xf32>) -> tensor<3x5xf32>
// CHECK-NEXT: nn.param_grad %[[A]], %[[DA]]
// CHECK-NEXT: nn.param_grad %[[B]], %[[DB]]
func.func @gemm_nn(%l: tensor<2xi64>) -> (tensor<f32> {nn.loss}) {
  %a = nn.param @a : tensor<2x3xf32>
  %b = nn.param @b : tensor<3x5xf32>
  %y = nn.gemm %a, %b : (tensor<2x3xf32>, tensor<3x5xf32>) -> tensor<2x5xf32>
  %loss = nn.softmax_cross_entropy %y, %l : tensor<2x5xf32>, tensor<2xi64>
  return %loss : tensor<f32>
}

// -----

nn.parameter @a : tensor<3x2xf32>
nn.parameter @b : tensor<3x5xf32>
// Y = A^T B (A: 3x2, B: 3x5): dA = B dY^T, dB = A dY.
// CHECK-LABEL: func.func @gemm_tn(
// CHECK: %[[A:.+]] = nn.param @a
// CHECK: %[[B:.+]] = nn.param @b
// CHECK: %[[DY:.+]] = nn.softmax_cross_entropy_grad
// CHECK-NEXT: %[[DA:.+]] = nn.gemm %[[B]], %[[DY]] {transB = true} : (tensor<3x5xf32>, tensor<2x5xf32>) -> tensor<3x2xf32>
// CHECK-NEXT: %[[DB:.+]] = nn.gemm %[[A]], %[[DY]] : (tensor<3x2xf32>, tensor<2x5xf32>) -> tensor<3x5xf32>
// CHECK-NEXT: nn.param_grad %[[A]], %[[DA]]
// CHECK-NEXT: nn.param_grad %[[B]], %[[DB]]
func.func @gemm_tn(%l: tensor<2xi64>) -> (tensor<f32> {nn.loss}) {
  %a = nn.param @a : tensor<3x2xf32>
  %b = nn.param @b : tensor<3x5xf32>
  %y = nn.gemm %a, %b {transA = true} : (tensor<3x2xf32>, tensor<3x5xf32>) -> tensor<2x5xf32>
  %loss = nn.softmax_cross_entropy %y, %l : tensor<2x5xf32>, tensor<2xi64>
  return %loss : tensor<f32>
}

// -----

nn.parameter @a : tensor<2x3xf32>
nn.parameter @b : tensor<5x3xf32>
// Y = A B^T (A: 2x3, B: 5x3): dA = dY B, dB = dY^T A.
// CHECK-LABEL: func.func @gemm_nt(
// CHECK: %[[A:.+]] = nn.param @a
// CHECK: %[[B:.+]] = nn.param @b
// CHECK: %[[DY:.+]] = nn.softmax_cross_entropy_grad
// CHECK-NEXT: %[[DA:.+]] = nn.gemm %[[DY]], %[[B]] : (tensor<2x5xf32>, tensor<5x3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT: %[[DB:.+]] = nn.gemm %[[DY]], %[[A]] {transA = true} : (tensor<2x5xf32>, tensor<2x3xf32>) -> tensor<5x3xf32>
// CHECK-NEXT: nn.param_grad %[[A]], %[[DA]]
// CHECK-NEXT: nn.param_grad %[[B]], %[[DB]]
func.func @gemm_nt(%l: tensor<2xi64>) -> (tensor<f32> {nn.loss}) {
  %a = nn.param @a : tensor<2x3xf32>
  %b = nn.param @b : tensor<5x3xf32>
  %y = nn.gemm %a, %b {transB = true} : (tensor<2x3xf32>, tensor<5x3xf32>) -> tensor<2x5xf32>
  %loss = nn.softmax_cross_entropy %y, %l : tensor<2x5xf32>, tensor<2xi64>
  return %loss : tensor<f32>
}

// -----

nn.parameter @a : tensor<3x2xf32>
nn.parameter @b : tensor<5x3xf32>
nn.parameter @c : tensor<2x1xf32>
// Y = alpha A^T B^T + beta C (A: 3x2, B: 5x3, C: 2x1): dA = alpha B^T dY^T,
// dB = alpha dY^T A^T (both gemms keep alpha, beta defaults to 1), and
// dC = reduce_to(beta * dY).
// CHECK-LABEL: func.func @gemm_tt(
// CHECK: %[[A:.+]] = nn.param @a
// CHECK: %[[B:.+]] = nn.param @b
// CHECK: %[[C:.+]] = nn.param @c
// CHECK: %[[DY:.+]] = nn.softmax_cross_entropy_grad
// CHECK-NEXT: %[[DA:.+]] = nn.gemm %[[B]], %[[DY]] {alpha = 5.000000e-01 : f32, transA = true, transB = true} : (tensor<5x3xf32>, tensor<2x5xf32>) -> tensor<3x2xf32>
// CHECK-NEXT: %[[DB:.+]] = nn.gemm %[[DY]], %[[A]] {alpha = 5.000000e-01 : f32, transA = true, transB = true} : (tensor<2x5xf32>, tensor<3x2xf32>) -> tensor<5x3xf32>
// CHECK-NEXT: %[[BETA:.+]] = nn.constant dense<3.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[SC:.+]] = nn.mul %[[DY]], %[[BETA]] : tensor<2x5xf32>, tensor<f32> -> tensor<2x5xf32>
// CHECK-NEXT: %[[DC:.+]] = nn.reduce_to %[[SC]] : tensor<2x5xf32> -> tensor<2x1xf32>
// CHECK-NEXT: nn.param_grad %[[A]], %[[DA]]
// CHECK-NEXT: nn.param_grad %[[B]], %[[DB]]
// CHECK-NEXT: nn.param_grad %[[C]], %[[DC]]
func.func @gemm_tt(%l: tensor<2xi64>) -> (tensor<f32> {nn.loss}) {
  %a = nn.param @a : tensor<3x2xf32>
  %b = nn.param @b : tensor<5x3xf32>
  %c = nn.param @c : tensor<2x1xf32>
  %y = nn.gemm %a, %b, %c {transA = true, transB = true, alpha = 0.5 : f32, beta = 3.0 : f32} : (tensor<3x2xf32>, tensor<5x3xf32>, tensor<2x1xf32>) -> tensor<2x5xf32>
  %loss = nn.softmax_cross_entropy %y, %l : tensor<2x5xf32>, tensor<2xi64>
  return %loss : tensor<f32>
}

// -----

nn.parameter @w : tensor<4x8xf32>
// exp's gradient reads its output: dx = dy * exp(x), an nn.mul of the
// incoming gradient and the op's result (no gradient op of its own).
// CHECK-LABEL: func.func @exp(
// CHECK: %[[W:.+]] = nn.param @w
// CHECK: %[[E:.+]] = nn.exp %[[W]] : tensor<4x8xf32>
// CHECK: %[[DE:.+]] = nn.softmax_cross_entropy_grad %[[E]],
// CHECK-NEXT: %[[DW:.+]] = nn.mul %[[DE]], %[[E]] : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
// CHECK-NEXT: nn.param_grad %[[W]], %[[DW]]
func.func @exp(%l: tensor<4xi64>) -> (tensor<f32> {nn.loss}) {
  %w = nn.param @w : tensor<4x8xf32>
  %e = nn.exp %w : tensor<4x8xf32>
  %loss = nn.softmax_cross_entropy %e, %l : tensor<4x8xf32>, tensor<4xi64>
  return %loss : tensor<f32>
}

// -----

nn.parameter @w : tensor<4x8xf32>
// abs, sqrt, reciprocal and log (torch's formulas): abs_grad reads abs's
// input, sqrt_grad and reciprocal_grad their op's output, and log's
// gradient is dy / x, an nn.div by log's input. Here
// loss(log(1 / sqrt(|w|))), differentiated from the loss back to w.
// CHECK-LABEL: func.func @unary_math(
// CHECK: %[[W:.+]] = nn.param @w
// CHECK: %[[A:.+]] = nn.abs %[[W]]
// CHECK: %[[S:.+]] = nn.sqrt %[[A]]
// CHECK: %[[R:.+]] = nn.reciprocal %[[S]]
// CHECK: %[[L:.+]] = nn.log %[[R]]
// CHECK: %[[DL:.+]] = nn.softmax_cross_entropy_grad %[[L]],
// CHECK-NEXT: %[[DR:.+]] = nn.div %[[DL]], %[[R]] : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
// CHECK-NEXT: %[[DS:.+]] = nn.reciprocal_grad %[[R]], %[[DR]] : tensor<4x8xf32>
// CHECK-NEXT: %[[DA:.+]] = nn.sqrt_grad %[[S]], %[[DS]] : tensor<4x8xf32>
// CHECK-NEXT: %[[DW:.+]] = nn.abs_grad %[[W]], %[[DA]] : tensor<4x8xf32>
// CHECK-NEXT: nn.param_grad %[[W]], %[[DW]]
func.func @unary_math(%l: tensor<4xi64>) -> (tensor<f32> {nn.loss}) {
  %w = nn.param @w : tensor<4x8xf32>
  %a = nn.abs %w : tensor<4x8xf32>
  %s = nn.sqrt %a : tensor<4x8xf32>
  %r = nn.reciprocal %s : tensor<4x8xf32>
  %g = nn.log %r : tensor<4x8xf32>
  %loss = nn.softmax_cross_entropy %g, %l : tensor<4x8xf32>, tensor<4xi64>
  return %loss : tensor<f32>
}

// -----

nn.parameter @w : tensor<4x8xf32>
// softmax's gradient reads its output: nn.softmax_grad(y, dy) on its axis.
// CHECK-LABEL: func.func @softmax(
// CHECK: %[[W:.+]] = nn.param @w
// CHECK: %[[Y:.+]] = nn.softmax %[[W]] {axis = 1 : i64} : tensor<4x8xf32>
// CHECK: %[[DY:.+]] = nn.softmax_cross_entropy_grad %[[Y]],
// CHECK-NEXT: %[[DW:.+]] = nn.softmax_grad %[[Y]], %[[DY]] {axis = 1 : i64} : tensor<4x8xf32>
// CHECK-NEXT: nn.param_grad %[[W]], %[[DW]]
func.func @softmax(%l: tensor<4xi64>) -> (tensor<f32> {nn.loss}) {
  %w = nn.param @w : tensor<4x8xf32>
  %y = nn.softmax %w {axis = 1 : i64} : tensor<4x8xf32>
  %loss = nn.softmax_cross_entropy %y, %l : tensor<4x8xf32>, tensor<4xi64>
  return %loss : tensor<f32>
}

// -----

nn.parameter @w : tensor<4x8xf32>
// log_softmax's gradient reads its output: nn.log_softmax_grad(y, dy) on its
// axis.
// CHECK-LABEL: func.func @log_softmax(
// CHECK: %[[W:.+]] = nn.param @w
// CHECK: %[[Y:.+]] = nn.log_softmax %[[W]] {axis = 0 : i64} : tensor<4x8xf32>
// CHECK: %[[DY:.+]] = nn.softmax_cross_entropy_grad %[[Y]],
// CHECK-NEXT: %[[DW:.+]] = nn.log_softmax_grad %[[Y]], %[[DY]] {axis = 0 : i64} : tensor<4x8xf32>
// CHECK-NEXT: nn.param_grad %[[W]], %[[DW]]
func.func @log_softmax(%l: tensor<4xi64>) -> (tensor<f32> {nn.loss}) {
  %w = nn.param @w : tensor<4x8xf32>
  %y = nn.log_softmax %w {axis = 0 : i64} : tensor<4x8xf32>
  %loss = nn.softmax_cross_entropy %y, %l : tensor<4x8xf32>, tensor<4xi64>
  return %loss : tensor<f32>
}

// -----

nn.parameter @w : tensor<4x8xf32>
nn.parameter @s : tensor<8xf32>
nn.parameter @b : tensor<8xf32>
// layer_norm's gradients read its input and saved statistics (not its
// output): dx = nn.layer_norm_grad, dscale = nn.layer_norm_scale_grad,
// dbias = reduce_to(dy). The zeros standing for the statistics' gradients are
// dropped.
// CHECK-LABEL: func.func @layer_norm(
// CHECK: %[[W:.+]] = nn.param @w
// CHECK-NEXT: %[[S:.+]] = nn.param @s
// CHECK-NEXT: %[[B:.+]] = nn.param @b
// CHECK-NEXT: %[[Y:[^,]+]], %[[YM:[^,]+]], %[[YR:[^ ]+]] = nn.layer_norm %[[W]], %[[S]], %[[B]] {axis = 1 : i64, epsilon = 9.99999974E-6 : f32}
// CHECK: %[[DY:.+]] = nn.softmax_cross_entropy_grad %[[Y]],
// CHECK-NEXT: %[[DW:.+]] = nn.layer_norm_grad %[[W]], %[[YM]], %[[YR]], %[[S]], %[[DY]] {axis = 1 : i64} : tensor<4x8xf32>, tensor<4xf32>, tensor<8xf32>
// CHECK-NEXT: %[[DS:.+]] = nn.layer_norm_scale_grad %[[W]], %[[YM]], %[[YR]], %[[DY]] {axis = 1 : i64} : tensor<4x8xf32>, tensor<4xf32> -> tensor<8xf32>
// CHECK-NEXT: %[[DB:.+]] = nn.reduce_to %[[DY]] : tensor<4x8xf32> -> tensor<8xf32>
// CHECK-NEXT: nn.param_grad %[[W]], %[[DW]]
// CHECK-NEXT: nn.param_grad %[[S]], %[[DS]]
// CHECK-NEXT: nn.param_grad %[[B]], %[[DB]]
func.func @layer_norm(%l: tensor<4xi64>) -> (tensor<f32> {nn.loss}) {
  %w = nn.param @w : tensor<4x8xf32>
  %s = nn.param @s : tensor<8xf32>
  %b = nn.param @b : tensor<8xf32>
  %y:3 = nn.layer_norm %w, %s, %b {axis = 1 : i64, epsilon = 1.0e-05 : f32} : tensor<4x8xf32>, tensor<8xf32> -> tensor<4xf32>
  %loss = nn.softmax_cross_entropy %y#0, %l : tensor<4x8xf32>, tensor<4xi64>
  return %loss : tensor<f32>
}

// -----

nn.parameter @w : tensor<4x2x4xf32>
// A constant scale and no bias (elementwise_affine=False), normalized over
// the last two axes: only dx is built.
// CHECK-LABEL: func.func @layer_norm_no_affine(
// CHECK: %[[W:.+]] = nn.param @w
// CHECK: %[[Y:[^,]+]], %[[YM:[^,]+]], %[[YR:[^ ]+]] = nn.layer_norm %[[W]], %[[S:[^ ]+]] {axis = 1 : i64
// CHECK: nn.softmax_cross_entropy_grad
// CHECK-NEXT: %[[DY:.+]] = nn.reshape
// CHECK-NEXT: %[[DW:.+]] = nn.layer_norm_grad %[[W]], %[[YM]], %[[YR]], %[[S]], %[[DY]] {axis = 1 : i64} : tensor<4x2x4xf32>, tensor<4xf32>, tensor<2x4xf32>
// CHECK-NEXT: nn.param_grad %[[W]], %[[DW]]
// CHECK-NOT: nn.layer_norm_scale_grad
func.func @layer_norm_no_affine(%l: tensor<4xi64>) -> (tensor<f32> {nn.loss}) {
  %w = nn.param @w : tensor<4x2x4xf32>
  %s = nn.constant dense<1.0> : tensor<2x4xf32>
  %y:3 = nn.layer_norm %w, %s {axis = 1 : i64, epsilon = 1.0e-05 : f32} : tensor<4x2x4xf32>, tensor<2x4xf32> -> tensor<4xf32>
  %f = nn.reshape %y#0 : tensor<4x2x4xf32> -> tensor<4x8xf32>
  %loss = nn.softmax_cross_entropy %f, %l : tensor<4x8xf32>, tensor<4xi64>
  return %loss : tensor<f32>
}

// -----

nn.parameter @w : tensor<4x8xf32>
// An activation chain: erf_grad takes the op's input, relu_grad, sigmoid_grad
// and tanh_grad its output; neg's gradient is a neg.
// CHECK-LABEL: func.func @activations(
// CHECK: %[[W:.+]] = nn.param @w
// CHECK: %[[N:.+]] = nn.neg %[[W]]
// CHECK: %[[T:.+]] = nn.tanh %[[N]]
// CHECK: %[[S:.+]] = nn.sigmoid %[[T]]
// CHECK: %[[R:.+]] = nn.relu %[[S]]
// CHECK: %[[E:.+]] = nn.erf %[[R]]
// CHECK: %[[DE:.+]] = nn.softmax_cross_entropy_grad %[[E]],
// CHECK-NEXT: %[[DR:.+]] = nn.erf_grad %[[R]], %[[DE]] : tensor<4x8xf32>
// CHECK-NEXT: %[[DS:.+]] = nn.relu_grad %[[R]], %[[DR]] : tensor<4x8xf32>
// CHECK-NEXT: %[[DT:.+]] = nn.sigmoid_grad %[[S]], %[[DS]] : tensor<4x8xf32>
// CHECK-NEXT: %[[DN:.+]] = nn.tanh_grad %[[T]], %[[DT]] : tensor<4x8xf32>
// CHECK-NEXT: %[[DW:.+]] = nn.neg %[[DN]] : tensor<4x8xf32>
// CHECK-NEXT: nn.param_grad %[[W]], %[[DW]]
func.func @activations(%l: tensor<4xi64>) -> (tensor<f32> {nn.loss}) {
  %w = nn.param @w : tensor<4x8xf32>
  %n = nn.neg %w : tensor<4x8xf32>
  %t = nn.tanh %n : tensor<4x8xf32>
  %s = nn.sigmoid %t : tensor<4x8xf32>
  %r = nn.relu %s : tensor<4x8xf32>
  %e = nn.erf %r : tensor<4x8xf32>
  %loss = nn.softmax_cross_entropy %e, %l : tensor<4x8xf32>, tensor<4xi64>
  return %loss : tensor<f32>
}

// -----

nn.parameter @w : tensor<4x8xf32>
// reduce_max: torch's amax gradient, dY split evenly among the ties:
// mask = (x == max), count = its sum over the reduced axis, (dY / count) *
// mask.
// CHECK-LABEL: func.func @reduce_max(
// CHECK: %[[W:.+]] = nn.param @w
// CHECK: %[[M:.+]] = nn.reduce_max %[[W]] : tensor<4x8xf32> -> tensor<4x1xf32>
// CHECK: %[[DY:.+]] = nn.softmax_cross_entropy_grad
// CHECK: %[[DM:.+]] = nn.reduce_to %[[DY]] : tensor<4x8xf32> -> tensor<4x1xf32>
// CHECK-NEXT: %[[MASK:.+]] = nn.equal %[[W]], %[[M]] : tensor<4x8xf32>, tensor<4x1xf32> -> tensor<4x8xf32>
// CHECK-NEXT: %[[CNT:.+]] = nn.reduce_to %[[MASK]] : tensor<4x8xf32> -> tensor<4x1xf32>
// CHECK-NEXT: %[[SHARE:.+]] = nn.div %[[DM]], %[[CNT]] : tensor<4x1xf32>, tensor<4x1xf32> -> tensor<4x1xf32>
// CHECK-NEXT: %[[DX:.+]] = nn.mul %[[SHARE]], %[[MASK]] : tensor<4x1xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
// CHECK: nn.param_grad %[[W]], %{{.+}} : tensor<4x8xf32>
func.func @reduce_max(%l: tensor<4xi64>) -> (tensor<f32> {nn.loss}) {
  %w = nn.param @w : tensor<4x8xf32>
  %m = nn.reduce_max %w : tensor<4x8xf32> -> tensor<4x1xf32>
  %y = nn.add %w, %m : tensor<4x8xf32>, tensor<4x1xf32> -> tensor<4x8xf32>
  %loss = nn.softmax_cross_entropy %y, %l : tensor<4x8xf32>, tensor<4xi64>
  return %loss : tensor<f32>
}

// -----

nn.parameter @w : tensor<4x8xf32>
nn.parameter @b : tensor<8xf32>
// max / min: each operand's gradient from max_grad / min_grad with the
// operands in its order (torch's tie rule is in the op), reduced for the
// broadcast operand; clip: clip_grad from the input with the bounds.
// CHECK-LABEL: func.func @max_min_clip(
// CHECK: %[[W:.+]] = nn.param @w
// CHECK: %[[B:.+]] = nn.param @b
// CHECK: %[[C:.+]] = nn.clip %[[W]] {max = 1.000000e+00 : f32} : tensor<4x8xf32>
// CHECK: %[[MX:.+]] = nn.max %[[C]], %[[B]]
// CHECK: %[[MN:.+]] = nn.min %[[B]], %[[MX]]
// CHECK: %[[DY:.+]] = nn.softmax_cross_entropy_grad %[[MN]],
// CHECK-NEXT: %[[DB1:.+]] = nn.min_grad %[[B]], %[[MX]], %[[DY]] : tensor<8xf32>, tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
// CHECK-NEXT: %[[DMX:.+]] = nn.min_grad %[[MX]], %[[B]], %[[DY]] : tensor<4x8xf32>, tensor<8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
// CHECK-NEXT: %[[RB1:.+]] = nn.reduce_to %[[DB1]] : tensor<4x8xf32> -> tensor<8xf32>
// CHECK-NEXT: %[[DC:.+]] = nn.max_grad %[[C]], %[[B]], %[[DMX]] : tensor<4x8xf32>, tensor<8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
// CHECK-NEXT: %[[DB2:.+]] = nn.max_grad %[[B]], %[[C]], %[[DMX]] : tensor<8xf32>, tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
// CHECK-NEXT: %[[RB2:.+]] = nn.reduce_to %[[DB2]] : tensor<4x8xf32> -> tensor<8xf32>
// CHECK-NEXT: %[[DB:.+]] = nn.add %[[RB1]], %[[RB2]] : tensor<8xf32>, tensor<8xf32> -> tensor<8xf32>
// CHECK-NEXT: %[[DW:.+]] = nn.clip_grad %[[W]], %[[DC]] {max = 1.000000e+00 : f32} : tensor<4x8xf32>
// CHECK-NEXT: nn.param_grad %[[W]], %[[DW]] : tensor<4x8xf32>
// CHECK-NEXT: nn.param_grad %[[B]], %[[DB]] : tensor<8xf32>
func.func @max_min_clip(%l: tensor<4xi64>) -> (tensor<f32> {nn.loss}) {
  %w = nn.param @w : tensor<4x8xf32>
  %b = nn.param @b : tensor<8xf32>
  %c = nn.clip %w {max = 1.0 : f32} : tensor<4x8xf32>
  %mx = nn.max %c, %b : tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  %mn = nn.min %b, %mx : tensor<8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %loss = nn.softmax_cross_entropy %mn, %l : tensor<4x8xf32>, tensor<4xi64>
  return %loss : tensor<f32>
}

// -----

nn.parameter @w : tensor<4x8xf32>
// nll_loss: its gradient op carries ignore_index and sum; log_softmax's
// reads the log-softmax's output.
// CHECK-LABEL: func.func @nll_loss(
// CHECK: %[[W:.+]] = nn.param @w
// CHECK: %[[Y:.+]] = nn.log_softmax %[[W]] {axis = 1 : i64} : tensor<4x8xf32>
// CHECK: %[[LOSS:.+]] = nn.nll_loss %[[Y]], %[[L:[^ ]+]] {ignore_index = 3 : i64, sum}
// CHECK: %[[ONE:.+]] = nn.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[DY:.+]] = nn.nll_loss_grad %[[Y]], %[[L]], %[[ONE]] {ignore_index = 3 : i64, sum} : tensor<4x8xf32>, tensor<4xi64>
// CHECK-NEXT: %[[DW:.+]] = nn.log_softmax_grad %[[Y]], %[[DY]] {axis = 1 : i64} : tensor<4x8xf32>
// CHECK-NEXT: nn.param_grad %[[W]], %[[DW]]
func.func @nll_loss(%l: tensor<4xi64>) -> (tensor<f32> {nn.loss}) {
  %w = nn.param @w : tensor<4x8xf32>
  %y = nn.log_softmax %w {axis = 1 : i64} : tensor<4x8xf32>
  %loss = nn.nll_loss %y, %l {ignore_index = 3 : i64, sum} : tensor<4x8xf32>, tensor<4xi64>
  return %loss : tensor<f32>
}

// -----

nn.parameter @w : tensor<4x8xf32>
nn.parameter @v : tensor<4x8xf32>
nn.parameter @b : tensor<8xf32>
// add: the gradient passes through unchanged to same-shape operands and is
// reduced (reduce_to) only for the broadcast one, whichever side it is on.
// CHECK-LABEL: func.func @add(
// CHECK: %[[W:.+]] = nn.param @w
// CHECK: %[[V:.+]] = nn.param @v
// CHECK: %[[B:.+]] = nn.param @b
// CHECK: %[[DY:.+]] = nn.softmax_cross_entropy_grad
// CHECK-NEXT: %[[DB:.+]] = nn.reduce_to %[[DY]] : tensor<4x8xf32> -> tensor<8xf32>
// CHECK-NOT: nn.reduce_to
// CHECK-NEXT: nn.param_grad %[[W]], %[[DY]] : tensor<4x8xf32>
// CHECK-NEXT: nn.param_grad %[[V]], %[[DY]] : tensor<4x8xf32>
// CHECK-NEXT: nn.param_grad %[[B]], %[[DB]] : tensor<8xf32>
func.func @add(%l: tensor<4xi64>) -> (tensor<f32> {nn.loss}) {
  %w = nn.param @w : tensor<4x8xf32>
  %v = nn.param @v : tensor<4x8xf32>
  %b = nn.param @b : tensor<8xf32>
  %s = nn.add %w, %v : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %y = nn.add %b, %s : tensor<8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %loss = nn.softmax_cross_entropy %y, %l : tensor<4x8xf32>, tensor<4xi64>
  return %loss : tensor<f32>
}

// -----

nn.parameter @w : tensor<4x8xf32>
nn.parameter @b : tensor<1x8xf32>
// sub: dlhs = dY, drhs = reduce_to(-dY) for the broadcast [1, 8] rhs.
// CHECK-LABEL: func.func @sub(
// CHECK: %[[W:.+]] = nn.param @w
// CHECK: %[[B:.+]] = nn.param @b
// CHECK: %[[DY:.+]] = nn.softmax_cross_entropy_grad
// CHECK-NEXT: %[[NEG:.+]] = nn.neg %[[DY]] : tensor<4x8xf32>
// CHECK-NEXT: %[[DB:.+]] = nn.reduce_to %[[NEG]] : tensor<4x8xf32> -> tensor<1x8xf32>
// CHECK-NEXT: nn.param_grad %[[W]], %[[DY]] : tensor<4x8xf32>
// CHECK-NEXT: nn.param_grad %[[B]], %[[DB]] : tensor<1x8xf32>
func.func @sub(%l: tensor<4xi64>) -> (tensor<f32> {nn.loss}) {
  %w = nn.param @w : tensor<4x8xf32>
  %b = nn.param @b : tensor<1x8xf32>
  %y = nn.sub %w, %b : tensor<4x8xf32>, tensor<1x8xf32> -> tensor<4x8xf32>
  %loss = nn.softmax_cross_entropy %y, %l : tensor<4x8xf32>, tensor<4xi64>
  return %loss : tensor<f32>
}

// -----

nn.parameter @w : tensor<4x8xf32>
// sub with a data lhs: only the parameter's gradient (-dY) is kept.
// CHECK-LABEL: func.func @sub_data_lhs(
// CHECK: %[[W:.+]] = nn.param @w
// CHECK: %[[DY:.+]] = nn.softmax_cross_entropy_grad
// CHECK-NEXT: %[[NEG:.+]] = nn.neg %[[DY]] : tensor<4x8xf32>
// CHECK-NEXT: nn.param_grad %[[W]], %[[NEG]] : tensor<4x8xf32>
func.func @sub_data_lhs(%x: tensor<4x8xf32>, %l: tensor<4xi64>) -> (tensor<f32> {nn.loss}) {
  %w = nn.param @w : tensor<4x8xf32>
  %y = nn.sub %x, %w : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %loss = nn.softmax_cross_entropy %y, %l : tensor<4x8xf32>, tensor<4xi64>
  return %loss : tensor<f32>
}

// -----

nn.parameter @w : tensor<4x8xf32>
nn.parameter @s : tensor<f32>
// mul by a scalar parameter: dW = dY * s (no reduction), ds = reduce_to(dY * W)
// down to the scalar.
// CHECK-LABEL: func.func @mul(
// CHECK: %[[W:.+]] = nn.param @w
// CHECK: %[[S:.+]] = nn.param @s
// CHECK: %[[DY:.+]] = nn.softmax_cross_entropy_grad
// CHECK-NEXT: %[[DW:.+]] = nn.mul %[[DY]], %[[S]] : tensor<4x8xf32>, tensor<f32> -> tensor<4x8xf32>
// CHECK-NEXT: %[[P:.+]] = nn.mul %[[DY]], %[[W]] : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
// CHECK-NEXT: %[[DS:.+]] = nn.reduce_to %[[P]] : tensor<4x8xf32> -> tensor<f32>
// CHECK-NEXT: nn.param_grad %[[W]], %[[DW]] : tensor<4x8xf32>
// CHECK-NEXT: nn.param_grad %[[S]], %[[DS]] : tensor<f32>
func.func @mul(%l: tensor<4xi64>) -> (tensor<f32> {nn.loss}) {
  %w = nn.param @w : tensor<4x8xf32>
  %s = nn.param @s : tensor<f32>
  %y = nn.mul %w, %s : tensor<4x8xf32>, tensor<f32> -> tensor<4x8xf32>
  %loss = nn.softmax_cross_entropy %y, %l : tensor<4x8xf32>, tensor<4xi64>
  return %loss : tensor<f32>
}

// -----

nn.parameter @w : tensor<4x8xf32>
nn.parameter @d : tensor<4x1xf32>
// div Y = W / D with D: [4, 1]: dW = dY / D, dD = reduce_to(-(dY * Y) / D).
// CHECK-LABEL: func.func @div(
// CHECK: %[[W:.+]] = nn.param @w
// CHECK: %[[D:.+]] = nn.param @d
// CHECK: %[[Y:.+]] = nn.div %[[W]], %[[D]]
// CHECK: %[[DY:.+]] = nn.softmax_cross_entropy_grad %[[Y]],
// CHECK-NEXT: %[[DW:.+]] = nn.div %[[DY]], %[[D]] : tensor<4x8xf32>, tensor<4x1xf32> -> tensor<4x8xf32>
// CHECK-NEXT: %[[DYY:.+]] = nn.mul %[[DY]], %[[Y]] : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
// CHECK-NEXT: %[[Q:.+]] = nn.div %[[DYY]], %[[D]] : tensor<4x8xf32>, tensor<4x1xf32> -> tensor<4x8xf32>
// CHECK-NEXT: %[[NQ:.+]] = nn.neg %[[Q]] : tensor<4x8xf32>
// CHECK-NEXT: %[[DD:.+]] = nn.reduce_to %[[NQ]] : tensor<4x8xf32> -> tensor<4x1xf32>
// CHECK-NEXT: nn.param_grad %[[W]], %[[DW]] : tensor<4x8xf32>
// CHECK-NEXT: nn.param_grad %[[D]], %[[DD]] : tensor<4x1xf32>
func.func @div(%l: tensor<4xi64>) -> (tensor<f32> {nn.loss}) {
  %w = nn.param @w : tensor<4x8xf32>
  %d = nn.param @d : tensor<4x1xf32>
  %y = nn.div %w, %d : tensor<4x8xf32>, tensor<4x1xf32> -> tensor<4x8xf32>
  %loss = nn.softmax_cross_entropy %y, %l : tensor<4x8xf32>, tensor<4xi64>
  return %loss : tensor<f32>
}

// -----

nn.parameter @w : tensor<4x8xf32>
// A parameter used by two ops: its two gradients are summed with nn.add (the
// later use's gradient comes first).
// CHECK-LABEL: func.func @used_twice(
// CHECK: %[[W:.+]] = nn.param @w
// CHECK: %[[T:.+]] = nn.tanh %[[W]]
// CHECK: %[[S:.+]] = nn.sigmoid %[[W]]
// CHECK: %[[DY:.+]] = nn.softmax_cross_entropy_grad
// CHECK-NEXT: %[[GS:.+]] = nn.sigmoid_grad %[[S]], %[[DY]]
// CHECK-NEXT: %[[GT:.+]] = nn.tanh_grad %[[T]], %[[DY]]
// CHECK-NEXT: %[[SUM:.+]] = nn.add %[[GS]], %[[GT]] : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
// CHECK-NEXT: nn.param_grad %[[W]], %[[SUM]] : tensor<4x8xf32>
func.func @used_twice(%l: tensor<4xi64>) -> (tensor<f32> {nn.loss}) {
  %w = nn.param @w : tensor<4x8xf32>
  %a = nn.tanh %w : tensor<4x8xf32>
  %b = nn.sigmoid %w : tensor<4x8xf32>
  %y = nn.add %a, %b : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %loss = nn.softmax_cross_entropy %y, %l : tensor<4x8xf32>, tensor<4xi64>
  return %loss : tensor<f32>
}

// -----

nn.parameter @w : tensor<4x8xf32>
// W * W: both operand gradients go to W and are summed: 2 W dY.
// CHECK-LABEL: func.func @square(
// CHECK: %[[W:.+]] = nn.param @w
// CHECK: %[[DY:.+]] = nn.softmax_cross_entropy_grad
// CHECK-NEXT: %[[G0:.+]] = nn.mul %[[DY]], %[[W]]
// CHECK-NEXT: %[[G1:.+]] = nn.mul %[[DY]], %[[W]]
// CHECK-NEXT: %[[SUM:.+]] = nn.add %[[G0]], %[[G1]]
// CHECK-NEXT: nn.param_grad %[[W]], %[[SUM]]
func.func @square(%l: tensor<4xi64>) -> (tensor<f32> {nn.loss}) {
  %w = nn.param @w : tensor<4x8xf32>
  %y = nn.mul %w, %w : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %loss = nn.softmax_cross_entropy %y, %l : tensor<4x8xf32>, tensor<4xi64>
  return %loss : tensor<f32>
}

// -----

nn.parameter @a : tensor<4x3xf32>
nn.parameter @b : tensor<4x5xf32>
// concat along axis 1 of [a: 3 | x: 8 | b: 5]: each parameter's gradient is
// the slice of dY at its offset (0 and 3 + 8 = 11); the data input in the
// middle gets no slice.
// CHECK-LABEL: func.func @concat(
// CHECK: %[[A:.+]] = nn.param @a
// CHECK: %[[B:.+]] = nn.param @b
// CHECK: %[[DY:.+]] = nn.softmax_cross_entropy_grad
// CHECK-NEXT: %[[DA:.+]] = nn.slice %[[DY]] {axis = 1 : i64, start = 0 : i64} : tensor<4x16xf32> -> tensor<4x3xf32>
// CHECK-NEXT: %[[DB:.+]] = nn.slice %[[DY]] {axis = 1 : i64, start = 11 : i64} : tensor<4x16xf32> -> tensor<4x5xf32>
// CHECK-NEXT: nn.param_grad %[[A]], %[[DA]] : tensor<4x3xf32>
// CHECK-NEXT: nn.param_grad %[[B]], %[[DB]] : tensor<4x5xf32>
func.func @concat(%x: tensor<4x8xf32>, %l: tensor<4xi64>) -> (tensor<f32> {nn.loss}) {
  %a = nn.param @a : tensor<4x3xf32>
  %b = nn.param @b : tensor<4x5xf32>
  %cc = nn.concat %a, %x, %b {axis = 1 : i64} : (tensor<4x3xf32>, tensor<4x8xf32>, tensor<4x5xf32>) -> tensor<4x16xf32>
  %loss = nn.softmax_cross_entropy %cc, %l : tensor<4x16xf32>, tensor<4xi64>
  return %loss : tensor<f32>
}

// -----

nn.parameter @a : tensor<2x8xf32>
nn.parameter @b : tensor<4x8xf32>
// concat along axis 0: the slices are taken along axis 0.
// CHECK-LABEL: func.func @concat_axis0(
// CHECK: %[[A:.+]] = nn.param @a
// CHECK: %[[B:.+]] = nn.param @b
// CHECK: %[[DY:.+]] = nn.softmax_cross_entropy_grad
// CHECK-NEXT: %[[DA:.+]] = nn.slice %[[DY]] {axis = 0 : i64, start = 0 : i64} : tensor<6x8xf32> -> tensor<2x8xf32>
// CHECK-NEXT: %[[DB:.+]] = nn.slice %[[DY]] {axis = 0 : i64, start = 2 : i64} : tensor<6x8xf32> -> tensor<4x8xf32>
// CHECK-NEXT: nn.param_grad %[[A]], %[[DA]] : tensor<2x8xf32>
// CHECK-NEXT: nn.param_grad %[[B]], %[[DB]] : tensor<4x8xf32>
func.func @concat_axis0(%l: tensor<6xi64>) -> (tensor<f32> {nn.loss}) {
  %a = nn.param @a : tensor<2x8xf32>
  %b = nn.param @b : tensor<4x8xf32>
  %cc = nn.concat %a, %b {axis = 0 : i64} : (tensor<2x8xf32>, tensor<4x8xf32>) -> tensor<6x8xf32>
  %loss = nn.softmax_cross_entropy %cc, %l : tensor<6x8xf32>, tensor<6xi64>
  return %loss : tensor<f32>
}

// -----

nn.parameter @w : tensor<2x16xf32>
// reshape: the gradient is reshaped back to the input's shape.
// CHECK-LABEL: func.func @reshape(
// CHECK: %[[W:.+]] = nn.param @w
// CHECK: %[[DY:.+]] = nn.softmax_cross_entropy_grad
// CHECK-NEXT: %[[DW:.+]] = nn.reshape %[[DY]] : tensor<4x8xf32> -> tensor<2x16xf32>
// CHECK-NEXT: nn.param_grad %[[W]], %[[DW]] : tensor<2x16xf32>
func.func @reshape(%l: tensor<4xi64>) -> (tensor<f32> {nn.loss}) {
  %w = nn.param @w : tensor<2x16xf32>
  %r = nn.reshape %w : tensor<2x16xf32> -> tensor<4x8xf32>
  %loss = nn.softmax_cross_entropy %r, %l : tensor<4x8xf32>, tensor<4xi64>
  return %loss : tensor<f32>
}

// -----

nn.parameter @w : tensor<4x8xf32>
nn.parameter @unused : tensor<4x8xf32>
nn.parameter @dead : tensor<3xf32>
// Parameters that do not reach the loss (one feeds a second result, one is
// unused) get no param_grad. Ops without a gradient rule (nn.slice) are fine
// off the differentiated path: on a data input, or after a parameter that does
// not reach the loss.
// CHECK-LABEL: func.func @not_reaching_loss(
// CHECK: %[[W:.+]] = nn.param @w
// CHECK: %[[U:.+]] = nn.param @unused
// CHECK: %[[D:.+]] = nn.param @dead
// CHECK: %[[DY:.+]] = nn.softmax_cross_entropy_grad
// CHECK-NEXT: nn.param_grad %[[W]], %[[DY]]
// CHECK-NEXT: return
// CHECK-NOT: nn.param_grad
func.func @not_reaching_loss(%x: tensor<4x16xf32>, %l: tensor<4xi64>) -> (tensor<f32> {nn.loss}, tensor<4x2xf32>) {
  %w = nn.param @w : tensor<4x8xf32>
  %u = nn.param @unused : tensor<4x8xf32>
  %d = nn.param @dead : tensor<3xf32>
  %xs = nn.slice %x {axis = 1 : i64, start = 8 : i64} : tensor<4x16xf32> -> tensor<4x8xf32>
  %y = nn.add %xs, %w : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %t = nn.tanh %u : tensor<4x8xf32>
  %us = nn.slice %t {axis = 1 : i64, start = 2 : i64} : tensor<4x8xf32> -> tensor<4x2xf32>
  %loss = nn.softmax_cross_entropy %y, %l : tensor<4x8xf32>, tensor<4xi64>
  return %loss, %us : tensor<f32>, tensor<4x2xf32>
}

// -----

nn.parameter @w : tensor<4x8xf32>
// The loss may be any result: here result #1.
// CHECK-LABEL: func.func @loss_second(
// CHECK: %[[W:.+]] = nn.param @w
// CHECK: %[[T:.+]] = nn.tanh %[[W]]
// CHECK: %[[LOSS:.+]] = nn.softmax_cross_entropy %[[W]],
// CHECK: %[[DY:.+]] = nn.softmax_cross_entropy_grad %[[W]],
// CHECK-NEXT: nn.param_grad %[[W]], %[[DY]]
// CHECK-NEXT: return %[[T]], %[[LOSS]]
func.func @loss_second(%l: tensor<4xi64>) -> (tensor<4x8xf32>, tensor<f32> {nn.loss}) {
  %w = nn.param @w : tensor<4x8xf32>
  %t = nn.tanh %w : tensor<4x8xf32>
  %loss = nn.softmax_cross_entropy %w, %l : tensor<4x8xf32>, tensor<4xi64>
  return %t, %loss : tensor<4x8xf32>, tensor<f32>
}

// -----

nn.parameter @w : tensor<2x3x4xf32>
// transpose: the gradient is transposed back with the inverse permutation
// ([2, 0, 1] -> [1, 2, 0]).
// CHECK-LABEL: func.func @transpose_grad
// CHECK: %[[T:.+]] = nn.transpose %[[W:.+]], [2, 0, 1] : tensor<2x3x4xf32> -> tensor<4x2x3xf32>
// CHECK: %[[DT:.+]] = nn.reshape %{{.+}} : tensor<4x6xf32> -> tensor<4x2x3xf32>
// CHECK: %[[DW:.+]] = nn.transpose %[[DT]], [1, 2, 0] : tensor<4x2x3xf32> -> tensor<2x3x4xf32>
// CHECK: nn.param_grad %[[W]], %[[DW]] : tensor<2x3x4xf32>
func.func @transpose_grad(%y: tensor<4xi64>) -> (tensor<f32> {nn.loss}) {
  %w = nn.param @w : tensor<2x3x4xf32>
  %t = nn.transpose %w, [2, 0, 1] : tensor<2x3x4xf32> -> tensor<4x2x3xf32>
  %r = nn.reshape %t : tensor<4x2x3xf32> -> tensor<4x6xf32>
  %l = nn.softmax_cross_entropy %r, %y : tensor<4x6xf32>, tensor<4xi64>
  return %l : tensor<f32>
}

// -----

nn.parameter @w : tensor<4x8xf32>
// A mean-squared error from ops: the gradient of nn.reduce_to broadcasts
// back (nn.broadcast_to), the division by the count is a division of the
// seed, and x ** 2 (a constant exponent 2) differentiates to dy * (2 * x).
// CHECK-LABEL: func.func @mse_pow(
// CHECK: %[[W:.+]] = nn.param @w
// CHECK: %[[D:.+]] = nn.sub %[[W]], %{{.+}}
// CHECK: %[[TWO:.+]] = nn.constant dense<2.000000e+00>
// CHECK: nn.pow %[[D]], %[[TWO]]
// CHECK: %[[LOSS:.+]] = nn.div
// CHECK: %[[DS:.+]] = nn.div
// CHECK: %[[DP:.+]] = nn.broadcast_to %[[DS]] : tensor<f32> -> tensor<4x8xf32>
// CHECK: %[[C2:.+]] = nn.constant dense<2.000000e+00> : tensor<f32>
// CHECK: %[[TX:.+]] = nn.mul %[[C2]], %[[D]] : tensor<f32>, tensor<4x8xf32> -> tensor<4x8xf32>
// CHECK: %[[DD:.+]] = nn.mul %[[DP]], %[[TX]]
// CHECK: nn.param_grad %[[W]], %[[DD]]
// CHECK-NOT: nn.log
func.func @mse_pow(%t: tensor<4x8xf32>) -> (tensor<f32> {nn.loss}) {
  %w = nn.param @w : tensor<4x8xf32>
  %d = nn.sub %w, %t : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %two = nn.constant dense<2.0> : tensor<f32>
  %p = nn.pow %d, %two : tensor<4x8xf32>, tensor<f32> -> tensor<4x8xf32>
  %s = nn.reduce_to %p : tensor<4x8xf32> -> tensor<f32>
  %n = nn.constant dense<32.0> : tensor<f32>
  %loss = nn.div %s, %n : tensor<f32>, tensor<f32> -> tensor<f32>
  return %loss : tensor<f32>
}

// -----

nn.parameter @w : tensor<4x8xf32>
nn.parameter @e : tensor<f32>
// A learned exponent: d/dx = dy * (e * x^(e - 1)), d/de = sum(dy * (y * log x)).
// CHECK-LABEL: func.func @pow_tensor(
// CHECK: %[[W:.+]] = nn.param @w
// CHECK: %[[E:.+]] = nn.param @e
// CHECK: %[[Y:.+]] = nn.pow %[[W]], %[[E]]
// CHECK: %[[EM1:.+]] = nn.sub %[[E]], %{{.+}} : tensor<f32>, tensor<f32> -> tensor<f32>
// CHECK: %[[P:.+]] = nn.pow %[[W]], %[[EM1]]
// CHECK: %[[EP:.+]] = nn.mul %[[E]], %[[P]]
// CHECK: %[[DW:.+]] = nn.mul %{{.+}}, %[[EP]]
// CHECK: %[[LOG:.+]] = nn.log %[[W]]
// CHECK: %[[YL:.+]] = nn.mul %[[Y]], %[[LOG]]
// CHECK: %[[DE:.+]] = nn.mul %{{.+}}, %[[YL]]
// CHECK: %[[DER:.+]] = nn.reduce_to %[[DE]] : tensor<4x8xf32> -> tensor<f32>
// CHECK-DAG: nn.param_grad %[[W]], %[[DW]]
// CHECK-DAG: nn.param_grad %[[E]], %[[DER]]
func.func @pow_tensor(%l: tensor<4xi64>) -> (tensor<f32> {nn.loss}) {
  %w = nn.param @w : tensor<4x8xf32>
  %e = nn.param @e : tensor<f32>
  %y = nn.pow %w, %e : tensor<4x8xf32>, tensor<f32> -> tensor<4x8xf32>
  %loss = nn.softmax_cross_entropy %y, %l : tensor<4x8xf32>, tensor<4xi64>
  return %loss : tensor<f32>
}

// -----

nn.parameter @w : tensor<2x6x5xf32>
nn.parameter @u : tensor<1x2x4x3xf32>
// nn.batch_matmul: dop(A) = dY op(B)^T, dop(B) = op(A)^T dY as batched
// products with transpose flags, summed (nn.reduce_to) over the batch dims
// the operand was broadcast along; no reduce_to for a full-batch operand.
// CHECK-LABEL: func.func @batch_matmul(
// CHECK-SAME: %[[X:[^:]+]]: tensor<4x2x3x5xf32>
// CHECK: %[[W:.+]] = nn.param @w
// CHECK: %[[Y:.+]] = nn.batch_matmul %[[X]], %[[W]] {transB = true} : (tensor<4x2x3x5xf32>, tensor<2x6x5xf32>) -> tensor<4x2x3x6xf32>
// CHECK: %[[U:.+]] = nn.param @u
// CHECK: %[[Z:.+]] = nn.batch_matmul %[[U]], %[[Y]] : (tensor<1x2x4x3xf32>, tensor<4x2x3x6xf32>) -> tensor<4x2x4x6xf32>
// CHECK: %[[DZ:.+]] = nn.reshape %{{.+}} : tensor<4x48xf32> -> tensor<4x2x4x6xf32>
// CHECK-NEXT: %[[DUF:.+]] = nn.batch_matmul %[[DZ]], %[[Y]] {transB = true} : (tensor<4x2x4x6xf32>, tensor<4x2x3x6xf32>) -> tensor<4x2x4x3xf32>
// CHECK-NEXT: %[[DU:.+]] = nn.reduce_to %[[DUF]] : tensor<4x2x4x3xf32> -> tensor<1x2x4x3xf32>
// CHECK-NEXT: %[[DY:.+]] = nn.batch_matmul %[[U]], %[[DZ]] {transA = true} : (tensor<1x2x4x3xf32>, tensor<4x2x4x6xf32>) -> tensor<4x2x3x6xf32>
// CHECK-NOT: nn.reduce_to %[[DY]]
// CHECK: %[[DWF:.+]] = nn.batch_matmul %[[DY]], %[[X]] {transA = true} : (tensor<4x2x3x6xf32>, tensor<4x2x3x5xf32>) -> tensor<4x2x6x5xf32>
// CHECK-NEXT: %[[DW:.+]] = nn.reduce_to %[[DWF]] : tensor<4x2x6x5xf32> -> tensor<2x6x5xf32>
// CHECK-DAG: nn.param_grad %[[U]], %[[DU]]
// CHECK-DAG: nn.param_grad %[[W]], %[[DW]]
func.func @batch_matmul(%x: tensor<4x2x3x5xf32>, %l: tensor<4xi64>) -> (tensor<f32> {nn.loss}) {
  %w = nn.param @w : tensor<2x6x5xf32>
  %y = nn.batch_matmul %x, %w {transB = true} : (tensor<4x2x3x5xf32>, tensor<2x6x5xf32>) -> tensor<4x2x3x6xf32>
  %u = nn.param @u : tensor<1x2x4x3xf32>
  %z = nn.batch_matmul %u, %y : (tensor<1x2x4x3xf32>, tensor<4x2x3x6xf32>) -> tensor<4x2x4x6xf32>
  %f = nn.reshape %z : tensor<4x2x4x6xf32> -> tensor<4x48xf32>
  %loss = nn.softmax_cross_entropy %f, %l : tensor<4x48xf32>, tensor<4xi64>
  return %loss : tensor<f32>
}

// -----

nn.parameter @w : tensor<4x8xf32>
// nn.where sends dy to the selected operand (zeros elsewhere, nothing to the
// mask: comparisons pass no gradient); nn.slice's gradient is dy back in
// place between zeros (nn.concat).
// CHECK-LABEL: func.func @where_slice(
// CHECK: %[[W:.+]] = nn.param @w
// CHECK: %[[M:.+]] = nn.equal %[[W]], %{{.+}} : tensor<4x8xf32>, tensor<f32> -> tensor<4x8xf32>
// CHECK: %[[S:.+]] = nn.slice %{{.+}} {axis = 1 : i64, start = 2 : i64} : tensor<4x8xf32> -> tensor<4x5xf32>
// CHECK: %[[DS:.+]] = nn.softmax_cross_entropy_grad %[[S]]
// CHECK: %[[Z1:.+]] = nn.constant dense<0.000000e+00> : tensor<4x2xf32>
// CHECK: %[[Z2:.+]] = nn.constant dense<0.000000e+00> : tensor<4x1xf32>
// CHECK: %[[DY:.+]] = nn.concat %[[Z1]], %[[DS]], %[[Z2]] {axis = 1 : i64}
// CHECK: %[[Z:.+]] = nn.constant dense<0.000000e+00> : tensor<f32>
// CHECK: %[[DA:.+]] = nn.where %[[M]], %[[DY]], %[[Z]]
// CHECK-NOT: nn.equal
// CHECK: nn.param_grad %[[W]], %[[DA]]
func.func @where_slice(%l: tensor<4xi64>, %b: tensor<f32>) -> (tensor<f32> {nn.loss}) {
  %w = nn.param @w : tensor<4x8xf32>
  %zero = nn.constant dense<0.0> : tensor<f32>
  %m = nn.equal %w, %zero : tensor<4x8xf32>, tensor<f32> -> tensor<4x8xf32>
  %y = nn.where %m, %w, %b : tensor<4x8xf32>, tensor<4x8xf32>, tensor<f32> -> tensor<4x8xf32>
  %s = nn.slice %y {axis = 1 : i64, start = 2 : i64} : tensor<4x8xf32> -> tensor<4x5xf32>
  %loss = nn.softmax_cross_entropy %s, %l : tensor<4x5xf32>, tensor<4xi64>
  return %loss : tensor<f32>
}

// -----

nn.parameter @w : tensor<4x8xf32>
// nn.dropout's gradient redraws its mask (same key and ratio) instead of
// keeping it: nothing of the forward stays alive for it.
// CHECK-LABEL: func.func @dropout(
// CHECK: %[[W:.+]] = nn.param @w
// CHECK: nn.dropout %[[W]] {key = 7 : i64, ratio = 2.500000e-01 : f32}
// CHECK: %[[DY:.+]] = nn.softmax_cross_entropy_grad
// CHECK-NEXT: %[[DW:.+]] = nn.dropout_grad %[[DY]] {key = 7 : i64, ratio = 2.500000e-01 : f32} : tensor<4x8xf32>
// CHECK-NEXT: nn.param_grad %[[W]], %[[DW]]
func.func @dropout(%l: tensor<4xi64>) -> (tensor<f32> {nn.loss}) {
  %w = nn.param @w : tensor<4x8xf32>
  %y = nn.dropout %w {key = 7 : i64, ratio = 0.25 : f32} : tensor<4x8xf32>
  %loss = nn.softmax_cross_entropy %y, %l : tensor<4x8xf32>, tensor<4xi64>
  return %loss : tensor<f32>
}

// -----

nn.parameter @tok.weight : tensor<10x4xf32>
nn.parameter @pos.weight : tensor<3x4xf32>
// Embeddings: a token table read at the int64 data (ids) and a position
// table read at constant indices. Each table's gradient is nn.scatter_add of
// the rows' gradient at the same indices; the indices get none (no op
// consumes the ids but the gathers and the scatter-add).
// CHECK-LABEL: func.func @embedding(
// CHECK-SAME: %[[IDS:[^:]+]]: tensor<2x3xi64>, %[[L:[^:]+]]: tensor<6xi64>
// CHECK: %[[T:.+]] = nn.param @tok.weight
// CHECK: %[[E:.+]] = nn.gather %[[T]], %[[IDS]] : tensor<10x4xf32>, tensor<2x3xi64> -> tensor<2x3x4xf32>
// CHECK: %[[P:.+]] = nn.param @pos.weight
// CHECK: %[[POS:.+]] = nn.constant dense<[0, 1, 2]> : tensor<3xi64>
// CHECK: %[[PE:.+]] = nn.gather %[[P]], %[[POS]] : tensor<3x4xf32>, tensor<3xi64> -> tensor<3x4xf32>
// CHECK: %[[DY:.+]] = nn.softmax_cross_entropy_grad
// CHECK: %[[DS:.+]] = nn.reshape %[[DY]] : tensor<6x4xf32> -> tensor<2x3x4xf32>
// CHECK-NEXT: %[[DPE:.+]] = nn.reduce_to %[[DS]] : tensor<2x3x4xf32> -> tensor<3x4xf32>
// CHECK-NEXT: %[[DP:.+]] = nn.scatter_add %[[DPE]], %[[POS]] : tensor<3x4xf32>, tensor<3xi64> -> tensor<3x4xf32>
// CHECK-NEXT: %[[DT:.+]] = nn.scatter_add %[[DS]], %[[IDS]] : tensor<2x3x4xf32>, tensor<2x3xi64> -> tensor<10x4xf32>
// CHECK-NEXT: nn.param_grad %[[T]], %[[DT]] : tensor<10x4xf32>
// CHECK-NEXT: nn.param_grad %[[P]], %[[DP]] : tensor<3x4xf32>
func.func @embedding(%ids: tensor<2x3xi64>, %labels: tensor<6xi64>) -> (tensor<f32> {nn.loss}) {
  %t = nn.param @tok.weight : tensor<10x4xf32>
  %e = nn.gather %t, %ids : tensor<10x4xf32>, tensor<2x3xi64> -> tensor<2x3x4xf32>
  %p = nn.param @pos.weight : tensor<3x4xf32>
  %pos = nn.constant dense<[0, 1, 2]> : tensor<3xi64>
  %pe = nn.gather %p, %pos : tensor<3x4xf32>, tensor<3xi64> -> tensor<3x4xf32>
  %s = nn.add %e, %pe : tensor<2x3x4xf32>, tensor<3x4xf32> -> tensor<2x3x4xf32>
  %r = nn.reshape %s : tensor<2x3x4xf32> -> tensor<6x4xf32>
  %loss = nn.softmax_cross_entropy %r, %labels : tensor<6x4xf32>, tensor<6xi64>
  return %loss : tensor<f32>
}

// -----

nn.parameter @q : tensor<2x4x8xf32>
nn.parameter @kv : tensor<2x4x8xf32>
// nn.attention's gradient is one nn.attention_grad from q, k, v, the mask,
// the output, the saved log-sum-exp and dout (the probabilities are
// recomputed, not stored); the gradients of k and v (one parameter) add up.
// The zeros standing for the log-sum-exp's gradient are dropped; the mask
// gets none.
// CHECK-LABEL: func.func @attention(
// CHECK: %[[Q:.+]] = nn.param @q
// CHECK-NEXT: %[[KV:.+]] = nn.param @kv
// CHECK-NEXT: %[[M:.+]] = nn.constant dense<0.000000e+00> : tensor<4x4xf32>
// CHECK-NEXT: %[[O:[^,]+]], %[[L:[^ ]+]] = nn.attention %[[Q]], %[[KV]], %[[KV]] mask %[[M]] {scale = 0.353553385 : f32}
// CHECK: %[[DO:.+]] = nn.reshape %{{.+}} : tensor<8x8xf32> -> tensor<2x4x8xf32>
// CHECK-NEXT: %[[DQ:[^,]+]], %[[DK:[^,]+]], %[[DV:[^ ]+]] = nn.attention_grad %[[Q]], %[[KV]], %[[KV]] mask %[[M]], %[[O]], %[[L]], %[[DO]] {scale = 0.353553385 : f32} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<4x4xf32>, tensor<2x4x8xf32>, tensor<2x4xf32>, tensor<2x4x8xf32>) -> (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>)
// CHECK-NEXT: %[[DKV:.+]] = nn.add %[[DK]], %[[DV]]
// CHECK-NEXT: nn.param_grad %[[Q]], %[[DQ]]
// CHECK-NEXT: nn.param_grad %[[KV]], %[[DKV]]
// CHECK-NOT: nn.constant
func.func @attention(%l: tensor<8xi64>) -> (tensor<f32> {nn.loss}) {
  %q = nn.param @q : tensor<2x4x8xf32>
  %kv = nn.param @kv : tensor<2x4x8xf32>
  %m = nn.constant dense<0.0> : tensor<4x4xf32>
  %o, %lse = nn.attention %q, %kv, %kv mask %m {scale = 0.353553385 : f32} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<4x4xf32>) -> (tensor<2x4x8xf32>, tensor<2x4xf32>)
  %f = nn.reshape %o : tensor<2x4x8xf32> -> tensor<8x8xf32>
  %loss = nn.softmax_cross_entropy %f, %l : tensor<8x8xf32>, tensor<8xi64>
  return %loss : tensor<f32>
}

// -----

nn.parameter @fc1.weight frozen : tensor<32x16xf32>
nn.parameter @fc2.weight frozen : tensor<8x32xf32>
nn.parameter @head.weight : tensor<8x8xf32>
// Frozen parameters (--freeze) are read, not trained: no gradient with
// respect to them, and none flows through the layers below the last trained
// one (fc1 and fc2 feed only frozen weights and data): only the head's
// weight gets a gradient.
// CHECK-LABEL: func.func @frozen(
// CHECK: %[[Z:.+]] = nn.gemm %{{.+}}, %{{.+}} {transB = true} : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
// CHECK: %[[DZ:.+]] = nn.softmax_cross_entropy_grad %[[Z]]
// CHECK-NOT: nn.gemm %[[DZ]], %{{.+}} : (tensor<4x8xf32>, tensor<8x8xf32>)
// CHECK: %[[DH:.+]] = nn.gemm %[[DZ]], %{{.+}} {transA = true} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<8x8xf32>
// CHECK-NOT: nn.relu_grad
// CHECK-NOT: nn.param_grad %{{.+}} : tensor<32x16xf32>
// CHECK-NOT: nn.param_grad %{{.+}} : tensor<8x32xf32>
// CHECK: nn.param_grad %{{.+}}, %[[DH]] : tensor<8x8xf32>
// CHECK-NEXT: return
func.func @frozen(%x: tensor<4x16xf32>, %labels: tensor<4xi64>) -> (tensor<f32> {nn.loss}) {
  %w1 = nn.param @fc1.weight : tensor<32x16xf32>
  %w2 = nn.param @fc2.weight : tensor<8x32xf32>
  %wh = nn.param @head.weight : tensor<8x8xf32>
  %h = nn.gemm %x, %w1 {transB = true} : (tensor<4x16xf32>, tensor<32x16xf32>) -> tensor<4x32xf32>
  %a = nn.relu %h : tensor<4x32xf32>
  %y = nn.gemm %a, %w2 {transB = true} : (tensor<4x32xf32>, tensor<8x32xf32>) -> tensor<4x8xf32>
  %z = nn.gemm %y, %wh {transB = true} : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %loss = nn.softmax_cross_entropy %z, %labels {ignore_index = -100 : i64} : tensor<4x8xf32>, tensor<4xi64>
  return %loss : tensor<f32>
}
