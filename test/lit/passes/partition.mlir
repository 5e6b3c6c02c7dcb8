// gpipe-partition: compute ops are cut, in program order, into K contiguous
// groups minimising the largest group's estimated cost (ties go to the later
// cut); the loss is last; parameters get the stage of their users; constants
// get none; the function gets pipe.stages. Then with gpipe-autodiff and
// gpipe-optimizer: every gradient op is on the stage of the forward op it
// differentiates and marked nn.backward, every update on its parameter's
// stage.
// RUN: gpipe-opt %s --split-input-file --gpipe-partition=stages=1 | FileCheck %s --check-prefix=K1
// RUN: gpipe-opt %s --split-input-file --gpipe-partition=stages=2 | FileCheck %s --check-prefix=K2
// RUN: gpipe-opt %s --split-input-file --gpipe-partition=stages=3 | FileCheck %s --check-prefix=K3
// RUN: gpipe-opt %s --split-input-file --gpipe-partition=stages=4 -verify-diagnostics | FileCheck %s --check-prefix=K4
// RUN: gpipe-opt %s --split-input-file --gpipe-partition=stages=3 --gpipe-autodiff --gpipe-optimizer=optimizer=adam | FileCheck %s --check-prefix=AD

// A chain of five GEMMs of very different sizes, then the loss. The cost
// model charges t = max(FLOPs / 100 GFLOP/s, bytes / 20 GB/s) for the forward
// plus t per operand that needs a gradient; every GEMM here is memory-bound.
// In units of 0.1 us: g0 = 2.05 (its data input x needs no gradient: 2t),
// g1 = 9.98 (3t), g2 = 30.72 (3t), g3 = 13.44 (with its bias: 4t),
// g4 = 1.34 (3t), loss = 0.19 (2t).
// K = 2: cutting after g1 gives max(12.03, 45.69); after g2 max(42.75,
// 14.97): the cut is after g2 (3 ops, then 3).
// K = 3: g2 alone bounds the maximum (30.72) and only {g0, g1} {g2} {rest}
// reaches it.
// K = 4: g2 alone still bounds the maximum; of the many cuts reaching it,
// the later ones win (the loss alone on the last stage).

// K1-LABEL: func.func @chain(
// K1-SAME: attributes {pipe.stages = 1 : i64}
// K1-COUNT-12: {pipe.stage = 0 : i64}
// K1-NOT: pipe.stage
// K1: return

// K2-LABEL: func.func @chain(
// K2-SAME: %[[X:[^:]+]]: tensor<8x16xf32>, %[[L:[^:]+]]: tensor<8xi64>)
// K2-SAME: attributes {pipe.stages = 2 : i64}
// K2-NEXT: %[[W0:.+]] = nn.param @w0 {pipe.stage = 0 : i64} : tensor<16x16xf32>
// K2-NEXT: %[[G0:.+]] = nn.gemm %[[X]], %[[W0]] {pipe.stage = 0 : i64}
// K2-NEXT: %[[W1:.+]] = nn.param @w1 {pipe.stage = 0 : i64}
// K2-NEXT: %[[G1:.+]] = nn.gemm %[[G0]], %[[W1]] {pipe.stage = 0 : i64}
// K2-NEXT: %[[W2:.+]] = nn.param @w2 {pipe.stage = 0 : i64}
// K2-NEXT: %[[G2:.+]] = nn.gemm %[[G1]], %[[W2]] {pipe.stage = 0 : i64}
// K2-NEXT: nn.param @w3 {pipe.stage = 1 : i64}
// K2-NEXT: nn.param @b3 {pipe.stage = 1 : i64}
// K2-NEXT: nn.gemm %[[G2]], {{.+}} {pipe.stage = 1 : i64}
// K2-NEXT: nn.param @w4 {pipe.stage = 1 : i64}
// K2-NEXT: nn.gemm {{.+}} {pipe.stage = 1 : i64}
// K2-NEXT: nn.softmax_cross_entropy {{.+}} {pipe.stage = 1 : i64}
// K2-NEXT: return

