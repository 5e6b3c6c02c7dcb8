// Verifier and type-constraint errors of the pipe ops: the optimizer updates,
// send / recv, gradient accumulation, the loss report, remat / yield and the
// schedule.
// RUN: gpipe-opt %s --split-input-file --verify-diagnostics

// The updated value must be an nn.param (SGD).
func.func @sgd_not_param(%x: tensor<4xf32>, %g: tensor<4xf32>) {
  // expected-error @+1 {{'pipe.sgd_update' op operand #0 must be the result of an 'nn.param'}}
  pipe.sgd_update %x, %g {lr = 0.1 : f64, momentum = 0.0 : f64, weight_decay = 0.0 : f64, nesterov = false} : tensor<4xf32>
  return
}

// -----

nn.parameter @w : tensor<4xf32>
// The updated value must be an nn.param (Adam), not a value computed from one.
func.func @adam_not_param(%g: tensor<4xf32>) {
  %p = nn.param @w : tensor<4xf32>
  %t = nn.tanh %p : tensor<4xf32>
  // expected-error @+1 {{'pipe.adam_update' op operand #0 must be the result of an 'nn.param'}}
  pipe.adam_update %t, %g {lr = 1.0e-3 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.0 : f64, decoupled = false} : tensor<4xf32>
  return
}

// -----

nn.parameter @w : tensor<4x8xf32>
// The gradient has the parameter's type (SGD).
func.func @sgd_type_mismatch(%g: tensor<4x16xf32>) {
  %p = nn.param @w : tensor<4x8xf32>
  // expected-error @+1 {{'pipe.sgd_update' op failed to verify that all of {param, grad} have same type}}
  "pipe.sgd_update"(%p, %g) {lr = 0.1 : f64, momentum = 0.0 : f64, weight_decay = 0.0 : f64, nesterov = false} : (tensor<4x8xf32>, tensor<4x16xf32>) -> ()
  return
}

// -----

nn.parameter @w : tensor<1xf32>
// The gradient has the parameter's type (Adam).
func.func @adam_type_mismatch(%g: tensor<f32>) {
  %p = nn.param @w : tensor<1xf32>
  // expected-error @+1 {{'pipe.adam_update' op failed to verify that all of {param, grad} have same type}}
  "pipe.adam_update"(%p, %g) {lr = 1.0e-3 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.0 : f64, decoupled = false} : (tensor<1xf32>, tensor<f32>) -> ()
  return
}

// -----

nn.parameter @w : tensor<4xf32>
// Gradients are statically shaped f32 tensors.
func.func @sgd_dynamic_grad(%g: tensor<?xf32>) {
  %p = nn.param @w : tensor<4xf32>
  // expected-error @+1 {{'pipe.sgd_update' op operand #1 must be statically shaped tensor of 32-bit float values, but got 'tensor<?xf32>'}}
  "pipe.sgd_update"(%p, %g) {lr = 0.1 : f64, momentum = 0.0 : f64, weight_decay = 0.0 : f64, nesterov = false} : (tensor<4xf32>, tensor<?xf32>) -> ()
  return
}

// -----

nn.parameter @w : tensor<4xf32>
// Hyper-parameters are f64 attributes.
func.func @sgd_lr_f32(%g: tensor<4xf32>) {
  %p = nn.param @w : tensor<4xf32>
  // expected-error @+1 {{'pipe.sgd_update' op attribute 'lr' failed to satisfy constraint: 64-bit float attribute}}
  pipe.sgd_update %p, %g {lr = 0.1 : f32, momentum = 0.0 : f64, weight_decay = 0.0 : f64, nesterov = false} : tensor<4xf32>
  return
}

// -----

nn.parameter @w : tensor<4xf32>
// Every hyper-parameter is required.
func.func @adam_missing_eps(%g: tensor<4xf32>) {
  %p = nn.param @w : tensor<4xf32>
  // expected-error @+1 {{'pipe.adam_update' op requires attribute 'eps'}}
  pipe.adam_update %p, %g {lr = 1.0e-3 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, weight_decay = 0.0 : f64, decoupled = false} : tensor<4xf32>
  return
}

// -----

