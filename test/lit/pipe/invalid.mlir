// Verifier and type-constraint errors of pipe.sgd_update / pipe.adam_update.
// RUN: gpipe-opt %s --split-input-file --verify-diagnostics

// The updated value must be an nn.param (SGD).
func.func @sgd_not_param(%x: tensor<4xf32>, %g: tensor<4xf32>) {
  // expected-error @+1 {{'pipe.sgd_update' op operand #0 must be the result of an 'nn.param'}}
  pipe.sgd_update %x, %g {lr = 0.1 : f64, momentum = 0.0 : f64, weight_decay = 0.0 : f64, nesterov = false} : tensor<4xf32>
  return
}

// -----

// The updated value must be an nn.param (Adam), not a value computed from one.
func.func @adam_not_param(%g: tensor<4xf32>) {
  %p = nn.param "w" : tensor<4xf32>
  %t = nn.tanh %p : tensor<4xf32>
  // expected-error @+1 {{'pipe.adam_update' op operand #0 must be the result of an 'nn.param'}}
  pipe.adam_update %t, %g {lr = 1.0e-3 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.0 : f64, decoupled = false} : tensor<4xf32>
  return
}

// -----

// The gradient has the parameter's type (SGD).
func.func @sgd_type_mismatch(%g: tensor<4x16xf32>) {
  %p = nn.param "w" : tensor<4x8xf32>
  // expected-error @+1 {{'pipe.sgd_update' op failed to verify that all of {param, grad} have same type}}
  "pipe.sgd_update"(%p, %g) {lr = 0.1 : f64, momentum = 0.0 : f64, weight_decay = 0.0 : f64, nesterov = false} : (tensor<4x8xf32>, tensor<4x16xf32>) -> ()
  return
}

// -----

// The gradient has the parameter's type (Adam).
func.func @adam_type_mismatch(%g: tensor<f32>) {
  %p = nn.param "w" : tensor<1xf32>
  // expected-error @+1 {{'pipe.adam_update' op failed to verify that all of {param, grad} have same type}}
  "pipe.adam_update"(%p, %g) {lr = 1.0e-3 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.0 : f64, decoupled = false} : (tensor<1xf32>, tensor<f32>) -> ()
  return
}

// -----

// Gradients are statically shaped f32 tensors.
func.func @sgd_dynamic_grad(%g: tensor<?xf32>) {
  %p = nn.param "w" : tensor<4xf32>
  // expected-error @+1 {{'pipe.sgd_update' op operand #1 must be statically shaped tensor of 32-bit float values, but got 'tensor<?xf32>'}}
  "pipe.sgd_update"(%p, %g) {lr = 0.1 : f64, momentum = 0.0 : f64, weight_decay = 0.0 : f64, nesterov = false} : (tensor<4xf32>, tensor<?xf32>) -> ()
  return
}

// -----

// Hyper-parameters are f64 attributes.
func.func @sgd_lr_f32(%g: tensor<4xf32>) {
  %p = nn.param "w" : tensor<4xf32>
  // expected-error @+1 {{'pipe.sgd_update' op attribute 'lr' failed to satisfy constraint: 64-bit float attribute}}
  pipe.sgd_update %p, %g {lr = 0.1 : f32, momentum = 0.0 : f64, weight_decay = 0.0 : f64, nesterov = false} : tensor<4xf32>
  return
}

// -----

// Every hyper-parameter is required.
func.func @adam_missing_eps(%g: tensor<4xf32>) {
  %p = nn.param "w" : tensor<4xf32>
  // expected-error @+1 {{'pipe.adam_update' op requires attribute 'eps'}}
  pipe.adam_update %p, %g {lr = 1.0e-3 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, weight_decay = 0.0 : f64, decoupled = false} : tensor<4xf32>
  return
}

// -----