// K3-LABEL: func.func @chain(
// K3-SAME: attributes {pipe.stages = 3 : i64}
// K3-NEXT: nn.param @w0 {pipe.stage = 0 : i64}
// K3-NEXT: nn.gemm {{.+}} {pipe.stage = 0 : i64}
// K3-NEXT: nn.param @w1 {pipe.stage = 0 : i64}
// K3-NEXT: nn.gemm {{.+}} {pipe.stage = 0 : i64}
// K3-NEXT: nn.param @w2 {pipe.stage = 1 : i64}
// K3-NEXT: nn.gemm {{.+}} {pipe.stage = 1 : i64}
// K3-NEXT: nn.param @w3 {pipe.stage = 2 : i64}
// K3-NEXT: nn.param @b3 {pipe.stage = 2 : i64}
// K3-NEXT: nn.gemm {{.+}} {pipe.stage = 2 : i64}
// K3-NEXT: nn.param @w4 {pipe.stage = 2 : i64}
// K3-NEXT: nn.gemm {{.+}} {pipe.stage = 2 : i64}
// K3-NEXT: nn.softmax_cross_entropy {{.+}} {pipe.stage = 2 : i64}
// K3-NEXT: return

// K4-LABEL: func.func @chain(
// K4-SAME: attributes {pipe.stages = 4 : i64}
// K4-NEXT: nn.param @w0 {pipe.stage = 0 : i64}
// K4-NEXT: nn.gemm {{.+}} {pipe.stage = 0 : i64}
// K4-NEXT: nn.param @w1 {pipe.stage = 0 : i64}
// K4-NEXT: nn.gemm {{.+}} {pipe.stage = 0 : i64}
// K4-NEXT: nn.param @w2 {pipe.stage = 1 : i64}
// K4-NEXT: nn.gemm {{.+}} {pipe.stage = 1 : i64}
// K4-NEXT: nn.param @w3 {pipe.stage = 2 : i64}
// K4-NEXT: nn.param @b3 {pipe.stage = 2 : i64}
// K4-NEXT: nn.gemm {{.+}} {pipe.stage = 2 : i64}
// K4-NEXT: nn.param @w4 {pipe.stage = 2 : i64}
// K4-NEXT: nn.gemm {{.+}} {pipe.stage = 2 : i64}
// K4-NEXT: nn.softmax_cross_entropy {{.+}} {pipe.stage = 3 : i64}
// K4-NEXT: return