nn.parameter @w : tensor<4xf32>
// No op may read the parameter after its update.
func.func @use_after_update(%g: tensor<4xf32>) -> tensor<4xf32> {
  %p = nn.param @w : tensor<4xf32>
  // expected-error @+1 {{'pipe.sgd_update' op parameter is used after its update by nn.relu}}
  pipe.sgd_update %p, %g {lr = 0.1 : f64, momentum = 0.0 : f64, weight_decay = 0.0 : f64, nesterov = false} : tensor<4xf32>
  %r = nn.relu %p : tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

nn.parameter @w : tensor<4xf32>
// Returning the parameter after its update is a use after the update too.
func.func @returned_after_update(%g: tensor<4xf32>) -> tensor<4xf32> {
  %p = nn.param @w : tensor<4xf32>
  // expected-error @+1 {{'pipe.adam_update' op parameter is used after its update by func.return}}
  pipe.adam_update %p, %g {lr = 1.0e-3 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.0 : f64, decoupled = false} : tensor<4xf32>
  return %p : tensor<4xf32>
}

// -----

nn.parameter @w : tensor<4xf32>
// A parameter is updated once: a second update is a use after the first.
func.func @updated_twice(%g: tensor<4xf32>) {
  %p = nn.param @w : tensor<4xf32>
  // expected-error @+1 {{'pipe.sgd_update' op parameter is used after its update by pipe.sgd_update}}
  pipe.sgd_update %p, %g {lr = 0.1 : f64, momentum = 0.0 : f64, weight_decay = 0.0 : f64, nesterov = false} : tensor<4xf32>
  pipe.sgd_update %p, %g {lr = 0.1 : f64, momentum = 0.0 : f64, weight_decay = 0.0 : f64, nesterov = false} : tensor<4xf32>
  return
}

// -----

nn.parameter @w : tensor<4xf32>
// SGD: lr >= 0.
func.func @sgd_lr_negative(%g: tensor<4xf32>) {
  %p = nn.param @w : tensor<4xf32>
  // expected-error @+1 {{'pipe.sgd_update' op lr = -1.000000e-01 is out of range [0.000000e+00, INF)}}
  pipe.sgd_update %p, %g {lr = -0.1 : f64, momentum = 0.0 : f64, weight_decay = 0.0 : f64, nesterov = false} : tensor<4xf32>
  return
}

// -----

nn.parameter @w : tensor<4xf32>
// SGD: lr is finite.
func.func @sgd_lr_inf(%g: tensor<4xf32>) {
  %p = nn.param @w : tensor<4xf32>
  // expected-error @+1 {{'pipe.sgd_update' op lr = INF is out of range [0.000000e+00, INF)}}
  pipe.sgd_update %p, %g {lr = 0x7FF0000000000000 : f64, momentum = 0.0 : f64, weight_decay = 0.0 : f64, nesterov = false} : tensor<4xf32>
  return
}

// -----

nn.parameter @w : tensor<4xf32>
// SGD: momentum >= 0.
func.func @sgd_momentum_negative(%g: tensor<4xf32>) {
  %p = nn.param @w : tensor<4xf32>
  // expected-error @+1 {{'pipe.sgd_update' op momentum = -5.000000e-01 is out of range [0.000000e+00, INF)}}
  pipe.sgd_update %p, %g {lr = 0.1 : f64, momentum = -0.5 : f64, weight_decay = 0.0 : f64, nesterov = false} : tensor<4xf32>
  return
}

// -----

nn.parameter @w : tensor<4xf32>
// SGD: NaN is rejected although it compares false with both bounds.
func.func @sgd_momentum_nan(%g: tensor<4xf32>) {
  %p = nn.param @w : tensor<4xf32>
  // expected-error @+1 {{'pipe.sgd_update' op momentum = nan is out of range [0.000000e+00, INF)}}
  pipe.sgd_update %p, %g {lr = 0.1 : f64, momentum = 0x7FF8000000000000 : f64, weight_decay = 0.0 : f64, nesterov = false} : tensor<4xf32>
  return
}

// -----

nn.parameter @w : tensor<4xf32>
// SGD: weight_decay >= 0.
func.func @sgd_weight_decay_negative(%g: tensor<4xf32>) {
  %p = nn.param @w : tensor<4xf32>
  // expected-error @+1 {{'pipe.sgd_update' op weight_decay = -1.000000e-04 is out of range [0.000000e+00, INF)}}
  pipe.sgd_update %p, %g {lr = 0.1 : f64, momentum = 0.0 : f64, weight_decay = -1.0e-4 : f64, nesterov = false} : tensor<4xf32>
  return
}

// -----

nn.parameter @w : tensor<4xf32>
// SGD: Nesterov needs a momentum (as in torch.optim.SGD).
func.func @sgd_nesterov_no_momentum(%g: tensor<4xf32>) {
  %p = nn.param @w : tensor<4xf32>
  // expected-error @+1 {{'pipe.sgd_update' op nesterov requires a momentum > 0}}
  pipe.sgd_update %p, %g {lr = 0.1 : f64, momentum = 0.0 : f64, weight_decay = 0.0 : f64, nesterov = true} : tensor<4xf32>
  return
}

// -----

nn.parameter @w : tensor<4xf32>
// Adam: lr >= 0.
func.func @adam_lr_negative(%g: tensor<4xf32>) {
  %p = nn.param @w : tensor<4xf32>
  // expected-error @+1 {{'pipe.adam_update' op lr = -1.000000e-03 is out of range [0.000000e+00, INF)}}
  pipe.adam_update %p, %g {lr = -1.0e-3 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.0 : f64, decoupled = false} : tensor<4xf32>
  return
}

// -----

nn.parameter @w : tensor<4xf32>
// Adam: beta1 < 1 (the range is half-open).
func.func @adam_beta1_one(%g: tensor<4xf32>) {
  %p = nn.param @w : tensor<4xf32>
  // expected-error @+1 {{'pipe.adam_update' op beta1 = 1.000000e+00 is out of range [0.000000e+00, 1.000000e+00)}}
  pipe.adam_update %p, %g {lr = 1.0e-3 : f64, beta1 = 1.0 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.0 : f64, decoupled = false} : tensor<4xf32>
  return
}

// -----

nn.parameter @w : tensor<4xf32>
// Adam: beta1 >= 0.
func.func @adam_beta1_negative(%g: tensor<4xf32>) {
  %p = nn.param @w : tensor<4xf32>
  // expected-error @+1 {{'pipe.adam_update' op beta1 = -1.000000e-01 is out of range [0.000000e+00, 1.000000e+00)}}
  pipe.adam_update %p, %g {lr = 1.0e-3 : f64, beta1 = -0.1 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.0 : f64, decoupled = false} : tensor<4xf32>
  return
}

// -----

nn.parameter @w : tensor<4xf32>
// Adam: beta2 < 1.
func.func @adam_beta2_above_one(%g: tensor<4xf32>) {
  %p = nn.param @w : tensor<4xf32>
  // expected-error @+1 {{'pipe.adam_update' op beta2 = 1.500000e+00 is out of range [0.000000e+00, 1.000000e+00)}}
  pipe.adam_update %p, %g {lr = 1.0e-3 : f64, beta1 = 0.9 : f64, beta2 = 1.5 : f64, eps = 1.0e-8 : f64, weight_decay = 0.0 : f64, decoupled = false} : tensor<4xf32>
  return
}

// -----

nn.parameter @w : tensor<4xf32>
// Adam: eps >= 0.
func.func @adam_eps_negative(%g: tensor<4xf32>) {
  %p = nn.param @w : tensor<4xf32>
  // expected-error @+1 {{'pipe.adam_update' op eps = -1.000000e-08 is out of range [0.000000e+00, INF)}}
  pipe.adam_update %p, %g {lr = 1.0e-3 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = -1.0e-8 : f64, weight_decay = 0.0 : f64, decoupled = false} : tensor<4xf32>
  return
}

// -----

nn.parameter @w : tensor<4xf32>
// AdamW: weight_decay >= 0.
func.func @adamw_weight_decay_negative(%g: tensor<4xf32>) {
  %p = nn.param @w : tensor<4xf32>
  // expected-error @+1 {{'pipe.adam_update' op weight_decay = -1.000000e-02 is out of range [0.000000e+00, INF)}}
  pipe.adam_update %p, %g {lr = 1.0e-3 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = -0.01 : f64, decoupled = true} : tensor<4xf32>
  return
}

// -----

// pipe.send: the peer stage is >= 0.
func.func @send_negative_peer(%x: tensor<4xf32>) {
  // expected-error @+1 {{'pipe.send' op peer stage must be >= 0, got -1}}
  pipe.send %x to -1 tag 0 : tensor<4xf32>
  return
}

// -----

// pipe.recv: the peer stage is >= 0.
func.func @recv_negative_peer() {
  // expected-error @+1 {{'pipe.recv' op peer stage must be >= 0, got -2}}
  %x = pipe.recv from -2 tag 0 : tensor<4xf32>
  return
}

// -----

// pipe.send: the tag is >= 0.
func.func @send_negative_tag(%x: tensor<4xf32>) {
  // expected-error @+1 {{'pipe.send' op tag must be >= 0, got -1}}
  pipe.send %x to 1 tag -1 : tensor<4xf32>
  return
}

// -----

// pipe.recv: the tag is >= 0.
func.func @recv_negative_tag() {
  // expected-error @+1 {{'pipe.recv' op tag must be >= 0, got -5}}
  %x = pipe.recv from 1 tag -5 : tensor<4xf32>
  return
}

// -----

// pipe.send in a function of stage 1 cannot name stage 1.
func.func @send_to_self(%x: tensor<4xf32>) attributes {pipe.stage = 1 : i64} {
  // expected-error @+1 {{'pipe.send' op peer is the op's own stage 1}}
  pipe.send %x to 1 tag 0 : tensor<4xf32>
  return
}

// -----

// pipe.recv in a function of stage 0 cannot name stage 0.
func.func @recv_from_self() attributes {pipe.stage = 0 : i64} {
  // expected-error @+1 {{'pipe.recv' op peer is the op's own stage 0}}
  %x = pipe.recv from 0 tag 3 : tensor<4xf32>
  return
}

// -----

// Transfers carry statically shaped f32 or i64 tensors.
func.func @send_f16(%x: tensor<4xf16>) {
  // expected-error @+1 {{'pipe.send' op operand #0 must be statically shaped tensor of 32-bit float or 64-bit signless integer values, but got 'tensor<4xf16>'}}
  pipe.send %x to 1 tag 0 : tensor<4xf16>
  return
}

// -----

func.func @recv_dynamic() {
  // expected-error @+1 {{'pipe.recv' op result #0 must be statically shaped tensor of 32-bit float or 64-bit signless integer values, but got 'tensor<?xf32>'}}
  %x = pipe.recv from 1 tag 0 : tensor<?xf32>
  return
}

// -----

// pipe.accumulate_grad names a declared parameter (an nn.parameter symbol).
func.func @accumulate_grad_undeclared(%g: tensor<4xf32>) {
  // expected-error @+1 {{'pipe.accumulate_grad' op parameter @w is not declared (no nn.parameter @w in the module)}}
  pipe.accumulate_grad %g to @w : tensor<4xf32>
  return
}

// -----

// ... whose type the gradient has.
nn.parameter @w : tensor<4xf32>
func.func @accumulate_grad_type(%g: tensor<8xf32>) {
  // expected-error @+1 {{'pipe.accumulate_grad' op has type 'tensor<8xf32>' but parameter @w is declared 'tensor<4xf32>'}}
  pipe.accumulate_grad %g to @w : tensor<8xf32>
  return
}

// -----

// pipe.accumulated_grad too.
func.func @accumulated_grad_undeclared() {
  // expected-error @+1 {{'pipe.accumulated_grad' op parameter @w is not declared (no nn.parameter @w in the module)}}
  %g = pipe.accumulated_grad @w : tensor<4xf32>
  return
}

// -----

nn.parameter @w : tensor<4xf32>
func.func @accumulated_grad_type() {
  // expected-error @+1 {{'pipe.accumulated_grad' op has type 'tensor<2x2xf32>' but parameter @w is declared 'tensor<4xf32>'}}
  %g = pipe.accumulated_grad @w : tensor<2x2xf32>
  return
}

// -----

// Gradients are f32 (an i64 tensor is not a gradient).
nn.parameter @w : tensor<4xf32>
func.func @accumulate_grad_i64(%g: tensor<4xi64>) {
  // expected-error @+1 {{'pipe.accumulate_grad' op operand #0 must be statically shaped tensor of 32-bit float values, but got 'tensor<4xi64>'}}
  pipe.accumulate_grad %g to @w : tensor<4xi64>
  return
}

// -----

// pipe.report_loss takes a scalar.
func.func @report_loss_vector(%l: tensor<4xf32>) {
  // expected-error @+1 {{'pipe.report_loss' op the loss must be a scalar tensor<f32>}}
  pipe.report_loss %l : tensor<4xf32>
  return
}

// -----

// pipe.remat: the region's arguments have the inputs' types.
func.func @remat_arg_types(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'pipe.remat' op region arguments must have the types of the inputs}}
  %r = "pipe.remat"(%x) ({
  ^bb0(%a: tensor<8xf32>):
    %c = nn.constant dense<1.0> : tensor<4xf32>
    "pipe.yield"(%c) : (tensor<4xf32>) -> ()
  }) : (tensor<4xf32>) -> tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

