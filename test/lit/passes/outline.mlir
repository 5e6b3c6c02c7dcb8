// gpipe-outline-stages, after the driver's pipeline up to it: each stage
// becomes @stage<S>_forward (arguments: the graph inputs it reads, with their
// nn.input names; results: the stash its backward needs), @stage<S>_backward
// (arguments: the stash) and @stage<S>_update. Values crossing stages become
// pipe.send / pipe.recv pairs with the same tag and type, each side naming
// the other (forward: activations and graph inputs, possibly skipping a
// stage; backward: gradients). Parameter gradients go through
// pipe.accumulate_grad / pipe.accumulated_grad; the loss through
// pipe.report_loss on the last stage. The module gets pipe.stages,
// pipe.microbatches and pipe.batch_size; stage and backward marks are gone
// from the ops.
// RUN: gpipe-opt %s --split-input-file --pass-pipeline='builtin.module(func.func(gpipe-microbatch{microbatches=2}, gpipe-partition{stages=2}, gpipe-autodiff, gpipe-optimizer{optimizer=adamw}), cse, gpipe-outline-stages)' | FileCheck %s --check-prefix=MLP
// RUN: gpipe-opt %s --split-input-file --pass-pipeline='builtin.module(func.func(gpipe-microbatch{microbatches=2}, gpipe-partition{stages=3}, gpipe-autodiff, gpipe-optimizer), cse, gpipe-outline-stages)' | FileCheck %s --check-prefix=SKIP

