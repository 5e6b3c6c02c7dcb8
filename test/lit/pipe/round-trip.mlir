// Every pipe op (sgd_update, adam_update, send, recv, accumulate_grad,
// accumulated_grad, report_loss, remat + yield, schedule) and attribute
// (#pipe.action, the discardable pipe.* attributes): parsed, printed and
// re-parsed; then through the generic form.
// RUN: gpipe-opt %s | gpipe-opt | FileCheck %s
// RUN: gpipe-opt %s --mlir-print-op-generic | gpipe-opt | FileCheck %s

// The parameters the functions below name (nn.parameter symbols).
// CHECK: nn.parameter @w : tensor<4x8xf32>
// CHECK-NEXT: nn.parameter @w2 : tensor<2x3xf32>
// CHECK-NEXT: nn.parameter @w3 : tensor<8x16xf32>
// CHECK-NEXT: nn.parameter @b : tensor<8xf32>
// CHECK-NEXT: nn.parameter @scale : tensor<f32>
// CHECK-NEXT: nn.parameter @fc.weight : tensor<4x8xf32>
nn.parameter @w : tensor<4x8xf32>
nn.parameter @w2 : tensor<2x3xf32>
nn.parameter @w3 : tensor<8x16xf32>
nn.parameter @b : tensor<8xf32>
nn.parameter @scale : tensor<f32>
nn.parameter @fc.weight : tensor<4x8xf32>

// Plain SGD, then momentum + Nesterov + weight decay; the parameter is read
// before its update (allowed).
// CHECK-LABEL: func.func @sgd(
// CHECK-SAME: %[[X:[^:]+]]: tensor<4x8xf32>, %[[G:[^:]+]]: tensor<4x8xf32>, %[[GB:[^:]+]]: tensor<8xf32>
// CHECK-NEXT: %[[W:.+]] = nn.param @w : tensor<4x8xf32>
// CHECK-NEXT: %[[B:.+]] = nn.param @b : tensor<8xf32>
// CHECK-NEXT: %[[Y:.+]] = nn.add %[[X]], %[[W]]
// CHECK-NEXT: pipe.sgd_update %[[W]], %[[G]] {lr = 1.000000e-01 : f64, momentum = 0.000000e+00 : f64, nesterov = false, weight_decay = 0.000000e+00 : f64} : tensor<4x8xf32>
// CHECK-NEXT: pipe.sgd_update %[[B]], %[[GB]] {lr = 1.000000e-02 : f64, momentum = 9.000000e-01 : f64, nesterov = true, weight_decay = 5.000000e-04 : f64} : tensor<8xf32>
// CHECK-NEXT: return %[[Y]]
func.func @sgd(%x: tensor<4x8xf32>, %g: tensor<4x8xf32>, %gb: tensor<8xf32>) -> tensor<4x8xf32> {
  %w = nn.param @w : tensor<4x8xf32>
  %b = nn.param @b : tensor<8xf32>
  %y = nn.add %x, %w : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  pipe.sgd_update %w, %g {lr = 0.1 : f64, momentum = 0.0 : f64, weight_decay = 0.0 : f64, nesterov = false} : tensor<4x8xf32>
  pipe.sgd_update %b, %gb {lr = 0.01 : f64, momentum = 0.9 : f64, weight_decay = 5.0e-4 : f64, nesterov = true} : tensor<8xf32>
  return %y : tensor<4x8xf32>
}

