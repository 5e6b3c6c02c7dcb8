// Every nn op in its custom form, and the discardable nn attributes: parsed,
// printed, re-parsed and printed again (the second print is checked); then
// through the generic form.
// RUN: gpipe-opt %s | gpipe-opt | FileCheck %s
// RUN: gpipe-opt %s --mlir-print-op-generic | gpipe-opt | FileCheck %s

// Parameters are module symbols; a name that is not a bare identifier is
// quoted.
// CHECK: nn.parameter @fc1.weight : tensor<32x16xf32>
// CHECK-NEXT: nn.parameter @"layer/1:scale" : tensor<f32>
// CHECK-NEXT: nn.parameter @w : tensor<8x4xf32>
// CHECK-NEXT: nn.parameter @embed frozen : tensor<10x4xf32>
nn.parameter @fc1.weight : tensor<32x16xf32>
nn.parameter @"layer/1:scale" : tensor<f32>
nn.parameter @w : tensor<8x4xf32>
nn.parameter @embed frozen : tensor<10x4xf32>
// nn.param and nn.constant (f32 splat, f32 and i64 dense) are leaves.
// CHECK-LABEL: func.func @values()
// CHECK-NEXT: %[[W:.+]] = nn.param @fc1.weight : tensor<32x16xf32>
// CHECK-NEXT: %[[S:.+]] = nn.param @"layer/1:scale" : tensor<f32>
// CHECK-NEXT: %[[C0:.+]] = nn.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[C1:.+]] = nn.constant dense<[1.500000e+00, -2.000000e+00]> : tensor<2xf32>
// CHECK-NEXT: %[[C2:.+]] = nn.constant dense<[4, -1]> : tensor<2xi64>
// CHECK-NEXT: return %[[W]], %[[S]], %[[C0]], %[[C1]], %[[C2]]
func.func @values() -> (tensor<32x16xf32>, tensor<f32>, tensor<f32>, tensor<2xf32>, tensor<2xi64>) {
  %w = nn.param @fc1.weight : tensor<32x16xf32>
  %s = nn.param @"layer/1:scale" : tensor<f32>
  %c0 = nn.constant dense<1.0> : tensor<f32>
  %c1 = nn.constant dense<[1.5, -2.0]> : tensor<2xf32>
  %c2 = nn.constant dense<[4, -1]> : tensor<2xi64>
  return %w, %s, %c0, %c1, %c2 : tensor<32x16xf32>, tensor<f32>, tensor<f32>, tensor<2xf32>, tensor<2xi64>
}

// nn.param_grad takes a parameter and a gradient of its type.
// CHECK-LABEL: func.func @param_grad(
// CHECK-SAME: %[[G:[^:]+]]: tensor<8x4xf32>
// CHECK-NEXT: %[[W:.+]] = nn.param @w : tensor<8x4xf32>
// CHECK-NEXT: nn.param_grad %[[W]], %[[G]] : tensor<8x4xf32>
func.func @param_grad(%g: tensor<8x4xf32>) {
  %w = nn.param @w : tensor<8x4xf32>
  nn.param_grad %w, %g : tensor<8x4xf32>
  return
}

