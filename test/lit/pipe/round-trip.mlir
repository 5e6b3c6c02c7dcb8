// pipe.sgd_update and pipe.adam_update: parsed, printed and re-parsed; then
// through the generic form.
// RUN: gpipe-opt %s | gpipe-opt | FileCheck %s
// RUN: gpipe-opt %s --mlir-print-op-generic | gpipe-opt | FileCheck %s

// Plain SGD, then momentum + Nesterov + weight decay; the parameter is read
// before its update (allowed).
// CHECK-LABEL: func.func @sgd(
// CHECK-SAME: %[[X:[^:]+]]: tensor<4x8xf32>, %[[G:[^:]+]]: tensor<4x8xf32>, %[[GB:[^:]+]]: tensor<8xf32>
// CHECK-NEXT: %[[W:.+]] = nn.param "w" : tensor<4x8xf32>
// CHECK-NEXT: %[[B:.+]] = nn.param "b" : tensor<8xf32>
// CHECK-NEXT: %[[Y:.+]] = nn.add %[[X]], %[[W]]
// CHECK-NEXT: pipe.sgd_update %[[W]], %[[G]] {lr = 1.000000e-01 : f64, momentum = 0.000000e+00 : f64, nesterov = false, weight_decay = 0.000000e+00 : f64} : tensor<4x8xf32>
// CHECK-NEXT: pipe.sgd_update %[[B]], %[[GB]] {lr = 1.000000e-02 : f64, momentum = 9.000000e-01 : f64, nesterov = true, weight_decay = 5.000000e-04 : f64} : tensor<8xf32>
// CHECK-NEXT: return %[[Y]]
func.func @sgd(%x: tensor<4x8xf32>, %g: tensor<4x8xf32>, %gb: tensor<8xf32>) -> tensor<4x8xf32> {
  %w = nn.param "w" : tensor<4x8xf32>
  %b = nn.param "b" : tensor<8xf32>
  %y = nn.add %x, %w : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  pipe.sgd_update %w, %g {lr = 0.1 : f64, momentum = 0.0 : f64, weight_decay = 0.0 : f64, nesterov = false} : tensor<4x8xf32>
  pipe.sgd_update %b, %gb {lr = 0.01 : f64, momentum = 0.9 : f64, weight_decay = 5.0e-4 : f64, nesterov = true} : tensor<8xf32>
  return %y : tensor<4x8xf32>
}

// Adam (coupled weight decay) and AdamW (decoupled); lr = 0 and beta = 0 are
// at the closed ends of their ranges.
// CHECK-LABEL: func.func @adam(
// CHECK-SAME: %[[G:[^:]+]]: tensor<f32>, %[[G2:[^:]+]]: tensor<2x3xf32>
// CHECK-NEXT: %[[S:.+]] = nn.param "scale" : tensor<f32>
// CHECK-NEXT: %[[W:.+]] = nn.param "w" : tensor<2x3xf32>
// CHECK-NEXT: pipe.adam_update %[[S]], %[[G]] {beta1 = 9.000000e-01 : f64, beta2 = 0.99899999999999999 : f64, decoupled = false, eps = 1.000000e-08 : f64, lr = 1.000000e-03 : f64, weight_decay = 0.000000e+00 : f64} : tensor<f32>
// CHECK-NEXT: pipe.adam_update %[[W]], %[[G2]] {beta1 = 0.000000e+00 : f64, beta2 = 0.000000e+00 : f64, decoupled = true, eps = 0.000000e+00 : f64, lr = 0.000000e+00 : f64, weight_decay = 1.000000e-02 : f64} : tensor<2x3xf32>
// CHECK-NEXT: return
func.func @adam(%g: tensor<f32>, %g2: tensor<2x3xf32>) {
  %s = nn.param "scale" : tensor<f32>
  %w = nn.param "w" : tensor<2x3xf32>
  pipe.adam_update %s, %g {lr = 1.0e-3 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.0 : f64, decoupled = false} : tensor<f32>
  pipe.adam_update %w, %g2 {lr = 0.0 : f64, beta1 = 0.0 : f64, beta2 = 0.0 : f64, eps = 0.0 : f64, weight_decay = 0.01 : f64, decoupled = true} : tensor<2x3xf32>
  return
}