// Adam (coupled weight decay) and AdamW (decoupled); lr = 0 and beta = 0 are
// at the closed ends of their ranges.
// CHECK-LABEL: func.func @adam(
// CHECK-SAME: %[[G:[^:]+]]: tensor<f32>, %[[G2:[^:]+]]: tensor<2x3xf32>
// CHECK-NEXT: %[[S:.+]] = nn.param @scale : tensor<f32>
// CHECK-NEXT: %[[W:.+]] = nn.param @w2 : tensor<2x3xf32>
// CHECK-NEXT: pipe.adam_update %[[S]], %[[G]] {beta1 = 9.000000e-01 : f64, beta2 = 0.99899999999999999 : f64, decoupled = false, eps = 1.000000e-08 : f64, lr = 1.000000e-03 : f64, weight_decay = 0.000000e+00 : f64} : tensor<f32>
// CHECK-NEXT: pipe.adam_update %[[W]], %[[G2]] {beta1 = 0.000000e+00 : f64, beta2 = 0.000000e+00 : f64, decoupled = true, eps = 0.000000e+00 : f64, lr = 0.000000e+00 : f64, weight_decay = 1.000000e-02 : f64} : tensor<2x3xf32>
// CHECK-NEXT: return
func.func @adam(%g: tensor<f32>, %g2: tensor<2x3xf32>) {
  %s = nn.param @scale : tensor<f32>
  %w = nn.param @w2 : tensor<2x3xf32>
  pipe.adam_update %s, %g {lr = 1.0e-3 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.0 : f64, decoupled = false} : tensor<f32>
  pipe.adam_update %w, %g2 {lr = 0.0 : f64, beta1 = 0.0 : f64, beta2 = 0.0 : f64, eps = 0.0 : f64, weight_decay = 0.01 : f64, decoupled = true} : tensor<2x3xf32>
  return
}

// pipe.send / pipe.recv: f32 and i64 tensors, any peer other than the
// function's own stage (1), tag 0 and higher, extra attributes kept.
// CHECK-LABEL: func.func @send_recv(
// CHECK-SAME: %[[X:[^:]+]]: tensor<8x64xf32>, %[[L:[^:]+]]: tensor<8xi64>) -> tensor<8x64xf32> attributes {pipe.stage = 1 : i64}
// CHECK-NEXT: pipe.send %[[X]] to 2 tag 0 : tensor<8x64xf32>
// CHECK-NEXT: pipe.send %[[L]] to 0 tag 7 {note = "labels"} : tensor<8xi64>
// CHECK-NEXT: %[[H:.+]] = pipe.recv from 0 tag 3 : tensor<8x64xf32>
// CHECK-NEXT: %[[I:.+]] = pipe.recv from 2 tag 4 : tensor<8xi64>
// CHECK-NEXT: return %[[H]] : tensor<8x64xf32>
func.func @send_recv(%x: tensor<8x64xf32>, %l: tensor<8xi64>) -> tensor<8x64xf32> attributes {pipe.stage = 1 : i64} {
  pipe.send %x to 2 tag 0 : tensor<8x64xf32>
  pipe.send %l to 0 tag 7 {note = "labels"} : tensor<8xi64>
  %h = pipe.recv from 0 tag 3 : tensor<8x64xf32>
  %i = pipe.recv from 2 tag 4 : tensor<8xi64>
  return %h : tensor<8x64xf32>
}

// `per_step` (a tied weight's value, once per step) prints after the tag.
// CHECK-LABEL: func.func @send_recv_per_step(
// CHECK-NEXT: pipe.send %{{.+}} to 0 tag 5 per_step : tensor<50x16xf32>
// CHECK-NEXT: pipe.recv from 2 tag 6 per_step {note = "w"} : tensor<50x16xf32>
func.func @send_recv_per_step(%w: tensor<50x16xf32>) attributes {pipe.stage = 1 : i64} {
  pipe.send %w to 0 tag 5 per_step : tensor<50x16xf32>
  %v = pipe.recv from 2 tag 6 per_step {note = "w"} : tensor<50x16xf32>
  return
}

// Outside a staged function any peer is accepted (there is no own stage).
// CHECK-LABEL: func.func @send_recv_unstaged(
// CHECK-NEXT: pipe.send %{{.+}} to 0 tag 0 : tensor<2xf32>
// CHECK-NEXT: pipe.recv from 0 tag 1 : tensor<2xf32>
func.func @send_recv_unstaged(%x: tensor<2xf32>) {
  pipe.send %x to 0 tag 0 : tensor<2xf32>
  %y = pipe.recv from 0 tag 1 : tensor<2xf32>
  return
}