nn.parameter @w0 : tensor<16x16xf32>
nn.parameter @w1 : tensor<16x64xf32>
nn.parameter @w2 : tensor<64x64xf32>
nn.parameter @w3 : tensor<64x16xf32>
nn.parameter @b3 : tensor<16xf32>
nn.parameter @w4 : tensor<16x4xf32>
// With K = 3, autodiff walks back through the stages: the seed and the loss
// gradient on stage 2, each GEMM's two gradient GEMMs (dA, dB) and the bias's
// reduce_to on the GEMM's stage, all marked nn.backward; the input's GEMM
// gets no dA. Each update is on its parameter's stage.
// AD-LABEL: func.func @chain(
// AD-SAME: %[[X:[^:]+]]: tensor<8x16xf32>, %[[L:[^:]+]]: tensor<8xi64>)
// AD-NEXT: %[[W0:.+]] = nn.param @w0 {pipe.stage = 0 : i64}
// AD-NEXT: %[[G0:.+]] = nn.gemm %[[X]], %[[W0]] {pipe.stage = 0 : i64}
// AD-NEXT: %[[W1:.+]] = nn.param @w1 {pipe.stage = 0 : i64}
// AD-NEXT: %[[G1:.+]] = nn.gemm %[[G0]], %[[W1]] {pipe.stage = 0 : i64}
// AD-NEXT: %[[W2:.+]] = nn.param @w2 {pipe.stage = 1 : i64}
// AD-NEXT: %[[G2:.+]] = nn.gemm %[[G1]], %[[W2]] {pipe.stage = 1 : i64}
// AD-NEXT: %[[W3:.+]] = nn.param @w3 {pipe.stage = 2 : i64}
// AD-NEXT: %[[B3:.+]] = nn.param @b3 {pipe.stage = 2 : i64}
// AD-NEXT: %[[G3:.+]] = nn.gemm %[[G2]], %[[W3]], %[[B3]] {pipe.stage = 2 : i64}
// AD-NEXT: %[[W4:.+]] = nn.param @w4 {pipe.stage = 2 : i64}
// AD-NEXT: %[[Y:.+]] = nn.gemm %[[G3]], %[[W4]] {pipe.stage = 2 : i64}
// AD-NEXT: %[[LOSS:.+]] = nn.softmax_cross_entropy %[[Y]], %[[L]] {pipe.stage = 2 : i64}
// AD-NEXT: %[[ONE:.+]] = nn.constant {nn.backward, pipe.stage = 2 : i64} dense<1.000000e+00> : tensor<f32>
// AD-NEXT: %[[DY:.+]] = nn.softmax_cross_entropy_grad %[[Y]], %[[L]], %[[ONE]] {nn.backward, pipe.stage = 2 : i64}
// AD-NEXT: %[[DG3:.+]] = nn.gemm %[[DY]], %[[W4]] {nn.backward, pipe.stage = 2 : i64, transB = true}
// AD-NEXT: %[[DW4:.+]] = nn.gemm %[[G3]], %[[DY]] {nn.backward, pipe.stage = 2 : i64, transA = true}
// AD-NEXT: %[[DG2:.+]] = nn.gemm %[[DG3]], %[[W3]] {nn.backward, pipe.stage = 2 : i64, transB = true}
// AD-NEXT: %[[DW3:.+]] = nn.gemm %[[G2]], %[[DG3]] {nn.backward, pipe.stage = 2 : i64, transA = true}
// AD-NEXT: %[[DB3:.+]] = nn.reduce_to %[[DG3]] {nn.backward, pipe.stage = 2 : i64}
// AD-NEXT: %[[DG1:.+]] = nn.gemm %[[DG2]], %[[W2]] {nn.backward, pipe.stage = 1 : i64, transB = true}
// AD-NEXT: %[[DW2:.+]] = nn.gemm %[[G1]], %[[DG2]] {nn.backward, pipe.stage = 1 : i64, transA = true}
// AD-NEXT: %[[DG0:.+]] = nn.gemm %[[DG1]], %[[W1]] {nn.backward, pipe.stage = 0 : i64, transB = true}
// AD-NEXT: %[[DW1:.+]] = nn.gemm %[[G0]], %[[DG1]] {nn.backward, pipe.stage = 0 : i64, transA = true}
// AD-NEXT: %[[DW0:.+]] = nn.gemm %[[X]], %[[DG0]] {nn.backward, pipe.stage = 0 : i64, transA = true}
// AD-NEXT: pipe.adam_update %[[W0]], %[[DW0]] {{{.+}}, pipe.stage = 0 : i64, {{.+}}} : tensor<16x16xf32>
// AD-NEXT: pipe.adam_update %[[W1]], %[[DW1]] {{{.+}}, pipe.stage = 0 : i64, {{.+}}} : tensor<16x64xf32>
// AD-NEXT: pipe.adam_update %[[W2]], %[[DW2]] {{{.+}}, pipe.stage = 1 : i64, {{.+}}} : tensor<64x64xf32>
// AD-NEXT: pipe.adam_update %[[W3]], %[[DW3]] {{{.+}}, pipe.stage = 2 : i64, {{.+}}} : tensor<64x16xf32>
// AD-NEXT: pipe.adam_update %[[B3]], %[[DB3]] {{{.+}}, pipe.stage = 2 : i64, {{.+}}} : tensor<16xf32>
// AD-NEXT: pipe.adam_update %[[W4]], %[[DW4]] {{{.+}}, pipe.stage = 2 : i64, {{.+}}} : tensor<16x4xf32>
// AD-NEXT: return %[[LOSS]] : tensor<f32>
func.func @chain(%x: tensor<8x16xf32>, %labels: tensor<8xi64>) -> (tensor<f32> {nn.loss}) {
  %w0 = nn.param @w0 : tensor<16x16xf32>
  %h0 = nn.gemm %x, %w0 : (tensor<8x16xf32>, tensor<16x16xf32>) -> tensor<8x16xf32>
  %w1 = nn.param @w1 : tensor<16x64xf32>
  %h1 = nn.gemm %h0, %w1 : (tensor<8x16xf32>, tensor<16x64xf32>) -> tensor<8x64xf32>
  %w2 = nn.param @w2 : tensor<64x64xf32>
  %h2 = nn.gemm %h1, %w2 : (tensor<8x64xf32>, tensor<64x64xf32>) -> tensor<8x64xf32>
  %w3 = nn.param @w3 : tensor<64x16xf32>
  %b3 = nn.param @b3 : tensor<16xf32>
  %h3 = nn.gemm %h2, %w3, %b3 : (tensor<8x64xf32>, tensor<64x16xf32>, tensor<16xf32>) -> tensor<8x16xf32>
  %w4 = nn.param @w4 : tensor<16x4xf32>
  %y = nn.gemm %h3, %w4 : (tensor<8x16xf32>, tensor<16x4xf32>) -> tensor<8x4xf32>
  %loss = nn.softmax_cross_entropy %y, %labels : tensor<8x4xf32>, tensor<8xi64>
  return %loss : tensor<f32>
}