nn.parameter @fc1.weight : tensor<64x16xf32>
nn.parameter @fc1.bias : tensor<64xf32>
nn.parameter @fc2.weight : tensor<4x64xf32>
// A two-layer MLP, K = 2, M = 2 (batch 8 -> 4): the cost model puts the
// first GEMM on stage 0 and the relu, second GEMM and loss on stage 1.
// MLP-LABEL: module attributes {pipe.batch_size = 8 : i64, pipe.microbatches = 2 : i64, pipe.stages = 2 : i64}
// MLP-NOT: nn.backward
// MLP-NOT: pipe.stage = {{[0-9]+}} : i64}
//
// Stage 0 forward reads x, sends the pre-activation to stage 1 and keeps x
// (for dW1 = dH^T X).
// MLP-LABEL: func.func @stage0_forward(
// MLP-SAME: %[[X:[^:]+]]: tensor<4x16xf32> {nn.input = "x"}) -> tensor<4x16xf32>
// MLP-SAME: attributes {pipe.phase = "forward", pipe.stage = 0 : i64}
// MLP-NEXT: %[[W1:.+]] = nn.param @fc1.weight : tensor<64x16xf32>
// MLP-NEXT: %[[B1:.+]] = nn.param @fc1.bias : tensor<64xf32>
// MLP-NEXT: %[[H:.+]] = nn.gemm %[[X]], %[[W1]], %[[B1]] {transB = true}
// MLP-NEXT: pipe.send %[[H]] to 1 tag [[TH:[0-9]+]] : tensor<4x64xf32>
// MLP-NEXT: return %[[X]] : tensor<4x16xf32>
//
// Stage 0 backward: receives dH from stage 1, accumulates both gradients.
// MLP-LABEL: func.func @stage0_backward(
// MLP-SAME: %[[SX:[^:]+]]: tensor<4x16xf32>)
// MLP-SAME: attributes {pipe.phase = "backward", pipe.stage = 0 : i64}
// MLP-NEXT: %[[DH:.+]] = pipe.recv from 1 tag [[TDH:[0-9]+]] : tensor<4x64xf32>
// MLP-NEXT: %[[DW1:.+]] = nn.gemm %[[DH]], %[[SX]] {transA = true} : (tensor<4x64xf32>, tensor<4x16xf32>) -> tensor<64x16xf32>
// MLP-NEXT: pipe.accumulate_grad %[[DW1]] to @fc1.weight : tensor<64x16xf32>
// MLP-NEXT: %[[DB1:.+]] = nn.reduce_to %[[DH]]
// MLP-NEXT: pipe.accumulate_grad %[[DB1]] to @fc1.bias : tensor<64xf32>
// MLP-NEXT: return
//
// Stage 0 update: each accumulated gradient feeds its parameter's update.
// MLP-LABEL: func.func @stage0_update()
// MLP-SAME: attributes {pipe.phase = "update", pipe.stage = 0 : i64}
// MLP-NEXT: %[[G:.+]] = pipe.accumulated_grad @fc1.weight : tensor<64x16xf32>
// MLP-NEXT: %[[P:.+]] = nn.param @fc1.weight : tensor<64x16xf32>
// MLP-NEXT: pipe.adam_update %[[P]], %[[G]] {{{.*}}decoupled = true{{.*}}} : tensor<64x16xf32>
// MLP-NEXT: %[[G:.+]] = pipe.accumulated_grad @fc1.bias : tensor<64xf32>
// MLP-NEXT: %[[P:.+]] = nn.param @fc1.bias : tensor<64xf32>
// MLP-NEXT: pipe.adam_update %[[P]], %[[G]] {{.+}} : tensor<64xf32>
// MLP-NEXT: return
//
// Stage 1 forward reads the labels (y), receives H with stage 0's tag and
// type, reports the loss, and keeps the logits, the labels and relu(H) (the
// relu's gradient reads its output).
// MLP-LABEL: func.func @stage1_forward(
// MLP-SAME: %[[Y:[^:]+]]: tensor<4xi64> {nn.input = "y"}) -> (tensor<4x4xf32>, tensor<4xi64>, tensor<4x64xf32>)
// MLP-SAME: attributes {pipe.phase = "forward", pipe.stage = 1 : i64}
// MLP-NEXT: %[[RH:.+]] = pipe.recv from 0 tag [[TH]] : tensor<4x64xf32>
// MLP-NEXT: %[[A:.+]] = nn.relu %[[RH]]
// MLP-NEXT: %[[W2:.+]] = nn.param @fc2.weight
// MLP-NEXT: %[[LOGITS:.+]] = nn.gemm %[[A]], %[[W2]] {transB = true}
// MLP-NEXT: %[[LOSS:.+]] = nn.softmax_cross_entropy %[[LOGITS]], %[[Y]] {ignore_index = -100 : i64, microbatches = 2 : i64}
// MLP-NEXT: pipe.report_loss %[[LOSS]] : tensor<f32>
// MLP-NEXT: return %[[LOGITS]], %[[Y]], %[[A]] :
//
// Stage 1 backward: the stash in the same order; dH goes back to stage 0.
// MLP-LABEL: func.func @stage1_backward(
// MLP-SAME: %[[SL:[^:]+]]: tensor<4x4xf32>, %[[SY:[^:]+]]: tensor<4xi64>, %[[SA:[^:]+]]: tensor<4x64xf32>)
// MLP-SAME: attributes {pipe.phase = "backward", pipe.stage = 1 : i64}
// MLP-NEXT: %[[ONE:.+]] = nn.constant dense<1.000000e+00> : tensor<f32>
// MLP-NEXT: %[[DY:.+]] = nn.softmax_cross_entropy_grad %[[SL]], %[[SY]], %[[ONE]] {ignore_index = -100 : i64, microbatches = 2 : i64}
// MLP-NEXT: %[[W2:.+]] = nn.param @fc2.weight
// MLP-NEXT: %[[DA:.+]] = nn.gemm %[[DY]], %[[W2]]
// MLP-NEXT: %[[DW2:.+]] = nn.gemm %[[DY]], %[[SA]] {transA = true}
// MLP-NEXT: pipe.accumulate_grad %[[DW2]] to @fc2.weight : tensor<4x64xf32>
// MLP-NEXT: %[[DHS:.+]] = nn.relu_grad %[[SA]], %[[DA]]
// MLP-NEXT: pipe.send %[[DHS]] to 0 tag [[TDH]] : tensor<4x64xf32>
// MLP-NEXT: return
//
// MLP-LABEL: func.func @stage1_update()
// MLP-NEXT: %[[G:.+]] = pipe.accumulated_grad @fc2.weight : tensor<4x64xf32>
// MLP-NEXT: %[[P:.+]] = nn.param @fc2.weight : tensor<4x64xf32>
// MLP-NEXT: pipe.adam_update %[[P]], %[[G]]
// MLP-NEXT: return
// MLP-NOT: func.func
// MLP: {{//}} -----
func.func @mlp(%x: tensor<8x16xf32> {nn.input = "x"}, %labels: tensor<8xi64> {nn.input = "y"}) -> (tensor<f32> {nn.loss, nn.output = "loss"}) {
  %w1 = nn.param @fc1.weight : tensor<64x16xf32>
  %b1 = nn.param @fc1.bias : tensor<64xf32>
  %h = nn.gemm %x, %w1, %b1 {transB = true} : (tensor<8x16xf32>, tensor<64x16xf32>, tensor<64xf32>) -> tensor<8x64xf32>
  %a = nn.relu %h : tensor<8x64xf32>
  %w2 = nn.param @fc2.weight : tensor<4x64xf32>
  %y = nn.gemm %a, %w2 {transB = true} : (tensor<8x64xf32>, tensor<4x64xf32>) -> tensor<8x4xf32>
  %loss = nn.softmax_cross_entropy %y, %labels {ignore_index = -100 : i64} : tensor<8x4xf32>, tensor<8xi64>
  return %loss : tensor<f32>
}