// pipe.remat: one region argument per input.
func.func @remat_arg_count(%x: tensor<4xf32>, %y: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'pipe.remat' op region arguments must have the types of the inputs}}
  %r = pipe.remat (%x, %y) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<4xf32>):
    pipe.yield %a : tensor<4xf32>
  }
  return %r : tensor<4xf32>
}

// -----

// pipe.remat: the yielded values have the result types.
func.func @remat_yield_types(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'pipe.remat' op yielded types must be the result types}}
  %r = pipe.remat (%x) : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<4xf32>):
    %t = nn.reshape %a : tensor<4xf32> -> tensor<2x2xf32>
    pipe.yield %t : tensor<2x2xf32>
  }
  return %r : tensor<4xf32>
}

// -----

// pipe.remat: as many yielded values as results.
func.func @remat_yield_count(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'pipe.remat' op yielded types must be the result types}}
  %r = pipe.remat (%x) : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<4xf32>):
    pipe.yield %a, %a : tensor<4xf32>, tensor<4xf32>
  }
  return %r : tensor<4xf32>
}

// -----

// pipe.remat: no communication inside.
func.func @remat_recv(%x: tensor<4xf32>) -> tensor<4xf32> {
  %r = pipe.remat (%x) : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<4xf32>):
    // expected-error @+1 {{'pipe.recv' op cannot be rematerialized: only pure nn ops and nn.param may appear in a pipe.remat region}}
    %b = pipe.recv from 1 tag 0 : tensor<4xf32>
    pipe.yield %b : tensor<4xf32>
  }
  return %r : tensor<4xf32>
}