// -----

nn.parameter @w : tensor<64x64xf32>
nn.parameter @unused : tensor<4xf32>
// The loss goes last even when an op independent of it follows it in the
// block: compute order [gemm, loss, tanh, mul] becomes [gemm, tanh, mul,
// loss]; with K = 3 (costs 30.72, 6.14, 6.15, 3.17) the GEMM, the tanh and
// mul, and the loss get one stage each. Without the move the loss would be
// on stage 1. An unused parameter and a constant get no stage.
// K3-LABEL: func.func @loss_not_last(
// K3-SAME: attributes {pipe.stages = 3 : i64}
// K3-NEXT: nn.param @w {pipe.stage = 0 : i64}
// K3-NEXT: nn.param @unused : tensor<4xf32>
// K3-NEXT: nn.constant dense<2.000000e+00> : tensor<f32>
// K3-NEXT: nn.gemm {{.+}} {pipe.stage = 0 : i64}
// K3-NEXT: nn.softmax_cross_entropy {{.+}} {pipe.stage = 2 : i64}
// K3-NEXT: nn.tanh {{.+}} {pipe.stage = 1 : i64}
// K3-NEXT: nn.mul {{.+}} {pipe.stage = 1 : i64}
// K3-NEXT: return
// K1-LABEL: func.func @loss_not_last(
// K1: nn.softmax_cross_entropy {{.+}} {pipe.stage = 0 : i64}
func.func @loss_not_last(%x: tensor<8x64xf32>, %labels: tensor<8xi64>) -> (tensor<f32> {nn.loss}, tensor<8x64xf32>) {
  %w = nn.param @w : tensor<64x64xf32>
  %unused = nn.param @unused : tensor<4xf32>
  %c = nn.constant dense<2.0> : tensor<f32>
  %g = nn.gemm %x, %w : (tensor<8x64xf32>, tensor<64x64xf32>) -> tensor<8x64xf32>
  %loss = nn.softmax_cross_entropy %g, %labels : tensor<8x64xf32>, tensor<8xi64>
  %aux = nn.tanh %x : tensor<8x64xf32>
  %aux2 = nn.mul %aux, %c : tensor<8x64xf32>, tensor<f32> -> tensor<8x64xf32>
  return %loss, %aux2 : tensor<f32>, tensor<8x64xf32>
}