// No op may read the parameter after its update.
func.func @use_after_update(%g: tensor<4xf32>) -> tensor<4xf32> {
  %p = nn.param "w" : tensor<4xf32>
  // expected-error @+1 {{'pipe.sgd_update' op parameter is used after its update by nn.relu}}
  pipe.sgd_update %p, %g {lr = 0.1 : f64, momentum = 0.0 : f64, weight_decay = 0.0 : f64, nesterov = false} : tensor<4xf32>
  %r = nn.relu %p : tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

// Returning the parameter after its update is a use after the update too.
func.func @returned_after_update(%g: tensor<4xf32>) -> tensor<4xf32> {
  %p = nn.param "w" : tensor<4xf32>
  // expected-error @+1 {{'pipe.adam_update' op parameter is used after its update by func.return}}
  pipe.adam_update %p, %g {lr = 1.0e-3 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.0 : f64, decoupled = false} : tensor<4xf32>
  return %p : tensor<4xf32>
}

// -----

// A parameter is updated once: a second update is a use after the first.
func.func @updated_twice(%g: tensor<4xf32>) {
  %p = nn.param "w" : tensor<4xf32>
  // expected-error @+1 {{'pipe.sgd_update' op parameter is used after its update by pipe.sgd_update}}
  pipe.sgd_update %p, %g {lr = 0.1 : f64, momentum = 0.0 : f64, weight_decay = 0.0 : f64, nesterov = false} : tensor<4xf32>
  pipe.sgd_update %p, %g {lr = 0.1 : f64, momentum = 0.0 : f64, weight_decay = 0.0 : f64, nesterov = false} : tensor<4xf32>
  return
}

// -----

// SGD: lr >= 0.
func.func @sgd_lr_negative(%g: tensor<4xf32>) {
  %p = nn.param "w" : tensor<4xf32>
  // expected-error @+1 {{'pipe.sgd_update' op lr = -1.000000e-01 is out of range [0.000000e+00, INF)}}
  pipe.sgd_update %p, %g {lr = -0.1 : f64, momentum = 0.0 : f64, weight_decay = 0.0 : f64, nesterov = false} : tensor<4xf32>
  return
}

// -----

// SGD: lr is finite.
func.func @sgd_lr_inf(%g: tensor<4xf32>) {
  %p = nn.param "w" : tensor<4xf32>
  // expected-error @+1 {{'pipe.sgd_update' op lr = INF is out of range [0.000000e+00, INF)}}
  pipe.sgd_update %p, %g {lr = 0x7FF0000000000000 : f64, momentum = 0.0 : f64, weight_decay = 0.0 : f64, nesterov = false} : tensor<4xf32>
  return
}

// -----

// SGD: momentum >= 0.
func.func @sgd_momentum_negative(%g: tensor<4xf32>) {
  %p = nn.param "w" : tensor<4xf32>
  // expected-error @+1 {{'pipe.sgd_update' op momentum = -5.000000e-01 is out of range [0.000000e+00, INF)}}
  pipe.sgd_update %p, %g {lr = 0.1 : f64, momentum = -0.5 : f64, weight_decay = 0.0 : f64, nesterov = false} : tensor<4xf32>
  return
}

// -----

// SGD: NaN is rejected although it compares false with both bounds.
func.func @sgd_momentum_nan(%g: tensor<4xf32>) {
  %p = nn.param "w" : tensor<4xf32>
  // expected-error @+1 {{'pipe.sgd_update' op momentum = nan is out of range [0.000000e+00, INF)}}
  pipe.sgd_update %p, %g {lr = 0.1 : f64, momentum = 0x7FF8000000000000 : f64, weight_decay = 0.0 : f64, nesterov = false} : tensor<4xf32>
  return
}

// -----

// SGD: weight_decay >= 0.
func.func @sgd_weight_decay_negative(%g: tensor<4xf32>) {
  %p = nn.param "w" : tensor<4xf32>
  // expected-error @+1 {{'pipe.sgd_update' op weight_decay = -1.000000e-04 is out of range [0.000000e+00, INF)}}
  pipe.sgd_update %p, %g {lr = 0.1 : f64, momentum = 0.0 : f64, weight_decay = -1.0e-4 : f64, nesterov = false} : tensor<4xf32>
  return
}

// -----

// SGD: Nesterov needs a momentum (as in torch.optim.SGD).
func.func @sgd_nesterov_no_momentum(%g: tensor<4xf32>) {
  %p = nn.param "w" : tensor<4xf32>
  // expected-error @+1 {{'pipe.sgd_update' op nesterov requires a momentum > 0}}
  pipe.sgd_update %p, %g {lr = 0.1 : f64, momentum = 0.0 : f64, weight_decay = 0.0 : f64, nesterov = true} : tensor<4xf32>
  return
}

// -----

// Adam: lr >= 0.
func.func @adam_lr_negative(%g: tensor<4xf32>) {
  %p = nn.param "w" : tensor<4xf32>
  // expected-error @+1 {{'pipe.adam_update' op lr = -1.000000e-03 is out of range [0.000000e+00, INF)}}
  pipe.adam_update %p, %g {lr = -1.0e-3 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.0 : f64, decoupled = false} : tensor<4xf32>
  return
}

// -----

// Adam: beta1 < 1 (the range is half-open).
func.func @adam_beta1_one(%g: tensor<4xf32>) {
  %p = nn.param "w" : tensor<4xf32>
  // expected-error @+1 {{'pipe.adam_update' op beta1 = 1.000000e+00 is out of range [0.000000e+00, 1.000000e+00)}}
  pipe.adam_update %p, %g {lr = 1.0e-3 : f64, beta1 = 1.0 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.0 : f64, decoupled = false} : tensor<4xf32>
  return
}

// -----

// Adam: beta1 >= 0.
func.func @adam_beta1_negative(%g: tensor<4xf32>) {
  %p = nn.param "w" : tensor<4xf32>
  // expected-error @+1 {{'pipe.adam_update' op beta1 = -1.000000e-01 is out of range [0.000000e+00, 1.000000e+00)}}
  pipe.adam_update %p, %g {lr = 1.0e-3 : f64, beta1 = -0.1 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.0 : f64, decoupled = false} : tensor<4xf32>
  return
}

// -----

// Adam: beta2 < 1.
func.func @adam_beta2_above_one(%g: tensor<4xf32>) {
  %p = nn.param "w" : tensor<4xf32>
  // expected-error @+1 {{'pipe.adam_update' op beta2 = 1.500000e+00 is out of range [0.000000e+00, 1.000000e+00)}}
  pipe.adam_update %p, %g {lr = 1.0e-3 : f64, beta1 = 0.9 : f64, beta2 = 1.5 : f64, eps = 1.0e-8 : f64, weight_decay = 0.0 : f64, decoupled = false} : tensor<4xf32>
  return
}

// -----

// Adam: eps >= 0.
func.func @adam_eps_negative(%g: tensor<4xf32>) {
  %p = nn.param "w" : tensor<4xf32>
  // expected-error @+1 {{'pipe.adam_update' op eps = -1.000000e-08 is out of range [0.000000e+00, INF)}}
  pipe.adam_update %p, %g {lr = 1.0e-3 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = -1.0e-8 : f64, weight_decay = 0.0 : f64, decoupled = false} : tensor<4xf32>
  return
}

// -----

// AdamW: weight_decay >= 0.
func.func @adamw_weight_decay_negative(%g: tensor<4xf32>) {
  %p = nn.param "w" : tensor<4xf32>
  // expected-error @+1 {{'pipe.adam_update' op weight_decay = -1.000000e-02 is out of range [0.000000e+00, INF)}}
  pipe.adam_update %p, %g {lr = 1.0e-3 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = -0.01 : f64, decoupled = true} : tensor<4xf32>
  return
}
