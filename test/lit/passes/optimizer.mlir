// gpipe-optimizer on IR with nn.param_grad already present: each param_grad
// becomes a pipe.sgd_update / pipe.adam_update with the pass options as
// attributes, placed right before the return (after every use of the
// parameter, even uses that came after the param_grad).
// RUN: gpipe-opt %s --gpipe-optimizer | FileCheck %s --check-prefixes=CHECK,SGD
// RUN: gpipe-opt %s --gpipe-optimizer="optimizer=sgd lr=0.05 momentum=0.5" | FileCheck %s --check-prefixes=CHECK,MOMENTUM
// RUN: gpipe-opt %s --gpipe-optimizer="optimizer=sgd lr=0.1 momentum=0.9 nesterov=true weight-decay=1e-4" | FileCheck %s --check-prefixes=CHECK,NESTEROV
// RUN: gpipe-opt %s --gpipe-optimizer="optimizer=adam lr=0.001" | FileCheck %s --check-prefixes=CHECK,ADAM
// RUN: gpipe-opt %s --gpipe-optimizer="optimizer=adam lr=0.001 weight-decay=0.1" | FileCheck %s --check-prefixes=CHECK,ADAM-WD
// RUN: gpipe-opt %s --gpipe-optimizer="optimizer=adamw lr=0.002 weight-decay=0.01 beta1=0.8 beta2=0.99 eps=1e-6" | FileCheck %s --check-prefixes=CHECK,ADAMW

nn.parameter @w : tensor<4x8xf32>
nn.parameter @b : tensor<8xf32>
nn.parameter @frozen : tensor<4xf32>
// Two parameters, each read after its param_grad: both updates go after the
// last read, in param_grad order, and no param_grad is left. Defaults: sgd,
// lr 0.01, no momentum, no weight decay; Adam betas 0.9 / 0.999, eps 1e-8.
// CHECK-LABEL: func.func @step(
// CHECK-SAME: %[[X:[^:]+]]: tensor<4x8xf32>, %[[GW:[^:]+]]: tensor<4x8xf32>, %[[GB:[^:]+]]: tensor<8xf32>
// CHECK-NEXT: %[[W:.+]] = nn.param @w : tensor<4x8xf32>
// CHECK-NEXT: %[[B:.+]] = nn.param @b : tensor<8xf32>
// CHECK-NEXT: %[[Y:.+]] = nn.add %[[X]], %[[W]]
// CHECK-NEXT: %[[Z:.+]] = nn.add %[[Y]], %[[B]]
// SGD-NEXT: pipe.sgd_update %[[W]], %[[GW]] {lr = 1.000000e-02 : f64, momentum = 0.000000e+00 : f64, nesterov = false, weight_decay = 0.000000e+00 : f64} : tensor<4x8xf32>
// SGD-NEXT: pipe.sgd_update %[[B]], %[[GB]] {lr = 1.000000e-02 : f64, momentum = 0.000000e+00 : f64, nesterov = false, weight_decay = 0.000000e+00 : f64} : tensor<8xf32>
// MOMENTUM-NEXT: pipe.sgd_update %[[W]], %[[GW]] {lr = 5.000000e-02 : f64, momentum = 5.000000e-01 : f64, nesterov = false, weight_decay = 0.000000e+00 : f64} : tensor<4x8xf32>
// MOMENTUM-NEXT: pipe.sgd_update %[[B]], %[[GB]] {lr = 5.000000e-02 : f64, momentum = 5.000000e-01 : f64, nesterov = false, weight_decay = 0.000000e+00 : f64} : tensor<8xf32>
// NESTEROV-NEXT: pipe.sgd_update %[[W]], %[[GW]] {lr = 1.000000e-01 : f64, momentum = 9.000000e-01 : f64, nesterov = true, weight_decay = 1.000000e-04 : f64} : tensor<4x8xf32>
// NESTEROV-NEXT: pipe.sgd_update %[[B]], %[[GB]] {lr = 1.000000e-01 : f64, momentum = 9.000000e-01 : f64, nesterov = true, weight_decay = 1.000000e-04 : f64} : tensor<8xf32>
// ADAM-NEXT: pipe.adam_update %[[W]], %[[GW]] {beta1 = 9.000000e-01 : f64, beta2 = 0.99899999999999999 : f64, decoupled = false, eps = 1.000000e-08 : f64, lr = 1.000000e-03 : f64, weight_decay = 0.000000e+00 : f64} : tensor<4x8xf32>
// ADAM-NEXT: pipe.adam_update %[[B]], %[[GB]] {beta1 = 9.000000e-01 : f64, beta2 = 0.99899999999999999 : f64, decoupled = false, eps = 1.000000e-08 : f64, lr = 1.000000e-03 : f64, weight_decay = 0.000000e+00 : f64} : tensor<8xf32>
// ADAM-WD-NEXT: pipe.adam_update %[[W]], %[[GW]] {beta1 = 9.000000e-01 : f64, beta2 = 0.99899999999999999 : f64, decoupled = false, eps = 1.000000e-08 : f64, lr = 1.000000e-03 : f64, weight_decay = 1.000000e-01 : f64} : tensor<4x8xf32>
// ADAM-WD-NEXT: pipe.adam_update %[[B]], %[[GB]] {beta1 = 9.000000e-01 : f64, beta2 = 0.99899999999999999 : f64, decoupled = false, eps = 1.000000e-08 : f64, lr = 1.000000e-03 : f64, weight_decay = 1.000000e-01 : f64} : tensor<8xf32>
// ADAMW-NEXT: pipe.adam_update %[[W]], %[[GW]] {beta1 = 8.000000e-01 : f64, beta2 = 0.98999999999999999 : f64, decoupled = true, eps = 9.9999999999999995E-7 : f64, lr = 2.000000e-03 : f64, weight_decay = 1.000000e-02 : f64} : tensor<4x8xf32>
// ADAMW-NEXT: pipe.adam_update %[[B]], %[[GB]] {beta1 = 8.000000e-01 : f64, beta2 = 0.98999999999999999 : f64, decoupled = true, eps = 9.9999999999999995E-7 : f64, lr = 2.000000e-03 : f64, weight_decay = 1.000000e-02 : f64} : tensor<8xf32>
// CHECK-NEXT: return %[[Z]] : tensor<4x8xf32>
func.func @step(%x: tensor<4x8xf32>, %gw: tensor<4x8xf32>, %gb: tensor<8xf32>) -> tensor<4x8xf32> {
  %w = nn.param @w : tensor<4x8xf32>
  %b = nn.param @b : tensor<8xf32>
  nn.param_grad %w, %gw : tensor<4x8xf32>
  %y = nn.add %x, %w : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  nn.param_grad %b, %gb : tensor<8xf32>
  %z = nn.add %y, %b : tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  return %z : tensor<4x8xf32>
}

// A function without param_grad is left alone: no update for its parameter.
// CHECK-LABEL: func.func @no_grads(
// CHECK-NEXT: nn.param @frozen
// CHECK-NEXT: nn.tanh
// CHECK-NEXT: return
func.func @no_grads() -> tensor<4xf32> {
  %w = nn.param @frozen : tensor<4xf32>
  %t = nn.tanh %w : tensor<4xf32>
  return %t : tensor<4xf32>
}