// -----

// Ties go to the later cut: reshapes cost nothing, so with K = 2 every cut
// between the two tanh ops balances equally, and the reshapes go with the
// first tanh; with K = 3 the loss gets a stage of its own; K = 4 is an
// error: reshapes compute nothing, they never make a stage of their own.
// K2-LABEL: func.func @ties(
// K2-NEXT: nn.tanh {{.+}} {pipe.stage = 0 : i64}
// K2-NEXT: nn.reshape {{.+}} {pipe.stage = 0 : i64}
// K2-NEXT: nn.reshape {{.+}} {pipe.stage = 0 : i64}
// K2-NEXT: nn.tanh {{.+}} {pipe.stage = 1 : i64}
// K2-NEXT: nn.softmax_cross_entropy {{.+}} {pipe.stage = 1 : i64}
// K3-LABEL: func.func @ties(
// K3-NEXT: nn.tanh {{.+}} {pipe.stage = 0 : i64}
// K3-NEXT: nn.reshape {{.+}} {pipe.stage = 0 : i64}
// K3-NEXT: nn.reshape {{.+}} {pipe.stage = 0 : i64}
// K3-NEXT: nn.tanh {{.+}} {pipe.stage = 1 : i64}
// K3-NEXT: nn.softmax_cross_entropy {{.+}} {pipe.stage = 2 : i64}
// K4-NOT: func.func @ties(
// expected-error @+1 {{cannot split 3 compute ops into 4 stages: every stage needs at least one op (reshapes do not count)}}
func.func @ties(%x: tensor<8x8xf32>, %labels: tensor<8xi64>) -> (tensor<f32> {nn.loss}) {
  %a = nn.tanh %x : tensor<8x8xf32>
  %r = nn.reshape %a : tensor<8x8xf32> -> tensor<64xf32>
  %s = nn.reshape %r : tensor<64xf32> -> tensor<8x8xf32>
  %b = nn.tanh %s : tensor<8x8xf32>
  %loss = nn.softmax_cross_entropy %b, %labels : tensor<8x8xf32>, tensor<8xi64>
  return %loss : tensor<f32>
}

// -----

// A view of a graph input goes with its first user, not with the op before
// it: the labels' reshape stays on the loss's stage (which then reads the
// labels itself, as a loss with ignore_index needs), where the op before it
// (the second tanh) is cut onto the stage before.
// K3-LABEL: func.func @input_view(
// K3-NEXT: nn.tanh {{.+}} {pipe.stage = 0 : i64}
// K3-NEXT: nn.tanh {{.+}} {pipe.stage = 1 : i64}
// K3-NEXT: nn.reshape %{{.+}} {pipe.stage = 2 : i64} : tensor<2x4xi64> -> tensor<8xi64>
// K3-NEXT: nn.softmax_cross_entropy {{.+}} {ignore_index = -100 : i64, pipe.stage = 2 : i64}
// K4-NOT: func.func @input_view(
// expected-error @+1 {{cannot split 3 compute ops into 4 stages}}
func.func @input_view(%x: tensor<8x8xf32>, %labels: tensor<2x4xi64>) -> (tensor<f32> {nn.loss}) {
  %a = nn.tanh %x : tensor<8x8xf32>
  %b = nn.tanh %a : tensor<8x8xf32>
  %l = nn.reshape %labels : tensor<2x4xi64> -> tensor<8xi64>
  %loss = nn.softmax_cross_entropy %b, %l {ignore_index = -100 : i64} : tensor<8x8xf32>, tensor<8xi64>
  return %loss : tensor<f32>
}