// Gradient accumulation (a matrix and a scalar), reading the sum back, and
// the loss report.
// CHECK-LABEL: func.func @accumulate(
// CHECK-SAME: %[[G:[^:]+]]: tensor<4x8xf32>, %[[S:[^:]+]]: tensor<f32>) -> tensor<4x8xf32>
// CHECK-NEXT: pipe.accumulate_grad %[[G]] to @fc.weight : tensor<4x8xf32>
// CHECK-NEXT: pipe.accumulate_grad %[[S]] to @scale : tensor<f32>
// CHECK-NEXT: %[[A:.+]] = pipe.accumulated_grad @fc.weight : tensor<4x8xf32>
// CHECK-NEXT: pipe.report_loss %[[S]] : tensor<f32>
// CHECK-NEXT: return %[[A]] : tensor<4x8xf32>
func.func @accumulate(%g: tensor<4x8xf32>, %s: tensor<f32>) -> tensor<4x8xf32> {
  pipe.accumulate_grad %g to @fc.weight : tensor<4x8xf32>
  pipe.accumulate_grad %s to @scale : tensor<f32>
  %a = pipe.accumulated_grad @fc.weight : tensor<4x8xf32>
  pipe.report_loss %s : tensor<f32>
  return %a : tensor<4x8xf32>
}

// pipe.remat: two inputs (f32, i64) and two results, parameters and constants
// re-declared inside; no results (the yield is implicit); no inputs.
// CHECK-LABEL: func.func @remat(
// CHECK-SAME: %[[X:[^:]+]]: tensor<4x8xf32>, %[[L:[^:]+]]: tensor<4xi64>)
// CHECK-NEXT: %[[R:.+]]:2 = pipe.remat(%[[X]], %[[L]]) : (tensor<4x8xf32>, tensor<4xi64>) -> (tensor<4x16xf32>, tensor<4xi64>) {
// CHECK-NEXT: ^bb0(%[[A:[^:]+]]: tensor<4x8xf32>, %[[B:[^:]+]]: tensor<4xi64>):
// CHECK-NEXT: %[[W:.+]] = nn.param @w3 : tensor<8x16xf32>
// CHECK-NEXT: %[[C:.+]] = nn.constant dense<2.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[H:.+]] = nn.gemm %[[A]], %[[W]]
// CHECK-NEXT: %[[M:.+]] = nn.mul %[[H]], %[[C]]
// CHECK-NEXT: pipe.yield %[[M]], %[[B]] : tensor<4x16xf32>, tensor<4xi64>
// CHECK-NEXT: }
// CHECK-NEXT: pipe.remat(%[[X]]) : (tensor<4x8xf32>) -> () {
// CHECK-NEXT: ^bb0(%{{[^:]+}}: tensor<4x8xf32>):
// CHECK-NEXT: }
// CHECK-NEXT: %[[Z:.+]] = pipe.remat() : () -> tensor<2xf32> {
// CHECK-NEXT: %[[K:.+]] = nn.constant dense<[1.000000e+00, 2.000000e+00]> : tensor<2xf32>
// CHECK-NEXT: pipe.yield %[[K]] : tensor<2xf32>
// CHECK-NEXT: }
// CHECK-NEXT: return %[[R]]#0, %[[R]]#1, %[[Z]]
func.func @remat(%x: tensor<4x8xf32>, %l: tensor<4xi64>) -> (tensor<4x16xf32>, tensor<4xi64>, tensor<2xf32>) {
  %r:2 = pipe.remat (%x, %l) : (tensor<4x8xf32>, tensor<4xi64>) -> (tensor<4x16xf32>, tensor<4xi64>) {
  ^bb0(%a: tensor<4x8xf32>, %b: tensor<4xi64>):
    %w = nn.param @w3 : tensor<8x16xf32>
    %c = nn.constant dense<2.0> : tensor<f32>
    %h = nn.gemm %a, %w : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
    %m = nn.mul %h, %c : tensor<4x16xf32>, tensor<f32> -> tensor<4x16xf32>
    pipe.yield %m, %b : tensor<4x16xf32>, tensor<4xi64>
  }
  pipe.remat (%x) : (tensor<4x8xf32>) -> () {
  ^bb0(%a: tensor<4x8xf32>):
  }
  %z = pipe.remat () : () -> tensor<2xf32> {
    %c = nn.constant dense<[1.0, 2.0]> : tensor<2xf32>
    pipe.yield %c : tensor<2xf32>
  }
  return %r#0, %r#1, %z : tensor<4x16xf32>, tensor<4xi64>, tensor<2xf32>
}