// -----

nn.parameter @w0 : tensor<32x48xf32>
nn.parameter @w1 : tensor<48x48xf32>
nn.parameter @w2 : tensor<48x4xf32>
// Three stages: the cost model (C = A W1 alone is the heaviest group) puts
// A = X W0 and B = tanh(A) * scale on stage 0, C on stage 1, and
// (C + B) * scale, the logits and the loss on stage 2. So B skips
// stage 1 forward (0 -> 2) and its gradient skips it backward (2 -> 0); the
// graph input `scale` is read first by stage 0, which sends it to stage 2; the
// labels are read by stage 2 only. Receives are ordered by ascending peer in
// the forward and descending peer in the backward, sends likewise.
// SKIP-LABEL: module attributes {pipe.batch_size = 16 : i64, pipe.microbatches = 2 : i64, pipe.stages = 3 : i64}
//
// SKIP-LABEL: func.func @stage0_forward(
// SKIP-SAME: %[[X:[^:]+]]: tensor<8x32xf32> {nn.input = "x"}, %[[S:[^:]+]]: tensor<8x1xf32> {nn.input = "scale"})
// SKIP-SAME: -> (tensor<8x1xf32>, tensor<8x48xf32>, tensor<8x32xf32>)
// SKIP-NEXT: %[[W0:.+]] = nn.param @w0
// SKIP-NEXT: %[[A:.+]] = nn.gemm %[[X]], %[[W0]]
// SKIP-NEXT: %[[T:.+]] = nn.tanh %[[A]]
// SKIP-NEXT: %[[B:.+]] = nn.mul %[[T]], %[[S]]
// SKIP-NEXT: pipe.send %[[A]] to 1 tag [[TA:[0-9]+]] : tensor<8x48xf32>
// SKIP-NEXT: pipe.send %[[B]] to 2 tag [[TB:[0-9]+]] : tensor<8x48xf32>
// SKIP-NEXT: pipe.send %[[S]] to 2 tag [[TS:[0-9]+]] : tensor<8x1xf32>
// SKIP-NEXT: return %[[S]], %[[T]], %[[X]] :
//
// SKIP-LABEL: func.func @stage0_backward(
// SKIP-SAME: %[[SS:[^:]+]]: tensor<8x1xf32>, %[[ST:[^:]+]]: tensor<8x48xf32>, %[[SX:[^:]+]]: tensor<8x32xf32>)
// SKIP-NEXT: %[[DB:.+]] = pipe.recv from 2 tag [[TDB:[0-9]+]] : tensor<8x48xf32>
// SKIP-NEXT: %[[DA1:.+]] = pipe.recv from 1 tag [[TDA:[0-9]+]] : tensor<8x48xf32>
// SKIP-NEXT: %[[DT:.+]] = nn.mul %[[DB]], %[[SS]]
// SKIP-NEXT: %[[DA2:.+]] = nn.tanh_grad %[[ST]], %[[DT]]
// SKIP-NEXT: %[[DA:.+]] = nn.add %[[DA1]], %[[DA2]]
// SKIP-NEXT: %[[DW0:.+]] = nn.gemm %[[SX]], %[[DA]] {transA = true}
// SKIP-NEXT: pipe.accumulate_grad %[[DW0]] to @w0 : tensor<32x48xf32>
// SKIP-NEXT: return
//
// SKIP-LABEL: func.func @stage0_update()
// SKIP-NEXT: pipe.accumulated_grad @w0
// SKIP-NEXT: nn.param @w0
// SKIP-NEXT: pipe.sgd_update
// SKIP-NEXT: return
//
// Stage 1 reads no graph input; it keeps the A it received (for dW1).
// SKIP-LABEL: func.func @stage1_forward() -> tensor<8x48xf32>
// SKIP-NEXT: %[[RA:.+]] = pipe.recv from 0 tag [[TA]] : tensor<8x48xf32>
// SKIP-NEXT: %[[W1:.+]] = nn.param @w1
// SKIP-NEXT: %[[C:.+]] = nn.gemm %[[RA]], %[[W1]]
// SKIP-NEXT: pipe.send %[[C]] to 2 tag [[TC:[0-9]+]] : tensor<8x48xf32>
// SKIP-NEXT: return %[[RA]] : tensor<8x48xf32>
//
// SKIP-LABEL: func.func @stage1_backward(
// SKIP-SAME: %[[SA:[^:]+]]: tensor<8x48xf32>)
// SKIP-NEXT: %[[DC:.+]] = pipe.recv from 2 tag [[TDC:[0-9]+]] : tensor<8x48xf32>
// SKIP-NEXT: %[[W1:.+]] = nn.param @w1
// SKIP-NEXT: %[[DAC:.+]] = nn.gemm %[[DC]], %[[W1]] {transB = true}
// SKIP-NEXT: %[[DW1:.+]] = nn.gemm %[[SA]], %[[DC]] {transA = true}
// SKIP-NEXT: pipe.accumulate_grad %[[DW1]] to @w1 : tensor<48x48xf32>
// SKIP-NEXT: pipe.send %[[DAC]] to 0 tag [[TDA]] : tensor<8x48xf32>
// SKIP-NEXT: return
//
// SKIP-LABEL: func.func @stage1_update()
// SKIP-NEXT: pipe.accumulated_grad @w1
//
// Stage 2: receives from stage 0 (B, then scale), then from stage 1 (C);
// reports the loss; sends d(C + B) to stage 1 and then to stage 0, as two
// transfers with their own tags.
// SKIP-LABEL: func.func @stage2_forward(
// SKIP-SAME: %[[L:[^:]+]]: tensor<8xi64> {nn.input = "labels"}) -> (tensor<8x4xf32>, tensor<8xi64>, tensor<8x48xf32>, tensor<8x1xf32>)
// SKIP-NEXT: %[[RB:.+]] = pipe.recv from 0 tag [[TB]] : tensor<8x48xf32>
// SKIP-NEXT: %[[RS:.+]] = pipe.recv from 0 tag [[TS]] : tensor<8x1xf32>
// SKIP-NEXT: %[[RC:.+]] = pipe.recv from 1 tag [[TC]] : tensor<8x48xf32>
// SKIP-NEXT: %[[D:.+]] = nn.add %[[RC]], %[[RB]]
// SKIP-NEXT: %[[E:.+]] = nn.mul %[[D]], %[[RS]]
// SKIP-NEXT: %[[W2:.+]] = nn.param @w2
// SKIP-NEXT: %[[LOGITS:.+]] = nn.gemm %[[E]], %[[W2]]
// SKIP-NEXT: %[[LOSS:.+]] = nn.softmax_cross_entropy %[[LOGITS]], %[[L]] {microbatches = 2 : i64}
// SKIP-NEXT: pipe.report_loss %[[LOSS]] : tensor<f32>
// SKIP-NEXT: return %[[LOGITS]], %[[L]], %[[E]], %[[RS]] :
//
// SKIP-LABEL: func.func @stage2_backward(
// SKIP-SAME: %[[SL:[^:]+]]: tensor<8x4xf32>, %[[SY:[^:]+]]: tensor<8xi64>, %[[SE:[^:]+]]: tensor<8x48xf32>, %[[SS2:[^:]+]]: tensor<8x1xf32>)
// SKIP-NEXT: %[[ONE:.+]] = nn.constant dense<1.000000e+00>
// SKIP-NEXT: %[[DY:.+]] = nn.softmax_cross_entropy_grad %[[SL]], %[[SY]], %[[ONE]]
// SKIP-NEXT: %[[W2:.+]] = nn.param @w2
// SKIP-NEXT: %[[DE:.+]] = nn.gemm %[[DY]], %[[W2]] {transB = true}
// SKIP-NEXT: %[[DW2:.+]] = nn.gemm %[[SE]], %[[DY]] {transA = true}
// SKIP-NEXT: pipe.accumulate_grad %[[DW2]] to @w2 : tensor<48x4xf32>
// SKIP-NEXT: %[[DD:.+]] = nn.mul %[[DE]], %[[SS2]]
// SKIP-NEXT: pipe.send %[[DD]] to 1 tag [[TDC]] : tensor<8x48xf32>
// SKIP-NEXT: pipe.send %[[DD]] to 0 tag [[TDB]] : tensor<8x48xf32>
// SKIP-NEXT: return
//
// SKIP-LABEL: func.func @stage2_update()
// SKIP-NEXT: pipe.accumulated_grad @w2
// SKIP-NEXT: nn.param @w2
// SKIP-NEXT: pipe.sgd_update
// SKIP-NEXT: return
func.func @skip(%x: tensor<16x32xf32> {nn.input = "x"}, %scale: tensor<16x1xf32> {nn.input = "scale"}, %labels: tensor<16xi64> {nn.input = "labels"}) -> (tensor<f32> {nn.loss, nn.output = "loss"}) {
  %w0 = nn.param @w0 : tensor<32x48xf32>
  %a = nn.gemm %x, %w0 : (tensor<16x32xf32>, tensor<32x48xf32>) -> tensor<16x48xf32>
  %t = nn.tanh %a : tensor<16x48xf32>
  %b = nn.mul %t, %scale : tensor<16x48xf32>, tensor<16x1xf32> -> tensor<16x48xf32>
  %w1 = nn.param @w1 : tensor<48x48xf32>
  %c = nn.gemm %a, %w1 : (tensor<16x48xf32>, tensor<48x48xf32>) -> tensor<16x48xf32>
  %d = nn.add %c, %b : tensor<16x48xf32>, tensor<16x48xf32> -> tensor<16x48xf32>
  %e = nn.mul %d, %scale : tensor<16x48xf32>, tensor<16x1xf32> -> tensor<16x48xf32>
  %w2 = nn.param @w2 : tensor<48x4xf32>
  %y = nn.gemm %e, %w2 : (tensor<16x48xf32>, tensor<48x4xf32>) -> tensor<16x4xf32>
  %loss = nn.softmax_cross_entropy %y, %labels : tensor<16x4xf32>, tensor<16xi64>
  return %loss : tensor<f32>
}
