// gpipe-remat. mode=stage: each stage's forward returns only the boundary
// inputs its stash depends on (the graph inputs it reads, then the tensors it
// receives, in that order), and its backward starts with a pipe.remat region
// that recomputes the old stash from them (parameters and constants
// re-declared inside) and yields it in the old order, in place of the old
// arguments. A forward with no stash is left alone. mode=none changes
// nothing (not even the module attributes).
// RUN: gpipe-opt %s --split-input-file --gpipe-remat | FileCheck %s
// RUN: gpipe-opt %s --split-input-file --gpipe-remat=mode=stage | FileCheck %s
// RUN: gpipe-opt %s --split-input-file --gpipe-remat=mode=none -o %t.none
// RUN: gpipe-opt %s --split-input-file -o %t.ref
// RUN: diff %t.none %t.ref
// RUN: FileCheck %s --input-file=%t.none --check-prefix=NONE
// RUN: not gpipe-opt %s --split-input-file --gpipe-remat=mode=bogus 2>&1 | FileCheck %s --check-prefix=BAD

// BAD: error: remat mode must be stage, segments or none, got 'bogus'

// mode=none: the stash is still returned and taken as arguments; no region.
// NONE-NOT: pipe.remat
// NONE: func.func @stage0_forward({{.+}} -> (tensor<8x1xf32>, tensor<8x48xf32>, tensor<8x32xf32>)
// NONE: func.func @stage0_backward(%{{[^:]+}}: tensor<8x1xf32>, %{{[^:]+}}: tensor<8x48xf32>, %{{[^:]+}}: tensor<8x32xf32>)
// NONE-NOT: pipe.remat