// pipe.schedule in a module with M = 3 (its pipe.microbatches): GPipe's
// order and an interleaved one (each forward before its backward, the
// update last); the functions belong to the schedule's stage.
// CHECK-LABEL: module @pipelined attributes {pipe.microbatches = 3 : i64, pipe.stages = 2 : i64}
// CHECK: pipe.schedule stage 0 forward @f0 backward @b0 update @u0 actions [#pipe.action<forward, mb = 0>, #pipe.action<forward, mb = 1>, #pipe.action<forward, mb = 2>, #pipe.action<backward, mb = 2>, #pipe.action<backward, mb = 1>, #pipe.action<backward, mb = 0>, #pipe.action<update>]
// CHECK-NEXT: pipe.schedule stage 1 forward @f1 backward @b1 update @u1 actions [#pipe.action<forward, mb = 0>, #pipe.action<backward, mb = 0>, #pipe.action<forward, mb = 1>, #pipe.action<forward, mb = 2>, #pipe.action<backward, mb = 1>, #pipe.action<backward, mb = 2>, #pipe.action<update>] {note = "1f1b"}
module @pipelined attributes {pipe.microbatches = 3 : i64, pipe.stages = 2 : i64} {
  nn.parameter @w : tensor<4x8xf32>
  nn.parameter @b : tensor<8xf32>
  nn.parameter @scale : tensor<f32>
  nn.parameter @fc.weight : tensor<4x8xf32>
  func.func @f0() attributes {pipe.stage = 0 : i64} {
    return
  }
  func.func @b0() attributes {pipe.stage = 0 : i64} {
    return
  }
  func.func @u0() attributes {pipe.stage = 0 : i64} {
    return
  }
  func.func @f1() attributes {pipe.stage = 1 : i64} {
    return
  }
  func.func @b1() attributes {pipe.stage = 1 : i64} {
    return
  }
  func.func @u1() attributes {pipe.stage = 1 : i64} {
    return
  }
  pipe.schedule stage 0 forward @f0 backward @b0 update @u0 actions [#pipe.action<forward, mb = 0>, #pipe.action<forward, mb = 1>, #pipe.action<forward, mb = 2>, #pipe.action<backward, mb = 2>, #pipe.action<backward, mb = 1>, #pipe.action<backward, mb = 0>, #pipe.action<update>]
  pipe.schedule stage 1 forward @f1 backward @b1 update @u1 actions [#pipe.action<forward, mb = 0>, #pipe.action<backward, mb = 0>, #pipe.action<forward, mb = 1>, #pipe.action<forward, mb = 2>, #pipe.action<backward, mb = 1>, #pipe.action<backward, mb = 2>, #pipe.action<update>] {note = "1f1b"}
}

// Without pipe.microbatches, M = 1; the same function may serve several
// actions.
// CHECK-LABEL: module @single
// CHECK: pipe.schedule stage 0 forward @s backward @s update @s actions [#pipe.action<forward, mb = 0>, #pipe.action<backward, mb = 0>, #pipe.action<update>]
module @single {
  func.func @s() attributes {pipe.stage = 0 : i64} {
    return
  }
  pipe.schedule stage 0 forward @s backward @s update @s actions [#pipe.action<forward, mb = 0>, #pipe.action<backward, mb = 0>, #pipe.action<update>]
}

// Two model chunks per stage (interleaved): a stage's schedule names each
// chunk's functions, as a list.
// CHECK-LABEL: module @chunks
// CHECK: pipe.schedule stage 0 forward [@f0, @f2] backward [@b0, @b2] update [@u0, @u2] actions [#pipe.action<forward, mb = 0>, #pipe.action<forward, mb = 0, chunk = 1>, #pipe.action<backward, mb = 0, chunk = 1>, #pipe.action<backward, mb = 0>, #pipe.action<update>]
module @chunks attributes {pipe.stages = 4 : i64} {
  func.func @f0() attributes {pipe.phase = "forward", pipe.stage = 0 : i64} {
    return
  }
  func.func @b0() attributes {pipe.phase = "backward", pipe.stage = 0 : i64} {
    return
  }
  func.func @u0() attributes {pipe.phase = "update", pipe.stage = 0 : i64} {
    return
  }
  func.func @f2() attributes {pipe.phase = "forward", pipe.stage = 2 : i64} {
    return
  }
  func.func @b2() attributes {pipe.phase = "backward", pipe.stage = 2 : i64} {
    return
  }
  func.func @u2() attributes {pipe.phase = "update", pipe.stage = 2 : i64} {
    return
  }
  pipe.schedule stage 0 forward [@f0, @f2] backward [@b0, @b2] update [@u0, @u2] actions [#pipe.action<forward, mb = 0>, #pipe.action<forward, mb = 0, chunk = 1>, #pipe.action<backward, mb = 0, chunk = 1>, #pipe.action<backward, mb = 0>, #pipe.action<update>]
}

// #pipe.action on its own: mb and chunk in either order, the chunk printed
// only when nonzero (pipe.schedule accepts chunks it holds, and an update
// of chunk 0 only).
// CHECK-LABEL: func.func @actions() attributes {actions = [#pipe.action<forward, mb = 3>, #pipe.action<backward, mb = 0, chunk = 1>, #pipe.action<update, chunk = 2>, #pipe.action<update>]}
func.func @actions() attributes {actions = [#pipe.action<forward, mb = 3, chunk = 0>, #pipe.action<backward, chunk = 1, mb = 0>, #pipe.action<update, chunk = 2>, #pipe.action<update>]} {
  return
}

// Every discardable pipe attribute with a value its verifier accepts.
// CHECK-LABEL: module @attributes attributes {pipe.batch_size = 8 : i64, pipe.microbatches = 2 : i64, pipe.remat = "stage", pipe.schedule = "1f1b", pipe.sends = "buffered", pipe.stages = 1 : i64}
// CHECK: func.func @forward() attributes {pipe.phase = "forward", pipe.stage = 0 : i64}
// CHECK: func.func @backward() attributes {pipe.phase = "backward", pipe.stage = 0 : i64}
// CHECK: func.func @update() attributes {pipe.phase = "update", pipe.stage = 0 : i64}
module @attributes attributes {pipe.batch_size = 8 : i64, pipe.microbatches = 2 : i64, pipe.remat = "stage", pipe.schedule = "1f1b", pipe.sends = "buffered", pipe.stages = 1 : i64} {
  func.func @forward() attributes {pipe.phase = "forward", pipe.stage = 0 : i64} {
    return
  }
  func.func @backward() attributes {pipe.phase = "backward", pipe.stage = 0 : i64} {
    return
  }
  func.func @update() attributes {pipe.phase = "update", pipe.stage = 0 : i64} {
    return
  }
}