// nn.gemm: without C, with a broadcast C, transA / transB, alpha / beta; the
// defaults (no transpose, alpha = beta = 1) are elided when printed.
// CHECK-LABEL: func.func @gemm(
// CHECK-SAME: %[[A:[^:]+]]: tensor<4x8xf32>, %[[AT:[^:]+]]: tensor<8x4xf32>, %[[B:[^:]+]]: tensor<8x16xf32>, %[[BT:[^:]+]]: tensor<16x8xf32>, %[[C:[^:]+]]: tensor<16xf32>, %[[C2:[^:]+]]: tensor<4x1xf32>
// CHECK-NEXT: nn.gemm %[[A]], %[[B]] : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
// CHECK-NEXT: nn.gemm %[[A]], %[[B]] : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
// CHECK-NEXT: nn.gemm %[[A]], %[[B]], %[[C]] : (tensor<4x8xf32>, tensor<8x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
// CHECK-NEXT: nn.gemm %[[AT]], %[[B]] {transA = true} : (tensor<8x4xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
// CHECK-NEXT: nn.gemm %[[A]], %[[BT]], %[[C]] {transB = true} : (tensor<4x8xf32>, tensor<16x8xf32>, tensor<16xf32>) -> tensor<4x16xf32>
// CHECK-NEXT: nn.gemm %[[AT]], %[[BT]], %[[C2]] {alpha = 5.000000e-01 : f32, beta = 2.000000e+00 : f32, transA = true, transB = true} : (tensor<8x4xf32>, tensor<16x8xf32>, tensor<4x1xf32>) -> tensor<4x16xf32>
func.func @gemm(%a: tensor<4x8xf32>, %at: tensor<8x4xf32>, %b: tensor<8x16xf32>, %bt: tensor<16x8xf32>, %c: tensor<16xf32>, %c2: tensor<4x1xf32>) {
  %0 = nn.gemm %a, %b : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %1 = nn.gemm %a, %b {transA = false, transB = false, alpha = 1.0 : f32, beta = 1.0 : f32} : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %2 = nn.gemm %a, %b, %c : (tensor<4x8xf32>, tensor<8x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  %3 = nn.gemm %at, %b {transA = true} : (tensor<8x4xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %4 = nn.gemm %a, %bt, %c {transB = true} : (tensor<4x8xf32>, tensor<16x8xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  %5 = nn.gemm %at, %bt, %c2 {transA = true, transB = true, alpha = 0.5 : f32, beta = 2.0 : f32} : (tensor<8x4xf32>, tensor<16x8xf32>, tensor<4x1xf32>) -> tensor<4x16xf32>
  return
}

// The binary ops, with equal shapes and with numpy broadcasting on either side.
// CHECK-LABEL: func.func @binary(
// CHECK-SAME: %[[X:[^:]+]]: tensor<4x8xf32>, %[[R:[^:]+]]: tensor<8xf32>, %[[COL:[^:]+]]: tensor<4x1xf32>, %[[S:[^:]+]]: tensor<f32>
// CHECK-NEXT: nn.add %[[X]], %[[X]] : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
// CHECK-NEXT: nn.sub %[[X]], %[[R]] : tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
// CHECK-NEXT: nn.mul %[[S]], %[[X]] : tensor<f32>, tensor<4x8xf32> -> tensor<4x8xf32>
// CHECK-NEXT: nn.div %[[COL]], %[[R]] : tensor<4x1xf32>, tensor<8xf32> -> tensor<4x8xf32>
func.func @binary(%x: tensor<4x8xf32>, %r: tensor<8xf32>, %col: tensor<4x1xf32>, %s: tensor<f32>) {
  %0 = nn.add %x, %x : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %1 = nn.sub %x, %r : tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  %2 = nn.mul %s, %x : tensor<f32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %3 = nn.div %col, %r : tensor<4x1xf32>, tensor<8xf32> -> tensor<4x8xf32>
  return
}

// The unary ops and the activation-gradient ops.
// CHECK-LABEL: func.func @unary(
// CHECK-SAME: %[[X:[^:]+]]: tensor<4x8xf32>, %[[G:[^:]+]]: tensor<4x8xf32>
// CHECK-NEXT: nn.neg %[[X]] : tensor<4x8xf32>
// CHECK-NEXT: nn.relu %[[X]] : tensor<4x8xf32>
// CHECK-NEXT: nn.tanh %[[X]] : tensor<4x8xf32>
// CHECK-NEXT: nn.sigmoid %[[X]] : tensor<4x8xf32>
// CHECK-NEXT: nn.erf %[[X]] : tensor<4x8xf32>
// CHECK-NEXT: nn.exp %[[X]] : tensor<4x8xf32>
// CHECK-NEXT: nn.log %[[X]] : tensor<4x8xf32>
// CHECK-NEXT: nn.sqrt %[[X]] : tensor<4x8xf32>
// CHECK-NEXT: nn.reciprocal %[[X]] : tensor<4x8xf32>
// CHECK-NEXT: nn.abs %[[X]] : tensor<4x8xf32>
// CHECK-NEXT: nn.relu_grad %[[X]], %[[G]] : tensor<4x8xf32>
// CHECK-NEXT: nn.tanh_grad %[[X]], %[[G]] : tensor<4x8xf32>
// CHECK-NEXT: nn.sigmoid_grad %[[X]], %[[G]] : tensor<4x8xf32>
// CHECK-NEXT: nn.erf_grad %[[X]], %[[G]] : tensor<4x8xf32>
// CHECK-NEXT: nn.sqrt_grad %[[X]], %[[G]] : tensor<4x8xf32>
// CHECK-NEXT: nn.reciprocal_grad %[[X]], %[[G]] : tensor<4x8xf32>
// CHECK-NEXT: nn.abs_grad %[[X]], %[[G]] : tensor<4x8xf32>
func.func @unary(%x: tensor<4x8xf32>, %g: tensor<4x8xf32>) {
  %0 = nn.neg %x : tensor<4x8xf32>
  %1 = nn.relu %x : tensor<4x8xf32>
  %2 = nn.tanh %x : tensor<4x8xf32>
  %3 = nn.sigmoid %x : tensor<4x8xf32>
  %4 = nn.erf %x : tensor<4x8xf32>
  %e = nn.exp %x : tensor<4x8xf32>
  %lg = nn.log %x : tensor<4x8xf32>
  %sq = nn.sqrt %x : tensor<4x8xf32>
  %rc = nn.reciprocal %x : tensor<4x8xf32>
  %ab = nn.abs %x : tensor<4x8xf32>
  %5 = nn.relu_grad %x, %g : tensor<4x8xf32>
  %6 = nn.tanh_grad %x, %g : tensor<4x8xf32>
  %7 = nn.sigmoid_grad %x, %g : tensor<4x8xf32>
  %8 = nn.erf_grad %x, %g : tensor<4x8xf32>
  %sqg = nn.sqrt_grad %x, %g : tensor<4x8xf32>
  %rcg = nn.reciprocal_grad %x, %g : tensor<4x8xf32>
  %abg = nn.abs_grad %x, %g : tensor<4x8xf32>
  return
}

// nn.reshape (f32 and i64, to and from rank 0), nn.concat (one input, several,
// i64), nn.slice (first, middle, last range) and nn.reduce_to.
// CHECK-LABEL: func.func @data_movement(
// CHECK-SAME: %[[X:[^:]+]]: tensor<4x8xf32>, %[[Y:[^:]+]]: tensor<4x3xf32>, %[[I:[^:]+]]: tensor<4x1xi64>, %[[S:[^:]+]]: tensor<1xf32>
// CHECK-NEXT: nn.reshape %[[X]] : tensor<4x8xf32> -> tensor<2x2x8xf32>
// CHECK-NEXT: nn.reshape %[[I]] : tensor<4x1xi64> -> tensor<4xi64>
// CHECK-NEXT: nn.reshape %[[S]] : tensor<1xf32> -> tensor<f32>
// CHECK-NEXT: nn.concat %[[X]] {axis = 0 : i64} : (tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: nn.concat %[[X]], %[[Y]], %[[X]] {axis = 1 : i64} : (tensor<4x8xf32>, tensor<4x3xf32>, tensor<4x8xf32>) -> tensor<4x19xf32>
// CHECK-NEXT: nn.concat %[[I]], %[[I]] {axis = 0 : i64} : (tensor<4x1xi64>, tensor<4x1xi64>) -> tensor<8x1xi64>
// CHECK-NEXT: nn.slice %[[X]] {axis = 1 : i64, start = 0 : i64} : tensor<4x8xf32> -> tensor<4x3xf32>
// CHECK-NEXT: nn.slice %[[X]] {axis = 0 : i64, start = 1 : i64} : tensor<4x8xf32> -> tensor<2x8xf32>
// CHECK-NEXT: nn.slice %[[I]] {axis = 0 : i64, start = 3 : i64} : tensor<4x1xi64> -> tensor<1x1xi64>
// CHECK-NEXT: nn.reduce_to %[[X]] : tensor<4x8xf32> -> tensor<8xf32>
// CHECK-NEXT: nn.reduce_to %[[X]] : tensor<4x8xf32> -> tensor<4x1xf32>
// CHECK-NEXT: nn.reduce_to %[[X]] : tensor<4x8xf32> -> tensor<f32>
func.func @data_movement(%x: tensor<4x8xf32>, %y: tensor<4x3xf32>, %i: tensor<4x1xi64>, %s: tensor<1xf32>) {
  %0 = nn.reshape %x : tensor<4x8xf32> -> tensor<2x2x8xf32>
  %1 = nn.reshape %i : tensor<4x1xi64> -> tensor<4xi64>
  %2 = nn.reshape %s : tensor<1xf32> -> tensor<f32>
  %3 = nn.concat %x {axis = 0 : i64} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %4 = nn.concat %x, %y, %x {axis = 1 : i64} : (tensor<4x8xf32>, tensor<4x3xf32>, tensor<4x8xf32>) -> tensor<4x19xf32>
  %5 = nn.concat %i, %i {axis = 0 : i64} : (tensor<4x1xi64>, tensor<4x1xi64>) -> tensor<8x1xi64>
  %6 = nn.slice %x {axis = 1 : i64, start = 0 : i64} : tensor<4x8xf32> -> tensor<4x3xf32>
  %7 = nn.slice %x {axis = 0 : i64, start = 1 : i64} : tensor<4x8xf32> -> tensor<2x8xf32>
  %8 = nn.slice %i {axis = 0 : i64, start = 3 : i64} : tensor<4x1xi64> -> tensor<1x1xi64>
  %9 = nn.reduce_to %x : tensor<4x8xf32> -> tensor<8xf32>
  %10 = nn.reduce_to %x : tensor<4x8xf32> -> tensor<4x1xf32>
  %11 = nn.reduce_to %x : tensor<4x8xf32> -> tensor<f32>
  return
}

// nn.softmax_cross_entropy and its gradient, with and without ignore_index;
// the loss is a tensor<f32> scalar.
// CHECK-LABEL: func.func @loss(
// CHECK-SAME: %[[X:[^:]+]]: tensor<4x8xf32>, %[[L:[^:]+]]: tensor<4xi64>, %[[G:[^:]+]]: tensor<f32>
// CHECK-NEXT: %[[L0:.+]] = nn.softmax_cross_entropy %[[X]], %[[L]] : tensor<4x8xf32>, tensor<4xi64>
// CHECK-NEXT: %[[L1:.+]] = nn.softmax_cross_entropy %[[X]], %[[L]] {ignore_index = -100 : i64} : tensor<4x8xf32>, tensor<4xi64>
// CHECK-NEXT: %[[D0:.+]] = nn.softmax_cross_entropy_grad %[[X]], %[[L]], %[[G]] : tensor<4x8xf32>, tensor<4xi64>
// CHECK-NEXT: %[[D1:.+]] = nn.softmax_cross_entropy_grad %[[X]], %[[L]], %[[G]] {ignore_index = 0 : i64} : tensor<4x8xf32>, tensor<4xi64>
// CHECK-NEXT: return %[[L0]], %[[L1]], %[[D0]], %[[D1]] : tensor<f32>, tensor<f32>, tensor<4x8xf32>, tensor<4x8xf32>
func.func @loss(%x: tensor<4x8xf32>, %l: tensor<4xi64>, %g: tensor<f32>) -> (tensor<f32>, tensor<f32>, tensor<4x8xf32>, tensor<4x8xf32>) {
  %0 = nn.softmax_cross_entropy %x, %l : tensor<4x8xf32>, tensor<4xi64>
  %1 = nn.softmax_cross_entropy %x, %l {ignore_index = -100 : i64} : tensor<4x8xf32>, tensor<4xi64>
  %2 = nn.softmax_cross_entropy_grad %x, %l, %g : tensor<4x8xf32>, tensor<4xi64>
  %3 = nn.softmax_cross_entropy_grad %x, %l, %g {ignore_index = 0 : i64} : tensor<4x8xf32>, tensor<4xi64>
  return %0, %1, %2, %3 : tensor<f32>, tensor<f32>, tensor<4x8xf32>, tensor<4x8xf32>
}

// nn.nll_loss and its gradient (mean or `sum`, ignore_index); a sum of
// softmax cross-entropies.
// CHECK-LABEL: func.func @nll_loss(
// CHECK-SAME: %[[X:[^:]+]]: tensor<4x8xf32>, %[[L:[^:]+]]: tensor<4xi64>, %[[G:[^:]+]]: tensor<f32>
// CHECK-NEXT: %[[L0:.+]] = nn.nll_loss %[[X]], %[[L]] : tensor<4x8xf32>, tensor<4xi64>
// CHECK-NEXT: %[[L1:.+]] = nn.nll_loss %[[X]], %[[L]] {ignore_index = 2 : i64, sum} : tensor<4x8xf32>, tensor<4xi64>
// CHECK-NEXT: %[[D0:.+]] = nn.nll_loss_grad %[[X]], %[[L]], %[[G]] {ignore_index = -1 : i64, microbatches = 2 : i64} : tensor<4x8xf32>, tensor<4xi64>
// CHECK-NEXT: %[[S:.+]] = nn.softmax_cross_entropy %[[X]], %[[L]] {sum} : tensor<4x8xf32>, tensor<4xi64>
// CHECK-NEXT: return %[[L0]], %[[L1]], %[[D0]], %[[S]] : tensor<f32>, tensor<f32>, tensor<4x8xf32>, tensor<f32>
func.func @nll_loss(%x: tensor<4x8xf32>, %l: tensor<4xi64>, %g: tensor<f32>) -> (tensor<f32>, tensor<f32>, tensor<4x8xf32>, tensor<f32>) {
  %0 = nn.nll_loss %x, %l : tensor<4x8xf32>, tensor<4xi64>
  %1 = nn.nll_loss %x, %l {ignore_index = 2 : i64, sum} : tensor<4x8xf32>, tensor<4xi64>
  %2 = nn.nll_loss_grad %x, %l, %g {ignore_index = -1 : i64, microbatches = 2 : i64} : tensor<4x8xf32>, tensor<4xi64>
  %3 = nn.softmax_cross_entropy %x, %l {sum} : tensor<4x8xf32>, tensor<4xi64>
  return %0, %1, %2, %3 : tensor<f32>, tensor<f32>, tensor<4x8xf32>, tensor<f32>
}

// nn.reduce_max (the shapes of nn.reduce_to), nn.clip with either bound and
// its gradient, nn.max / nn.min (broadcasting) and their gradients.
// CHECK-LABEL: func.func @max_min_clip(
// CHECK-SAME: %[[X:[^:]+]]: tensor<4x8xf32>, %[[B:[^:]+]]: tensor<8xf32>
// CHECK-NEXT: nn.reduce_max %[[X]] : tensor<4x8xf32> -> tensor<4x1xf32>
// CHECK-NEXT: nn.reduce_max %[[X]] : tensor<4x8xf32> -> tensor<f32>
// CHECK-NEXT: %[[C:.+]] = nn.clip %[[X]] {max = 1.000000e+00 : f32, min = -5.000000e-01 : f32} : tensor<4x8xf32>
// CHECK-NEXT: nn.clip %[[X]] {min = 0.000000e+00 : f32} : tensor<4x8xf32>
// CHECK-NEXT: nn.clip_grad %[[X]], %[[C]] {max = 2.000000e+00 : f32} : tensor<4x8xf32>
// CHECK-NEXT: nn.max %[[X]], %[[B]] : tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
// CHECK-NEXT: nn.min %[[B]], %[[X]] : tensor<8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
// CHECK-NEXT: nn.max_grad %[[B]], %[[X]], %[[C]] : tensor<8xf32>, tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
// CHECK-NEXT: nn.min_grad %[[X]], %[[B]], %[[C]] : tensor<4x8xf32>, tensor<8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
func.func @max_min_clip(%x: tensor<4x8xf32>, %b: tensor<8xf32>) {
  %0 = nn.reduce_max %x : tensor<4x8xf32> -> tensor<4x1xf32>
  %1 = nn.reduce_max %x : tensor<4x8xf32> -> tensor<f32>
  %2 = nn.clip %x {min = -0.5 : f32, max = 1.0 : f32} : tensor<4x8xf32>
  %3 = nn.clip %x {min = 0.0 : f32} : tensor<4x8xf32>
  %4 = nn.clip_grad %x, %2 {max = 2.0 : f32} : tensor<4x8xf32>
  %5 = nn.max %x, %b : tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  %6 = nn.min %b, %x : tensor<8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %7 = nn.max_grad %b, %x, %2 : tensor<8xf32>, tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %8 = nn.min_grad %x, %b, %2 : tensor<4x8xf32>, tensor<8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  return
}

// nn.gather (an embedding lookup: indices of any rank, rows of the table's
// trailing dimensions) and its gradient nn.scatter_add.
// CHECK-LABEL: func.func @gather(
// CHECK-SAME: %[[T:[^:]+]]: tensor<50x16xf32>, %[[I:[^:]+]]: tensor<4x8xi64>, %[[S:[^:]+]]: tensor<i64>, %[[G:[^:]+]]: tensor<4x8x16xf32>
// CHECK-NEXT: %[[E:.+]] = nn.gather %[[T]], %[[I]] : tensor<50x16xf32>, tensor<4x8xi64> -> tensor<4x8x16xf32>
// CHECK-NEXT: %[[R:.+]] = nn.gather %[[T]], %[[S]] : tensor<50x16xf32>, tensor<i64> -> tensor<16xf32>
// CHECK-NEXT: %[[D:.+]] = nn.scatter_add %[[G]], %[[I]] : tensor<4x8x16xf32>, tensor<4x8xi64> -> tensor<50x16xf32>
// CHECK-NEXT: return %[[E]], %[[R]], %[[D]]
func.func @gather(%t: tensor<50x16xf32>, %i: tensor<4x8xi64>, %s: tensor<i64>, %g: tensor<4x8x16xf32>) -> (tensor<4x8x16xf32>, tensor<16xf32>, tensor<50x16xf32>) {
  %0 = nn.gather %t, %i : tensor<50x16xf32>, tensor<4x8xi64> -> tensor<4x8x16xf32>
  %1 = nn.gather %t, %s : tensor<50x16xf32>, tensor<i64> -> tensor<16xf32>
  %2 = nn.scatter_add %g, %i : tensor<4x8x16xf32>, tensor<4x8xi64> -> tensor<50x16xf32>
  return %0, %1, %2 : tensor<4x8x16xf32>, tensor<16xf32>, tensor<50x16xf32>
}

// The discardable nn attributes: nn.input on arguments, nn.output and
// nn.loss on results, nn.backward on an op.
// CHECK-LABEL: func.func @attributes(
// CHECK-SAME: %[[X:[^:]+]]: tensor<4xf32> {nn.input = "x"}) -> (tensor<f32> {nn.loss, nn.output = "loss"})
// CHECK-NEXT: %{{.+}} = nn.relu %[[X]] {nn.backward} : tensor<4xf32>
func.func @attributes(%x: tensor<4xf32> {nn.input = "x"}) -> (tensor<f32> {nn.loss, nn.output = "loss"}) {
  %0 = nn.relu %x {nn.backward} : tensor<4xf32>
  %1 = nn.constant dense<0.0> : tensor<f32>
  return %1 : tensor<f32>
}

// -----

// nn.softmax and nn.softmax_grad (any axis).
// CHECK-LABEL: func.func @softmax(
// CHECK-SAME: %[[X:[^:]+]]: tensor<2x3x4xf32>, %[[G:[^:]+]]: tensor<2x3x4xf32>
// CHECK-NEXT: %[[Y:.+]] = nn.softmax %[[X]] {axis = 1 : i64} : tensor<2x3x4xf32>
// CHECK-NEXT: nn.softmax_grad %[[Y]], %[[G]] {axis = 2 : i64} : tensor<2x3x4xf32>
func.func @softmax(%x: tensor<2x3x4xf32>, %g: tensor<2x3x4xf32>) -> tensor<2x3x4xf32> {
  %y = nn.softmax %x {axis = 1 : i64} : tensor<2x3x4xf32>
  %d = nn.softmax_grad %y, %g {axis = 2 : i64} : tensor<2x3x4xf32>
  return %d : tensor<2x3x4xf32>
}

// -----

// nn.log_softmax and nn.log_softmax_grad (any axis).
// CHECK-LABEL: func.func @log_softmax(
// CHECK-SAME: %[[X:[^:]+]]: tensor<2x3x4xf32>, %[[G:[^:]+]]: tensor<2x3x4xf32>
// CHECK-NEXT: %[[Y:.+]] = nn.log_softmax %[[X]] {axis = 0 : i64} : tensor<2x3x4xf32>
// CHECK-NEXT: nn.log_softmax_grad %[[Y]], %[[G]] {axis = 2 : i64} : tensor<2x3x4xf32>
func.func @log_softmax(%x: tensor<2x3x4xf32>, %g: tensor<2x3x4xf32>) -> tensor<2x3x4xf32> {
  %y = nn.log_softmax %x {axis = 0 : i64} : tensor<2x3x4xf32>
  %d = nn.log_softmax_grad %y, %g {axis = 2 : i64} : tensor<2x3x4xf32>
  return %d : tensor<2x3x4xf32>
}

// -----

// nn.pow (broadcasting like every binary op), nn.broadcast_to and nn.reduce_to.
// CHECK-LABEL: func.func @pow_broadcast_reduce(
// CHECK-SAME: %[[X:[^:]+]]: tensor<4x1xf32>, %[[E:[^:]+]]: tensor<f32>
// CHECK-NEXT: %[[B:.+]] = nn.broadcast_to %[[X]] : tensor<4x1xf32> -> tensor<2x4x3xf32>
// CHECK-NEXT: %[[P:.+]] = nn.pow %[[B]], %[[E]] : tensor<2x4x3xf32>, tensor<f32> -> tensor<2x4x3xf32>
// CHECK-NEXT: nn.reduce_to %[[P]] : tensor<2x4x3xf32> -> tensor<4x1xf32>
func.func @pow_broadcast_reduce(%x: tensor<4x1xf32>, %e: tensor<f32>) -> tensor<4x1xf32> {
  %b = nn.broadcast_to %x : tensor<4x1xf32> -> tensor<2x4x3xf32>
  %p = nn.pow %b, %e : tensor<2x4x3xf32>, tensor<f32> -> tensor<2x4x3xf32>
  %r = nn.reduce_to %p : tensor<2x4x3xf32> -> tensor<4x1xf32>
  return %r : tensor<4x1xf32>
}

// -----

// nn.batch_matmul: broadcast batch dims, transA / transB, a rank-2 operand
// against a batched one.
// CHECK-LABEL: func.func @batch_matmul(
// CHECK-SAME: %[[Q:[^:]+]]: tensor<8x2x4x3xf32>, %[[K:[^:]+]]: tensor<8x2x5x3xf32>, %[[V:[^:]+]]: tensor<1x2x5x6xf32>, %[[W:[^:]+]]: tensor<3x4xf32>
// CHECK-NEXT: %[[S:.+]] = nn.batch_matmul %[[Q]], %[[K]] {transB = true} : (tensor<8x2x4x3xf32>, tensor<8x2x5x3xf32>) -> tensor<8x2x4x5xf32>
// CHECK-NEXT: %[[O:.+]] = nn.batch_matmul %[[S]], %[[V]] : (tensor<8x2x4x5xf32>, tensor<1x2x5x6xf32>) -> tensor<8x2x4x6xf32>
// CHECK-NEXT: nn.batch_matmul %[[W]], %[[Q]] {transA = true, transB = true} : (tensor<3x4xf32>, tensor<8x2x4x3xf32>) -> tensor<8x2x4x4xf32>
func.func @batch_matmul(%q: tensor<8x2x4x3xf32>, %k: tensor<8x2x5x3xf32>, %v: tensor<1x2x5x6xf32>, %w: tensor<3x4xf32>) -> tensor<8x2x4x4xf32> {
  %s = nn.batch_matmul %q, %k {transB = true} : (tensor<8x2x4x3xf32>, tensor<8x2x5x3xf32>) -> tensor<8x2x4x5xf32>
  %o = nn.batch_matmul %s, %v {transA = false} : (tensor<8x2x4x5xf32>, tensor<1x2x5x6xf32>) -> tensor<8x2x4x6xf32>
  %p = nn.batch_matmul %w, %q {transA = true, transB = true} : (tensor<3x4xf32>, tensor<8x2x4x3xf32>) -> tensor<8x2x4x4xf32>
  return %p : tensor<8x2x4x4xf32>
}

// -----

// Masks: nn.equal (f32 or i64 operands), nn.not, nn.int_to_float, nn.where.
// CHECK-LABEL: func.func @masks(
// CHECK-SAME: %[[IDS:[^:]+]]: tensor<2x4xi64>, %[[PAD:[^:]+]]: tensor<i64>, %[[X:[^:]+]]: tensor<2x4xf32>
// CHECK-NEXT: %[[E:.+]] = nn.equal %[[IDS]], %[[PAD]] : tensor<2x4xi64>, tensor<i64> -> tensor<2x4xf32>
// CHECK-NEXT: %[[N:.+]] = nn.not %[[E]] : tensor<2x4xf32>
// CHECK-NEXT: %[[F:.+]] = nn.int_to_float %[[IDS]] : tensor<2x4xi64> -> tensor<2x4xf32>
// CHECK-NEXT: nn.where %[[N]], %[[F]], %[[X]] : tensor<2x4xf32>, tensor<2x4xf32>, tensor<2x4xf32> -> tensor<2x4xf32>
func.func @masks(%ids: tensor<2x4xi64>, %pad: tensor<i64>, %x: tensor<2x4xf32>) -> tensor<2x4xf32> {
  %e = nn.equal %ids, %pad : tensor<2x4xi64>, tensor<i64> -> tensor<2x4xf32>
  %n = nn.not %e : tensor<2x4xf32>
  %f = nn.int_to_float %ids : tensor<2x4xi64> -> tensor<2x4xf32>
  %w = nn.where %n, %f, %x : tensor<2x4xf32>, tensor<2x4xf32>, tensor<2x4xf32> -> tensor<2x4xf32>
  return %w : tensor<2x4xf32>
}

// -----

// nn.layer_norm (with and without bias; the statistics have the leading
// shape), nn.layer_norm_grad and nn.layer_norm_scale_grad.
// CHECK-LABEL: func.func @layer_norm(
// CHECK-SAME: %[[X:[^:]+]]: tensor<2x3x4xf32>, %[[S:[^:]+]]: tensor<3x4xf32>, %[[B:[^:]+]]: tensor<3x4xf32>, %[[G:[^:]+]]: tensor<2x3x4xf32>
// CHECK-NEXT: %[[Y:[^,]+]], %[[YM:[^,]+]], %[[YR:[^ ]+]] = nn.layer_norm %[[X]], %[[S]], %[[B]] {axis = 1 : i64, epsilon = 9.99999974E-6 : f32} : tensor<2x3x4xf32>, tensor<3x4xf32> -> tensor<2xf32>
// CHECK-NEXT: %[[Z:[^,]+]], %[[ZM:[^,]+]], %[[ZR:[^ ]+]] = nn.layer_norm %[[Y]], %[[S]] {axis = 1 : i64, epsilon = 1.000000e-03 : f32} : tensor<2x3x4xf32>, tensor<3x4xf32> -> tensor<2xf32>
// CHECK-NEXT: %[[DX:.+]] = nn.layer_norm_grad %[[X]], %[[YM]], %[[YR]], %[[S]], %[[G]] {axis = 1 : i64} : tensor<2x3x4xf32>, tensor<2xf32>, tensor<3x4xf32>
// CHECK-NEXT: nn.layer_norm_scale_grad %[[X]], %[[YM]], %[[YR]], %[[DX]] {axis = 1 : i64} : tensor<2x3x4xf32>, tensor<2xf32> -> tensor<3x4xf32>
func.func @layer_norm(%x: tensor<2x3x4xf32>, %s: tensor<3x4xf32>, %b: tensor<3x4xf32>, %g: tensor<2x3x4xf32>) -> (tensor<2x3x4xf32>, tensor<3x4xf32>) {
  %y, %m, %r = nn.layer_norm %x, %s, %b {axis = 1 : i64, epsilon = 1.0e-05 : f32} : tensor<2x3x4xf32>, tensor<3x4xf32> -> tensor<2xf32>
  %z:3 = nn.layer_norm %y, %s {axis = 1 : i64, epsilon = 1.0e-03 : f32} : tensor<2x3x4xf32>, tensor<3x4xf32> -> tensor<2xf32>
  %dx = nn.layer_norm_grad %x, %m, %r, %s, %g {axis = 1 : i64} : tensor<2x3x4xf32>, tensor<2xf32>, tensor<3x4xf32>
  %ds = nn.layer_norm_scale_grad %x, %m, %r, %dx {axis = 1 : i64} : tensor<2x3x4xf32>, tensor<2xf32> -> tensor<3x4xf32>
  return %z#0, %ds : tensor<2x3x4xf32>, tensor<3x4xf32>
}

// -----

// nn.dropout and its gradient (the same key and ratio: the mask is redrawn).
// CHECK-LABEL: func.func @dropout(
// CHECK-NEXT: %[[Y:.+]] = nn.dropout %{{.+}} {key = 42 : i64, ratio = 1.000000e-01 : f32} : tensor<4x8xf32>
// CHECK-NEXT: nn.dropout_grad %[[Y]] {key = 42 : i64, ratio = 1.000000e-01 : f32} : tensor<4x8xf32>
func.func @dropout(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %y = nn.dropout %x {key = 42 : i64, ratio = 0.1 : f32} : tensor<4x8xf32>
  %d = nn.dropout_grad %y {key = 42 : i64, ratio = 0.1 : f32} : tensor<4x8xf32>
  return %d : tensor<4x8xf32>
}

// -----

// nn.attention (with and without a mask; lse has the query rows' shape) and
// nn.attention_grad (Tq != Tk, d != dv).
// CHECK-LABEL: func.func @attention(
// CHECK-SAME: %[[Q:[^:]+]]: tensor<2x3x4x8xf32>, %[[K:[^:]+]]: tensor<2x3x5x8xf32>, %[[V:[^:]+]]: tensor<2x3x5x6xf32>, %[[M:[^:]+]]: tensor<4x5xf32>, %[[G:[^:]+]]: tensor<2x3x4x6xf32>)
// CHECK-NEXT: %[[O:[^,]+]], %[[L:[^ ]+]] = nn.attention %[[Q]], %[[K]], %[[V]] mask %[[M]] {scale = 0.353553385 : f32} : (tensor<2x3x4x8xf32>, tensor<2x3x5x8xf32>, tensor<2x3x5x6xf32>, tensor<4x5xf32>) -> (tensor<2x3x4x6xf32>, tensor<2x3x4xf32>)
// CHECK-NEXT: %[[P:[^,]+]], %[[PL:[^ ]+]] = nn.attention %[[Q]], %[[K]], %[[V]] {scale = 1.000000e+00 : f32} : (tensor<2x3x4x8xf32>, tensor<2x3x5x8xf32>, tensor<2x3x5x6xf32>) -> (tensor<2x3x4x6xf32>, tensor<2x3x4xf32>)
// CHECK-NEXT: %[[DQ:[^,]+]], %{{[^,]+}}, %[[DV:[^ ]+]] = nn.attention_grad %[[Q]], %[[K]], %[[V]] mask %[[M]], %[[O]], %[[L]], %[[G]] {scale = 0.353553385 : f32} : (tensor<2x3x4x8xf32>, tensor<2x3x5x8xf32>, tensor<2x3x5x6xf32>, tensor<4x5xf32>, tensor<2x3x4x6xf32>, tensor<2x3x4xf32>, tensor<2x3x4x6xf32>) -> (tensor<2x3x4x8xf32>, tensor<2x3x5x8xf32>, tensor<2x3x5x6xf32>)
// CHECK-NEXT: %{{[^,]+}}, %[[NK:[^,]+]], %{{[^ ]+}} = nn.attention_grad %[[Q]], %[[K]], %[[V]], %[[P]], %[[PL]], %[[G]] {scale = 1.000000e+00 : f32} : (tensor<2x3x4x8xf32>, tensor<2x3x5x8xf32>, tensor<2x3x5x6xf32>, tensor<2x3x4x6xf32>, tensor<2x3x4xf32>, tensor<2x3x4x6xf32>) -> (tensor<2x3x4x8xf32>, tensor<2x3x5x8xf32>, tensor<2x3x5x6xf32>)
// CHECK-NEXT: return %[[DQ]], %[[NK]], %[[DV]], %[[O]]
func.func @attention(%q: tensor<2x3x4x8xf32>, %k: tensor<2x3x5x8xf32>, %v: tensor<2x3x5x6xf32>, %m: tensor<4x5xf32>, %g: tensor<2x3x4x6xf32>) -> (tensor<2x3x4x8xf32>, tensor<2x3x5x8xf32>, tensor<2x3x5x6xf32>, tensor<2x3x4x6xf32>) {
  %o, %lse = nn.attention %q, %k, %v mask %m {scale = 0.353553385 : f32} : (tensor<2x3x4x8xf32>, tensor<2x3x5x8xf32>, tensor<2x3x5x6xf32>, tensor<4x5xf32>) -> (tensor<2x3x4x6xf32>, tensor<2x3x4xf32>)
  %p:2 = nn.attention %q, %k, %v {scale = 1.0 : f32} : (tensor<2x3x4x8xf32>, tensor<2x3x5x8xf32>, tensor<2x3x5x6xf32>) -> (tensor<2x3x4x6xf32>, tensor<2x3x4xf32>)
  %dq, %dk, %dv = nn.attention_grad %q, %k, %v mask %m, %o, %lse, %g {scale = 0.353553385 : f32} : (tensor<2x3x4x8xf32>, tensor<2x3x5x8xf32>, tensor<2x3x5x6xf32>, tensor<4x5xf32>, tensor<2x3x4x6xf32>, tensor<2x3x4xf32>, tensor<2x3x4x6xf32>) -> (tensor<2x3x4x8xf32>, tensor<2x3x5x8xf32>, tensor<2x3x5x6xf32>)
  %n:3 = nn.attention_grad %q, %k, %v, %p#0, %p#1, %g {scale = 1.0 : f32} : (tensor<2x3x4x8xf32>, tensor<2x3x5x8xf32>, tensor<2x3x5x6xf32>, tensor<2x3x4x6xf32>, tensor<2x3x4xf32>, tensor<2x3x4x6xf32>) -> (tensor<2x3x4x8xf32>, tensor<2x3x5x8xf32>, tensor<2x3x5x6xf32>)
  return %dq, %n#1, %dv, %o : tensor<2x3x4x8xf32>, tensor<2x3x5x8xf32>, tensor<2x3x5x6xf32>, tensor<2x3x4x6xf32>
}