// The outlined three-stage model of outline.mlir (skip connection from
// stage 0 to stage 2, M = 2), as gpipe-outline-stages emits it.
// CHECK-LABEL: module attributes {pipe.batch_size = 16 : i64, pipe.microbatches = 2 : i64, pipe.remat = "stage", pipe.stages = 3 : i64}
//
// Stage 0 stashed (scale, tanh(X W0), X); it now returns X and scale, the
// sends unchanged.
// CHECK-LABEL: func.func @stage0_forward(
// CHECK-SAME: %[[X:[^:]+]]: tensor<8x32xf32> {nn.input = "x"}, %[[S:[^:]+]]: tensor<8x1xf32> {nn.input = "scale"}) -> (tensor<8x32xf32>, tensor<8x1xf32>)
// CHECK-NEXT: %[[W0:.+]] = nn.param @w0
// CHECK-NEXT: %[[A:.+]] = nn.gemm %[[X]], %[[W0]]
// CHECK-NEXT: %[[T:.+]] = nn.tanh %[[A]]
// CHECK-NEXT: %[[B:.+]] = nn.mul %[[T]], %[[S]]
// CHECK-NEXT: pipe.send %[[A]] to 1 tag 0
// CHECK-NEXT: pipe.send %[[B]] to 2 tag 2
// CHECK-NEXT: pipe.send %[[S]] to 2 tag 3
// CHECK-NEXT: return %[[X]], %[[S]] : tensor<8x32xf32>, tensor<8x1xf32>
//
// The backward takes (X, scale), recomputes tanh(X W0) in the region and
// yields (scale, tanh, X); the gradient code reads the region's results
// where it read the old arguments.
// CHECK-LABEL: func.func @stage0_backward(
// CHECK-SAME: %[[BX:[^:]+]]: tensor<8x32xf32>, %[[BS:[^:]+]]: tensor<8x1xf32>)
// CHECK-SAME: attributes {pipe.phase = "backward", pipe.stage = 0 : i64}
// CHECK-NEXT: %[[R:.+]]:3 = pipe.remat(%[[BX]], %[[BS]]) : (tensor<8x32xf32>, tensor<8x1xf32>) -> (tensor<8x1xf32>, tensor<8x48xf32>, tensor<8x32xf32>) {
// CHECK-NEXT: ^bb0(%[[IX:[^:]+]]: tensor<8x32xf32>, %[[IS:[^:]+]]: tensor<8x1xf32>):
// CHECK-NEXT: %[[IW:.+]] = nn.param @w0 : tensor<32x48xf32>
// CHECK-NEXT: %[[IA:.+]] = nn.gemm %[[IX]], %[[IW]]
// CHECK-NEXT: %[[IT:.+]] = nn.tanh %[[IA]]
// CHECK-NEXT: pipe.yield %[[IS]], %[[IT]], %[[IX]] : tensor<8x1xf32>, tensor<8x48xf32>, tensor<8x32xf32>
// CHECK-NEXT: }
// CHECK-NEXT: %[[G2:.+]] = pipe.recv from 2 tag 5
// CHECK-NEXT: %[[G1:.+]] = pipe.recv from 1 tag 6
// CHECK-NEXT: %[[DT:.+]] = nn.mul %[[G2]], %[[R]]#0
// CHECK-NEXT: %[[DA:.+]] = nn.tanh_grad %[[R]]#1, %[[DT]]
// CHECK-NEXT: %[[DSUM:.+]] = nn.add %[[G1]], %[[DA]]
// CHECK-NEXT: %[[DW:.+]] = nn.gemm %[[R]]#2, %[[DSUM]] {transA = true}
// CHECK-NEXT: pipe.accumulate_grad %[[DW]] to @w0
// CHECK-NEXT: return
//
// The update functions are not touched.
// CHECK-LABEL: func.func @stage0_update()
// CHECK-NEXT: pipe.accumulated_grad @w0
// CHECK-NOT: pipe.remat
// CHECK: return
//
// Stage 1 stashed only what it received: nothing to recompute, no region.
// CHECK-LABEL: func.func @stage1_forward() -> tensor<8x48xf32>
// CHECK-NEXT: %[[RA:.+]] = pipe.recv from 0 tag 0
// CHECK: return %[[RA]] : tensor<8x48xf32>
// CHECK-LABEL: func.func @stage1_backward(
// CHECK-SAME: %[[BA:[^:]+]]: tensor<8x48xf32>)
// CHECK-NOT: pipe.remat
// CHECK-NEXT: %[[DC:.+]] = pipe.recv from 2 tag 4
// CHECK-NEXT: nn.param @w1
// CHECK-NEXT: nn.gemm %[[DC]],
// CHECK-NEXT: nn.gemm %[[BA]], %[[DC]] {transA = true}
//
// Stage 2 stashed (logits, labels, (C + B) * scale, scale); the new stash is
// the labels, then the three received tensors in order of receipt.
// CHECK-LABEL: func.func @stage2_forward(
// CHECK-SAME: %[[L:[^:]+]]: tensor<8xi64> {nn.input = "labels"}) -> (tensor<8xi64>, tensor<8x48xf32>, tensor<8x1xf32>, tensor<8x48xf32>)
// CHECK-NEXT: %[[RB:.+]] = pipe.recv from 0 tag 2
// CHECK-NEXT: %[[RS:.+]] = pipe.recv from 0 tag 3
// CHECK-NEXT: %[[RC:.+]] = pipe.recv from 1 tag 1
// CHECK: pipe.report_loss
// CHECK-NEXT: return %[[L]], %[[RB]], %[[RS]], %[[RC]] :
// CHECK-LABEL: func.func @stage2_backward(
// CHECK-SAME: %[[BL:[^:]+]]: tensor<8xi64>, %[[BB:[^:]+]]: tensor<8x48xf32>, %[[BS:[^:]+]]: tensor<8x1xf32>, %[[BC:[^:]+]]: tensor<8x48xf32>)
// CHECK-NEXT: %[[R2:.+]]:4 = pipe.remat(%[[BL]], %[[BB]], %[[BS]], %[[BC]]) : (tensor<8xi64>, tensor<8x48xf32>, tensor<8x1xf32>, tensor<8x48xf32>) -> (tensor<8x4xf32>, tensor<8xi64>, tensor<8x48xf32>, tensor<8x1xf32>) {
// CHECK-NEXT: ^bb0(%[[IL:[^:]+]]: tensor<8xi64>, %[[IB:[^:]+]]: tensor<8x48xf32>, %[[IS:[^:]+]]: tensor<8x1xf32>, %[[IC:[^:]+]]: tensor<8x48xf32>):
// CHECK-NEXT: %[[ID:.+]] = nn.add %[[IC]], %[[IB]]
// CHECK-NEXT: %[[IE:.+]] = nn.mul %[[ID]], %[[IS]]
// CHECK-NEXT: %[[IW2:.+]] = nn.param @w2
// CHECK-NEXT: %[[IY:.+]] = nn.gemm %[[IE]], %[[IW2]]
// CHECK-NEXT: pipe.yield %[[IY]], %[[IL]], %[[IE]], %[[IS]] :
// CHECK-NEXT: }
// CHECK-NEXT: %[[ONE:.+]] = nn.constant dense<1.000000e+00>
// CHECK-NEXT: nn.softmax_cross_entropy_grad %[[R2]]#0, %[[R2]]#1, %[[ONE]]
// CHECK-NOT: pipe.remat
// CHECK-LABEL: func.func @stage2_update()
module attributes {pipe.batch_size = 16 : i64, pipe.microbatches = 2 : i64, pipe.stages = 3 : i64} {
  nn.parameter @w0 : tensor<32x48xf32>
  nn.parameter @w1 : tensor<48x48xf32>
  nn.parameter @w2 : tensor<48x4xf32>
  func.func @stage0_forward(%x: tensor<8x32xf32> {nn.input = "x"}, %scale: tensor<8x1xf32> {nn.input = "scale"}) -> (tensor<8x1xf32>, tensor<8x48xf32>, tensor<8x32xf32>) attributes {pipe.phase = "forward", pipe.stage = 0 : i64} {
    %w0 = nn.param @w0 : tensor<32x48xf32>
    %a = nn.gemm %x, %w0 : (tensor<8x32xf32>, tensor<32x48xf32>) -> tensor<8x48xf32>
    %t = nn.tanh %a : tensor<8x48xf32>
    %b = nn.mul %t, %scale : tensor<8x48xf32>, tensor<8x1xf32> -> tensor<8x48xf32>
    pipe.send %a to 1 tag 0 : tensor<8x48xf32>
    pipe.send %b to 2 tag 2 : tensor<8x48xf32>
    pipe.send %scale to 2 tag 3 : tensor<8x1xf32>
    return %scale, %t, %x : tensor<8x1xf32>, tensor<8x48xf32>, tensor<8x32xf32>
  }
  func.func @stage0_backward(%scale: tensor<8x1xf32>, %t: tensor<8x48xf32>, %x: tensor<8x32xf32>) attributes {pipe.phase = "backward", pipe.stage = 0 : i64} {
    %db = pipe.recv from 2 tag 5 : tensor<8x48xf32>
    %da1 = pipe.recv from 1 tag 6 : tensor<8x48xf32>
    %dt = nn.mul %db, %scale : tensor<8x48xf32>, tensor<8x1xf32> -> tensor<8x48xf32>
    %da2 = nn.tanh_grad %t, %dt : tensor<8x48xf32>
    %da = nn.add %da1, %da2 : tensor<8x48xf32>, tensor<8x48xf32> -> tensor<8x48xf32>
    %dw0 = nn.gemm %x, %da {transA = true} : (tensor<8x32xf32>, tensor<8x48xf32>) -> tensor<32x48xf32>
    pipe.accumulate_grad %dw0 to @w0 : tensor<32x48xf32>
    return
  }
  func.func @stage0_update() attributes {pipe.phase = "update", pipe.stage = 0 : i64} {
    %g = pipe.accumulated_grad @w0 : tensor<32x48xf32>
    %w0 = nn.param @w0 : tensor<32x48xf32>
    pipe.sgd_update %w0, %g {lr = 1.000000e-02 : f64, momentum = 0.000000e+00 : f64, nesterov = false, weight_decay = 0.000000e+00 : f64} : tensor<32x48xf32>
    return
  }
  func.func @stage1_forward() -> tensor<8x48xf32> attributes {pipe.phase = "forward", pipe.stage = 1 : i64} {
    %a = pipe.recv from 0 tag 0 : tensor<8x48xf32>
    %w1 = nn.param @w1 : tensor<48x48xf32>
    %c = nn.gemm %a, %w1 : (tensor<8x48xf32>, tensor<48x48xf32>) -> tensor<8x48xf32>
    pipe.send %c to 2 tag 1 : tensor<8x48xf32>
    return %a : tensor<8x48xf32>
  }
  func.func @stage1_backward(%a: tensor<8x48xf32>) attributes {pipe.phase = "backward", pipe.stage = 1 : i64} {
    %dc = pipe.recv from 2 tag 4 : tensor<8x48xf32>
    %w1 = nn.param @w1 : tensor<48x48xf32>
    %da = nn.gemm %dc, %w1 {transB = true} : (tensor<8x48xf32>, tensor<48x48xf32>) -> tensor<8x48xf32>
    %dw1 = nn.gemm %a, %dc {transA = true} : (tensor<8x48xf32>, tensor<8x48xf32>) -> tensor<48x48xf32>
    pipe.accumulate_grad %dw1 to @w1 : tensor<48x48xf32>
    pipe.send %da to 0 tag 6 : tensor<8x48xf32>
    return
  }
  func.func @stage1_update() attributes {pipe.phase = "update", pipe.stage = 1 : i64} {
    %g = pipe.accumulated_grad @w1 : tensor<48x48xf32>
    %w1 = nn.param @w1 : tensor<48x48xf32>
    pipe.sgd_update %w1, %g {lr = 1.000000e-02 : f64, momentum = 0.000000e+00 : f64, nesterov = false, weight_decay = 0.000000e+00 : f64} : tensor<48x48xf32>
    return
  }
  func.func @stage2_forward(%labels: tensor<8xi64> {nn.input = "labels"}) -> (tensor<8x4xf32>, tensor<8xi64>, tensor<8x48xf32>, tensor<8x1xf32>) attributes {pipe.phase = "forward", pipe.stage = 2 : i64} {
    %b = pipe.recv from 0 tag 2 : tensor<8x48xf32>
    %scale = pipe.recv from 0 tag 3 : tensor<8x1xf32>
    %c = pipe.recv from 1 tag 1 : tensor<8x48xf32>
    %d = nn.add %c, %b : tensor<8x48xf32>, tensor<8x48xf32> -> tensor<8x48xf32>
    %e = nn.mul %d, %scale : tensor<8x48xf32>, tensor<8x1xf32> -> tensor<8x48xf32>
    %w2 = nn.param @w2 : tensor<48x4xf32>
    %y = nn.gemm %e, %w2 : (tensor<8x48xf32>, tensor<48x4xf32>) -> tensor<8x4xf32>
    %loss = nn.softmax_cross_entropy %y, %labels {microbatches = 2 : i64} : tensor<8x4xf32>, tensor<8xi64>
    pipe.report_loss %loss : tensor<f32>
    return %y, %labels, %e, %scale : tensor<8x4xf32>, tensor<8xi64>, tensor<8x48xf32>, tensor<8x1xf32>
  }
  func.func @stage2_backward(%y: tensor<8x4xf32>, %labels: tensor<8xi64>, %e: tensor<8x48xf32>, %scale: tensor<8x1xf32>) attributes {pipe.phase = "backward", pipe.stage = 2 : i64} {
    %one = nn.constant dense<1.000000e+00> : tensor<f32>
    %dy = nn.softmax_cross_entropy_grad %y, %labels, %one {microbatches = 2 : i64} : tensor<8x4xf32>, tensor<8xi64>
    %w2 = nn.param @w2 : tensor<48x4xf32>
    %de = nn.gemm %dy, %w2 {transB = true} : (tensor<8x4xf32>, tensor<48x4xf32>) -> tensor<8x48xf32>
    %dw2 = nn.gemm %e, %dy {transA = true} : (tensor<8x48xf32>, tensor<8x4xf32>) -> tensor<48x4xf32>
    pipe.accumulate_grad %dw2 to @w2 : tensor<48x4xf32>
    %dd = nn.mul %de, %scale : tensor<8x48xf32>, tensor<8x1xf32> -> tensor<8x48xf32>
    pipe.send %dd to 1 tag 4 : tensor<8x48xf32>
    pipe.send %dd to 0 tag 5 : tensor<8x48xf32>
    return
  }
  func.func @stage2_update() attributes {pipe.phase = "update", pipe.stage = 2 : i64} {
    %g = pipe.accumulated_grad @w2 : tensor<48x4xf32>
    %w2 = nn.param @w2 : tensor<48x4xf32>
    pipe.sgd_update %w2, %g {lr = 1.000000e-02 : f64, momentum = 0.000000e+00 : f64, nesterov = false, weight_decay = 0.000000e+00 : f64} : tensor<48x4xf32>
    return
  }
}