// -----

nn.parameter @w : tensor<4xf32>
// pipe.remat: an nn op with side effects (nn.param_grad) is not allowed.
func.func @remat_param_grad(%x: tensor<4xf32>) -> tensor<4xf32> {
  %r = pipe.remat (%x) : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<4xf32>):
    %w = nn.param @w : tensor<4xf32>
    // expected-error @+1 {{'nn.param_grad' op cannot be rematerialized: only pure nn ops and nn.param may appear in a pipe.remat region}}
    nn.param_grad %w, %a : tensor<4xf32>
    pipe.yield %a : tensor<4xf32>
  }
  return %r : tensor<4xf32>
}

// -----

// pipe.remat: no loss report either (pipe.report_loss writes the step's loss).
func.func @remat_report_loss(%x: tensor<f32>) -> tensor<f32> {
  %r = pipe.remat (%x) : (tensor<f32>) -> tensor<f32> {
  ^bb0(%a: tensor<f32>):
    // expected-error @+1 {{'pipe.report_loss' op cannot be rematerialized: only pure nn ops and nn.param may appear in a pipe.remat region}}
    pipe.report_loss %a : tensor<f32>
    pipe.yield %a : tensor<f32>
  }
  return %r : tensor<f32>
}

// -----

// pipe.remat is isolated from above: the region cannot read %x directly.
func.func @remat_isolated(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-note @+1 {{required by region isolation constraints}}
  %r = pipe.remat () : () -> tensor<4xf32> {
    // expected-error @+1 {{'nn.relu' op using value defined outside the region}}
    %t = nn.relu %x : tensor<4xf32>
    pipe.yield %t : tensor<4xf32>
  }
  return %r : tensor<4xf32>
}

// -----

// pipe.yield only terminates a pipe.remat.
func.func @yield_outside(%x: tensor<4xf32>) {
  // expected-error @+1 {{'pipe.yield' op expects parent op 'pipe.remat'}}
  pipe.yield %x : tensor<4xf32>
}

// -----