// -----

// Stage 0 reads two inputs but its stash (relu(X) * 2) depends on X only:
// the mask is not kept. The constant is re-declared in the region. Ops only
// the old stash needed are erased from the forward; what it sends stays.
// Stage 1 keeps nothing: its functions are left alone.
// CHECK-LABEL: module attributes {pipe.microbatches = 1 : i64, pipe.remat = "stage", pipe.stages = 2 : i64}
// CHECK-LABEL: func.func @stage0_forward(
// CHECK-SAME: %[[X:[^:]+]]: tensor<4x8xf32> {nn.input = "x"}, %[[M:[^:]+]]: tensor<4x8xf32> {nn.input = "mask"}) -> tensor<4x8xf32>
// CHECK-NEXT: %[[R:.+]] = nn.relu %[[X]]
// CHECK-NEXT: %[[C:.+]] = nn.constant dense<2.000000e+00>
// CHECK-NEXT: %[[H:.+]] = nn.mul %[[R]], %[[C]]
// CHECK-NEXT: %[[O:.+]] = nn.mul %[[H]], %[[M]]
// CHECK-NEXT: pipe.send %[[O]] to 1 tag 0
// CHECK-NEXT: return %[[X]] : tensor<4x8xf32>
// CHECK-LABEL: func.func @stage0_backward(
// CHECK-SAME: %[[BX:[^:]+]]: tensor<4x8xf32>)
// CHECK-NEXT: %[[RH:.+]] = pipe.remat(%[[BX]]) : (tensor<4x8xf32>) -> tensor<4x8xf32> {
// CHECK-NEXT: ^bb0(%[[IX:[^:]+]]: tensor<4x8xf32>):
// CHECK-NEXT: %[[IR:.+]] = nn.relu %[[IX]]
// CHECK-NEXT: %[[IC:.+]] = nn.constant dense<2.000000e+00>
// CHECK-NEXT: %[[IH:.+]] = nn.mul %[[IR]], %[[IC]]
// CHECK-NEXT: pipe.yield %[[IH]] : tensor<4x8xf32>
// CHECK-NEXT: }
// CHECK-NEXT: %[[G:.+]] = pipe.recv from 1 tag 1
// CHECK-NEXT: nn.mul %[[G]], %[[RH]]
// CHECK-LABEL: func.func @stage1_forward() attributes
// CHECK-NEXT: pipe.recv from 0 tag 0
// CHECK-NEXT: nn.reduce_to
// CHECK-NEXT: pipe.report_loss
// CHECK-NEXT: return
// CHECK-LABEL: func.func @stage1_backward() attributes
// CHECK-NEXT: nn.constant
// CHECK-NEXT: pipe.send
// CHECK-NEXT: pipe.recv
// CHECK-NEXT: return
module attributes {pipe.microbatches = 1 : i64, pipe.stages = 2 : i64} {
  func.func @stage0_forward(%x: tensor<4x8xf32> {nn.input = "x"}, %mask: tensor<4x8xf32> {nn.input = "mask"}) -> tensor<4x8xf32> attributes {pipe.phase = "forward", pipe.stage = 0 : i64} {
    %r = nn.relu %x : tensor<4x8xf32>
    %c = nn.constant dense<2.0> : tensor<f32>
    %h = nn.mul %r, %c : tensor<4x8xf32>, tensor<f32> -> tensor<4x8xf32>
    %o = nn.mul %h, %mask : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
    pipe.send %o to 1 tag 0 : tensor<4x8xf32>
    return %h : tensor<4x8xf32>
  }
  func.func @stage0_backward(%h: tensor<4x8xf32>) attributes {pipe.phase = "backward", pipe.stage = 0 : i64} {
    %g = pipe.recv from 1 tag 1 : tensor<4x8xf32>
    %p = nn.mul %g, %h : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
    pipe.send %p to 1 tag 2 : tensor<4x8xf32>
    return
  }
  func.func @stage0_update() attributes {pipe.phase = "update", pipe.stage = 0 : i64} {
    return
  }
  func.func @stage1_forward() attributes {pipe.phase = "forward", pipe.stage = 1 : i64} {
    %o = pipe.recv from 0 tag 0 : tensor<4x8xf32>
    %l = nn.reduce_to %o : tensor<4x8xf32> -> tensor<f32>
    pipe.report_loss %l : tensor<f32>
    return
  }
  func.func @stage1_backward() attributes {pipe.phase = "backward", pipe.stage = 1 : i64} {
    %g = nn.constant dense<1.0> : tensor<4x8xf32>
    pipe.send %g to 0 tag 1 : tensor<4x8xf32>
    %p = pipe.recv from 0 tag 2 : tensor<4x8xf32>
    return
  }
  func.func @stage1_update() attributes {pipe.phase = "update", pipe.stage = 1 : i64} {
    return
  }
}