// pipe.schedule: stage >= 0.
module {
  func.func @s() attributes {pipe.stage = 0 : i64} {
    return
  }
  // expected-error @+1 {{'pipe.schedule' op stage must be >= 0, got -1}}
  pipe.schedule stage -1 forward @s backward @s update @s actions [#pipe.action<forward, mb = 0>, #pipe.action<backward, mb = 0>, #pipe.action<update>]
}

// -----

// pipe.schedule: stage >= 0 even when its functions claim the same negative
// stage.
module attributes {pipe.stages = 1 : i64} {
  func.func @s() attributes {pipe.stage = -1 : i64} {
    return
  }
  // expected-error @+1 {{'pipe.schedule' op stage must be >= 0, got -1}}
  pipe.schedule stage -1 forward @s backward @s update @s actions [#pipe.action<forward, mb = 0>, #pipe.action<backward, mb = 0>, #pipe.action<update>]
}

// -----

// pipe.schedule: actions are #pipe.action attributes, not strings.
module {
  func.func @s() attributes {pipe.stage = 0 : i64} {
    return
  }
  // expected-error @+1 {{'pipe.schedule' op attribute 'actions' failed to satisfy constraint: array of schedule actions}}
  pipe.schedule stage 0 forward @s backward @s update @s actions ["F0", "B0", "U"]
}

// -----

// #pipe.action: the phase is forward, backward, update, weight or flush.
module {
  func.func @s() attributes {pipe.stage = 0 : i64} {
    return
  }
  // expected-error @+1 {{expected one of [forward, backward, update, weight, flush] for pipeline phase (which of its stage's functions an action runs), got: wait}}
  pipe.schedule stage 0 forward @s backward @s update @s actions [#pipe.action<wait, mb = 0>]
}

// -----

// #pipe.action<flush> (wait for the stage's sends) names no micro-batch.
module {
  func.func @s() attributes {pipe.stage = 0 : i64} {
    return
  }
  // expected-error @+1 {{the flush action has no micro-batch}}
  pipe.schedule stage 0 forward @s backward @s update @s actions [#pipe.action<flush, mb = 0>]
}

// -----

// Nor a chunk: it waits for all of the stage's sends.
module {
  func.func @s() attributes {pipe.stage = 0 : i64} {
    return
  }
  // expected-error @+1 {{the flush action has no chunk (it waits for all of the stage's sends)}}
  pipe.schedule stage 0 forward @s backward @s update @s actions [#pipe.action<flush, chunk = 1>]
}

// -----

// No function has the flush phase (it is an action only).
// expected-error @+1 {{'func.func' op attribute 'pipe.phase' must be "forward", "backward" or "update", got "flush"}}
func.func @f() attributes {pipe.stage = 0 : i64, pipe.phase = "flush"} {
  return
}

// -----

// #pipe.action: a backward (or forward) names its micro-batch.
module {
  func.func @s() attributes {pipe.stage = 0 : i64} {
    return
  }
  // expected-error @+1 {{a backward action needs a micro-batch (mb = <m>)}}
  pipe.schedule stage 0 forward @s backward @s update @s actions [#pipe.action<forward, mb = 0>, #pipe.action<backward>, #pipe.action<update>]
}

// -----

// #pipe.action: micro-batches are numbered from 0.
module {
  func.func @s() attributes {pipe.stage = 0 : i64} {
    return
  }
  // expected-error @+1 {{micro-batch must be >= 0, got -1}}
  pipe.schedule stage 0 forward @s backward @s update @s actions [#pipe.action<forward, mb = -1>, #pipe.action<backward, mb = 0>, #pipe.action<update>]
}

// -----

// #pipe.action: the update runs once per mini-batch, for no micro-batch.
module {
  func.func @s() attributes {pipe.stage = 0 : i64} {
    return
  }
  // expected-error @+1 {{the update action has no micro-batch}}
  pipe.schedule stage 0 forward @s backward @s update @s actions [#pipe.action<forward, mb = 0>, #pipe.action<backward, mb = 0>, #pipe.action<update, mb = 0>]
}

// -----

// #pipe.action: model chunks are numbered from 0.
module {
  func.func @s() attributes {pipe.stage = 0 : i64} {
    return
  }
  // expected-error @+1 {{chunk must be >= 0, got -1}}
  pipe.schedule stage 0 forward @s backward @s update @s actions [#pipe.action<forward, mb = 0, chunk = -1>, #pipe.action<backward, mb = 0>, #pipe.action<update>]
}

// -----

// #pipe.action: only mb and chunk, each once.
module {
  func.func @s() attributes {pipe.stage = 0 : i64} {
    return
  }
  // expected-error @+1 {{expected 'mb = <micro-batch>' or 'chunk = <chunk>', each at most once}}
  pipe.schedule stage 0 forward @s backward @s update @s actions [#pipe.action<forward, mb = 0, mb = 1>, #pipe.action<backward, mb = 0>, #pipe.action<update>]
}

// -----

// pipe.schedule: an action's chunk names one of the stage's chunks (one
// forward, backward and update function each).
module {
  func.func @s() attributes {pipe.stage = 0 : i64} {
    return
  }
  // expected-error @+1 {{'pipe.schedule' op action #1 runs model chunk 1 but the stage holds 1 (one forward, backward and update function per chunk)}}
  pipe.schedule stage 0 forward @s backward @s update @s actions [#pipe.action<forward, mb = 0>, #pipe.action<backward, mb = 0, chunk = 1>, #pipe.action<update>]
}

// -----

// pipe.schedule: as many forward, backward and update functions as chunks.
module {
  func.func @s() attributes {pipe.stage = 0 : i64} {
    return
  }
  // expected-error @+1 {{'pipe.schedule' op needs one forward, one backward and one update function per model chunk, got 2, 1 and 2}}
  pipe.schedule stage 0 forward [@s, @s] backward @s update [@s, @s] actions [#pipe.action<forward, mb = 0>, #pipe.action<backward, mb = 0>, #pipe.action<update>]
}

// -----

// pipe.schedule: each chunk's micro-batches run their forward and backward.
module {
  func.func @a() attributes {pipe.stage = 0 : i64} {
    return
  }
  func.func @b() attributes {pipe.stage = 2 : i64} {
    return
  }
  // expected-error @+1 {{'pipe.schedule' op micro-batch 0 of chunk 1 lacks its backward}}
  pipe.schedule stage 0 forward [@a, @b] backward [@a, @b] update [@a, @b] actions [#pipe.action<forward, mb = 0>, #pipe.action<forward, mb = 0, chunk = 1>, #pipe.action<backward, mb = 0>, #pipe.action<update>]
}

// -----

// pipe.schedule: a chunk's backward after its own forward.
module {
  func.func @a() attributes {pipe.stage = 0 : i64} {
    return
  }
  func.func @b() attributes {pipe.stage = 2 : i64} {
    return
  }
  // expected-error @+1 {{'pipe.schedule' op action #1: B0c1 comes before F0c1}}
  pipe.schedule stage 0 forward [@a, @b] backward [@a, @b] update [@a, @b] actions [#pipe.action<forward, mb = 0>, #pipe.action<backward, mb = 0, chunk = 1>, #pipe.action<forward, mb = 0, chunk = 1>, #pipe.action<backward, mb = 0>, #pipe.action<update>]
}

// -----

// pipe.schedule: the update names no chunk (it runs every chunk's update).
module {
  func.func @a() attributes {pipe.stage = 0 : i64} {
    return
  }
  func.func @b() attributes {pipe.stage = 2 : i64} {
    return
  }
  // expected-error @+1 {{'pipe.schedule' op action #4: the update runs every chunk's update; it names no chunk}}
  pipe.schedule stage 0 forward [@a, @b] backward [@a, @b] update [@a, @b] actions [#pipe.action<forward, mb = 0>, #pipe.action<forward, mb = 0, chunk = 1>, #pipe.action<backward, mb = 0, chunk = 1>, #pipe.action<backward, mb = 0>, #pipe.action<update, chunk = 1>]
}

// -----

// pipe.schedule: a chunk's functions belong to one virtual stage.
module {
  func.func @a() attributes {pipe.stage = 0 : i64} {
    return
  }
  func.func @b() attributes {pipe.stage = 2 : i64} {
    return
  }
  // expected-error @+1 {{'pipe.schedule' op backward function @a of chunk 1 does not belong to the virtual stage of the chunk's forward (2)}}
  pipe.schedule stage 0 forward [@a, @b] backward [@a, @a] update [@a, @b] actions [#pipe.action<forward, mb = 0>, #pipe.action<forward, mb = 0, chunk = 1>, #pipe.action<backward, mb = 0, chunk = 1>, #pipe.action<backward, mb = 0>, #pipe.action<update>]
}

// -----

// pipe.schedule: each chunk's stash slots (micro-batch m of chunk c in the
// chunk's slot m mod stash_slots): chunk 1's F1 may take its slot after B0
// of chunk 1, chunk 0's may not.
module attributes {pipe.microbatches = 2 : i64} {
  func.func @a() attributes {pipe.stage = 0 : i64} {
    return
  }
  func.func @b() attributes {pipe.stage = 2 : i64} {
    return
  }
  // expected-error @+1 {{'pipe.schedule' op action #4 F1 needs stash slot 0 of 1 of chunk 0, still held by micro-batch 0 (whose backward has not run)}}
  pipe.schedule stage 0 forward [@a, @b] backward [@a, @b] update [@a, @b] actions [#pipe.action<forward, mb = 0>, #pipe.action<forward, mb = 0, chunk = 1>, #pipe.action<backward, mb = 0, chunk = 1>, #pipe.action<forward, mb = 1, chunk = 1>, #pipe.action<forward, mb = 1>, #pipe.action<backward, mb = 1, chunk = 1>, #pipe.action<backward, mb = 1>, #pipe.action<backward, mb = 0>, #pipe.action<update>] stash_slots 1
}

// -----

// pipe.schedule: a micro-batch's backward after its forward.
module attributes {pipe.microbatches = 2 : i64} {
  func.func @s() attributes {pipe.stage = 0 : i64} {
    return
  }
  // expected-error @+1 {{'pipe.schedule' op action #1: B1 comes before F1}}
  pipe.schedule stage 0 forward @s backward @s update @s actions [#pipe.action<forward, mb = 0>, #pipe.action<backward, mb = 1>, #pipe.action<forward, mb = 1>, #pipe.action<backward, mb = 0>, #pipe.action<update>]
}

// -----

// pipe.schedule: each action once.
module attributes {pipe.microbatches = 2 : i64} {
  func.func @s() attributes {pipe.stage = 0 : i64} {
    return
  }
  // expected-error @+1 {{'pipe.schedule' op action #2 repeats F0}}
  pipe.schedule stage 0 forward @s backward @s update @s actions [#pipe.action<forward, mb = 0>, #pipe.action<forward, mb = 1>, #pipe.action<forward, mb = 0>, #pipe.action<backward, mb = 1>, #pipe.action<backward, mb = 0>, #pipe.action<update>]
}

// -----

module {
  func.func @s() attributes {pipe.stage = 0 : i64} {
    return
  }
  // expected-error @+1 {{'pipe.schedule' op action #2 repeats B0}}
  pipe.schedule stage 0 forward @s backward @s update @s actions [#pipe.action<forward, mb = 0>, #pipe.action<backward, mb = 0>, #pipe.action<backward, mb = 0>, #pipe.action<update>]
}

// -----

// pipe.schedule: every micro-batch's forward is there (M = 2: F1 missing).
module attributes {pipe.microbatches = 2 : i64} {
  func.func @s() attributes {pipe.stage = 0 : i64} {
    return
  }
  // expected-error @+1 {{'pipe.schedule' op micro-batch 1 lacks its forward}}
  pipe.schedule stage 0 forward @s backward @s update @s actions [#pipe.action<forward, mb = 0>, #pipe.action<backward, mb = 0>, #pipe.action<update>]
}

// -----

// pipe.schedule: every micro-batch's backward is there.
module attributes {pipe.microbatches = 2 : i64} {
  func.func @s() attributes {pipe.stage = 0 : i64} {
    return
  }
  // expected-error @+1 {{'pipe.schedule' op micro-batch 0 lacks its backward}}
  pipe.schedule stage 0 forward @s backward @s update @s actions [#pipe.action<forward, mb = 0>, #pipe.action<forward, mb = 1>, #pipe.action<backward, mb = 1>, #pipe.action<update>]
}

// -----

// pipe.schedule: the update comes last.
module {
  func.func @s() attributes {pipe.stage = 0 : i64} {
    return
  }
  // expected-error @+1 {{'pipe.schedule' op the update (action #1) must be last}}
  pipe.schedule stage 0 forward @s backward @s update @s actions [#pipe.action<forward, mb = 0>, #pipe.action<update>, #pipe.action<backward, mb = 0>]
}

// -----

// pipe.schedule: exactly one update (a second one is not last... the first
// is).
module {
  func.func @s() attributes {pipe.stage = 0 : i64} {
    return
  }
  // expected-error @+1 {{'pipe.schedule' op the update (action #2) must be last}}
  pipe.schedule stage 0 forward @s backward @s update @s actions [#pipe.action<forward, mb = 0>, #pipe.action<backward, mb = 0>, #pipe.action<update>, #pipe.action<update>]
}

// -----

// pipe.schedule: an update is required.
module {
  func.func @s() attributes {pipe.stage = 0 : i64} {
    return
  }
  // expected-error @+1 {{'pipe.schedule' op needs exactly one update action 'U'}}
  pipe.schedule stage 0 forward @s backward @s update @s actions [#pipe.action<forward, mb = 0>, #pipe.action<backward, mb = 0>]
}

// -----

// pipe.schedule: micro-batches are in [0, M) (M = 1 without pipe.microbatches).
module {
  func.func @s() attributes {pipe.stage = 0 : i64} {
    return
  }
  // expected-error @+1 {{'pipe.schedule' op action #1 names micro-batch 1 but there are 1 (module attribute pipe.microbatches)}}
  pipe.schedule stage 0 forward @s backward @s update @s actions [#pipe.action<forward, mb = 0>, #pipe.action<forward, mb = 1>, #pipe.action<backward, mb = 0>, #pipe.action<update>]
}

// -----

module attributes {pipe.microbatches = 4 : i64} {
  func.func @s() attributes {pipe.stage = 0 : i64} {
    return
  }
  // expected-error @+1 {{'pipe.schedule' op action #4 names micro-batch 4 but there are 4 (module attribute pipe.microbatches)}}
  pipe.schedule stage 0 forward @s backward @s update @s actions [#pipe.action<forward, mb = 0>, #pipe.action<forward, mb = 1>, #pipe.action<forward, mb = 2>, #pipe.action<forward, mb = 3>, #pipe.action<forward, mb = 4>, #pipe.action<backward, mb = 3>, #pipe.action<backward, mb = 2>, #pipe.action<backward, mb = 1>, #pipe.action<backward, mb = 0>, #pipe.action<update>]
}

// -----

// pipe.schedule: the functions exist.
module {
  func.func @s() attributes {pipe.stage = 0 : i64} {
    return
  }
  // expected-error @+1 {{'pipe.schedule' op backward function @missing does not exist}}
  pipe.schedule stage 0 forward @s backward @missing update @s actions [#pipe.action<forward, mb = 0>, #pipe.action<backward, mb = 0>, #pipe.action<update>]
}

// -----

// pipe.schedule: the functions belong to the schedule's stage.
module {
  func.func @s0() attributes {pipe.stage = 0 : i64} {
    return
  }
  func.func @s1() attributes {pipe.stage = 1 : i64} {
    return
  }
  // expected-error @+1 {{'pipe.schedule' op update function @s1 does not belong to stage 0}}
  pipe.schedule stage 0 forward @s0 backward @s0 update @s1 actions [#pipe.action<forward, mb = 0>, #pipe.action<backward, mb = 0>, #pipe.action<update>]
}

// -----

// pipe.schedule: a function without pipe.stage belongs to no stage.
module {
  func.func @s() attributes {pipe.stage = 0 : i64} {
    return
  }
  func.func @plain() {
    return
  }
  // expected-error @+1 {{'pipe.schedule' op forward function @plain does not belong to stage 0}}
  pipe.schedule stage 0 forward @plain backward @s update @s actions [#pipe.action<forward, mb = 0>, #pipe.action<backward, mb = 0>, #pipe.action<update>]
}

// -----

// pipe.schedule: stash_slots is in [1, M].
module attributes {pipe.microbatches = 2 : i64} {
  func.func @s() attributes {pipe.stage = 0 : i64} {
    return
  }
  // expected-error @+1 {{'pipe.schedule' op stash_slots must be in [1, 2] (the micro-batches), got 3}}
  pipe.schedule stage 0 forward @s backward @s update @s actions [#pipe.action<forward, mb = 0>, #pipe.action<forward, mb = 1>, #pipe.action<backward, mb = 1>, #pipe.action<backward, mb = 0>, #pipe.action<update>] stash_slots 3
}

// -----

// pipe.schedule: a forward may not take a stash slot whose micro-batch has
// not run its backward (here GPipe's order with 1F1B's single slot).
module attributes {pipe.microbatches = 2 : i64} {
  func.func @s() attributes {pipe.stage = 0 : i64} {
    return
  }
  // expected-error @+1 {{'pipe.schedule' op action #1 F1 needs stash slot 0 of 1, still held by micro-batch 0 (whose backward has not run)}}
  pipe.schedule stage 0 forward @s backward @s update @s actions [#pipe.action<forward, mb = 0>, #pipe.action<forward, mb = 1>, #pipe.action<backward, mb = 1>, #pipe.action<backward, mb = 0>, #pipe.action<update>] stash_slots 1
}

// -----

// pipe.schedule: slot m mod stash_slots must be free even when fewer
// micro-batches than slots are in flight (F2 would take micro-batch 0's
// slot while only micro-batch 0 is in flight).
module attributes {pipe.microbatches = 4 : i64} {
  func.func @s() attributes {pipe.stage = 0 : i64} {
    return
  }
  // expected-error @+1 {{'pipe.schedule' op action #3 F2 needs stash slot 0 of 2, still held by micro-batch 0 (whose backward has not run)}}
  pipe.schedule stage 0 forward @s backward @s update @s actions [#pipe.action<forward, mb = 0>, #pipe.action<forward, mb = 1>, #pipe.action<backward, mb = 1>, #pipe.action<forward, mb = 2>, #pipe.action<backward, mb = 0>, #pipe.action<backward, mb = 2>, #pipe.action<forward, mb = 3>, #pipe.action<backward, mb = 3>, #pipe.action<update>] stash_slots 2
}

// -----

nn.parameter @w : tensor<4x3xf32>
// The lowering marks of pipe.accumulate_grad: overwrite and deferred refine
// in_place.
func.func @overwrite_without_in_place(%a: tensor<8x4xf32>, %b: tensor<8x3xf32>) {
  %g = nn.gemm %a, %b {transA = true} : (tensor<8x4xf32>, tensor<8x3xf32>) -> tensor<4x3xf32>
  // expected-error @+1 {{'pipe.accumulate_grad' op 'overwrite' needs 'in_place'}}
  pipe.accumulate_grad %g to @w {overwrite} : tensor<4x3xf32>
  return
}

// -----

nn.parameter @w : tensor<4x3xf32>
func.func @deferred_without_in_place(%a: tensor<8x4xf32>, %b: tensor<8x3xf32>) {
  %g = nn.gemm %a, %b {transA = true} : (tensor<8x4xf32>, tensor<8x3xf32>) -> tensor<4x3xf32>
  // expected-error @+1 {{'pipe.accumulate_grad' op 'deferred' needs 'in_place'}}
  pipe.accumulate_grad %g to @w {deferred} : tensor<4x3xf32>
  return
}

// -----

nn.parameter @w : tensor<4x3xf32>
func.func @overwrite_and_deferred(%a: tensor<8x4xf32>, %b: tensor<8x3xf32>) {
  %g = nn.gemm %a, %b {transA = true} : (tensor<8x4xf32>, tensor<8x3xf32>) -> tensor<4x3xf32>
  // expected-error @+1 {{'pipe.accumulate_grad' op 'overwrite' and 'deferred' exclude each other}}
  pipe.accumulate_grad %g to @w {in_place, overwrite, deferred} : tensor<4x3xf32>
  return
}

// -----

nn.parameter @w : tensor<4x3xf32>
// in_place needs a GEMM (no C) that only this op reads.
func.func @in_place_not_gemm(%g: tensor<4x3xf32>) {
  // expected-error @+1 {{'pipe.accumulate_grad' op 'in_place' needs a gradient computed by an nn.gemm without C whose only reader is this op}}
  pipe.accumulate_grad %g to @w {in_place} : tensor<4x3xf32>
  return
}

// -----

nn.parameter @w : tensor<4x3xf32>
func.func @in_place_gemm_read_twice(%a: tensor<8x4xf32>, %b: tensor<8x3xf32>) -> tensor<4x3xf32> {
  %g = nn.gemm %a, %b {transA = true} : (tensor<8x4xf32>, tensor<8x3xf32>) -> tensor<4x3xf32>
  // expected-error @+1 {{'pipe.accumulate_grad' op 'in_place' needs a gradient computed by an nn.gemm without C whose only reader is this op}}
  pipe.accumulate_grad %g to @w {in_place} : tensor<4x3xf32>
  return %g : tensor<4x3xf32>
}

// -----

nn.parameter @w : tensor<4x3xf32>
// deferred needs a weight gradient A^T B.
func.func @deferred_not_weight_grad(%a: tensor<4x8xf32>, %b: tensor<8x3xf32>) {
  %g = nn.gemm %a, %b : (tensor<4x8xf32>, tensor<8x3xf32>) -> tensor<4x3xf32>
  // expected-error @+1 {{'pipe.accumulate_grad' op 'deferred' needs a weight-gradient GEMM A^T B (transA, no transB, alpha 1)}}
  pipe.accumulate_grad %g to @w {in_place, deferred} : tensor<4x3xf32>
  return
}

// -----

// pipe.schedule: a micro-batch's weight-gradient action (W) needs the
// operands its backward keeps, so it comes after that backward.
module attributes {pipe.microbatches = 2 : i64} {
  func.func @s() attributes {pipe.stage = 0 : i64} {
    return
  }
  // expected-error @+1 {{'pipe.schedule' op action #3: W1 comes before B1 (the weight gradient needs the backward's operands)}}
  pipe.schedule stage 0 forward @s backward @s update @s actions [#pipe.action<forward, mb = 0>, #pipe.action<forward, mb = 1>, #pipe.action<backward, mb = 0>, #pipe.action<weight, mb = 1>, #pipe.action<backward, mb = 1>, #pipe.action<weight, mb = 0>, #pipe.action<update>]
}

// -----

// pipe.schedule: with W actions, every micro-batch has its W (else its
// weight gradient would never be computed).
module attributes {pipe.microbatches = 2 : i64} {
  func.func @s() attributes {pipe.stage = 0 : i64} {
    return
  }
  // expected-error @+1 {{'pipe.schedule' op micro-batch 1 lacks its weight-gradient action W1: a schedule with W actions needs one per micro-batch}}
  pipe.schedule stage 0 forward @s backward @s update @s actions [#pipe.action<forward, mb = 0>, #pipe.action<forward, mb = 1>, #pipe.action<backward, mb = 0>, #pipe.action<weight, mb = 0>, #pipe.action<backward, mb = 1>, #pipe.action<update>]
}

// -----

// pipe.schedule: each W once.
module attributes {pipe.microbatches = 1 : i64} {
  func.func @s() attributes {pipe.stage = 0 : i64} {
    return
  }
  // expected-error @+1 {{'pipe.schedule' op action #3 repeats W0}}
  pipe.schedule stage 0 forward @s backward @s update @s actions [#pipe.action<forward, mb = 0>, #pipe.action<backward, mb = 0>, #pipe.action<weight, mb = 0>, #pipe.action<weight, mb = 0>, #pipe.action<update>]
}

// -----

// A weight action needs a micro-batch.
module {
  func.func @s() attributes {pipe.stage = 0 : i64} {
    return
  }
  // expected-error @+1 {{a weight action needs a micro-batch (mb = <m>)}}
  pipe.schedule stage 0 forward @s backward @s update @s actions [#pipe.action<forward, mb = 0>, #pipe.action<backward, mb = 0>, #pipe.action<weight>, #pipe.action<update>]
}

// -----

// No function runs in the weight phase: W actions run the deferred GEMMs.
// expected-error @+1 {{'func.func' op attribute 'pipe.phase' must be "forward", "backward" or "update", got "weight"}}
func.func @w() attributes {pipe.stage = 0 : i64, pipe.phase = "weight"} {
  return
}
