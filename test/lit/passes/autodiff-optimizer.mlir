// gpipe-autodiff then gpipe-optimizer on a Linear layer: the gradients feed the
// updates, which come last (right after the gradient ops, right before the
// return: no nn.param_grad is left in between).
// RUN: gpipe-opt %s --gpipe-autodiff --gpipe-optimizer="optimizer=adamw lr=0.001 weight-decay=0.01" | FileCheck %s --check-prefixes=CHECK,ADAMW
// RUN: gpipe-opt %s --gpipe-autodiff --gpipe-optimizer="lr=0.1 momentum=0.9" | FileCheck %s --check-prefixes=CHECK,SGD

nn.parameter @fc.weight : tensor<8x16xf32>
nn.parameter @fc.bias : tensor<8xf32>
// CHECK-LABEL: func.func @linear(
// CHECK-SAME: %[[X:[^:]+]]: tensor<4x16xf32>, %[[L:[^:]+]]: tensor<4xi64>
// CHECK: %[[W:.+]] = nn.param @fc.weight
// CHECK: %[[B:.+]] = nn.param @fc.bias
// CHECK: %[[Y:.+]] = nn.gemm %[[X]], %[[W]], %[[B]] {transB = true}
// CHECK: %[[LOSS:.+]] = nn.softmax_cross_entropy %[[Y]], %[[L]]
// CHECK: %[[DY:.+]] = nn.softmax_cross_entropy_grad %[[Y]], %[[L]]
// CHECK: %[[DW:.+]] = nn.gemm %[[DY]], %[[X]] {transA = true}
// CHECK: %[[DB:.+]] = nn.reduce_to %[[DY]]
// ADAMW-NEXT: pipe.adam_update %[[W]], %[[DW]] {beta1 = 9.000000e-01 : f64, beta2 = 0.99899999999999999 : f64, decoupled = true, eps = 1.000000e-08 : f64, lr = 1.000000e-03 : f64, weight_decay = 1.000000e-02 : f64} : tensor<8x16xf32>
// ADAMW-NEXT: pipe.adam_update %[[B]], %[[DB]] {beta1 = 9.000000e-01 : f64, beta2 = 0.99899999999999999 : f64, decoupled = true, eps = 1.000000e-08 : f64, lr = 1.000000e-03 : f64, weight_decay = 1.000000e-02 : f64} : tensor<8xf32>
// SGD-NEXT: pipe.sgd_update %[[W]], %[[DW]] {lr = 1.000000e-01 : f64, momentum = 9.000000e-01 : f64, nesterov = false, weight_decay = 0.000000e+00 : f64} : tensor<8x16xf32>
// SGD-NEXT: pipe.sgd_update %[[B]], %[[DB]] {lr = 1.000000e-01 : f64, momentum = 9.000000e-01 : f64, nesterov = false, weight_decay = 0.000000e+00 : f64} : tensor<8xf32>
// CHECK-NEXT: return %[[LOSS]] : tensor<f32>
func.func @linear(%x: tensor<4x16xf32>, %labels: tensor<4xi64>) -> (tensor<f32> {nn.loss}) {
  %w = nn.param @fc.weight : tensor<8x16xf32>
  %b = nn.param @fc.bias : tensor<8xf32>
  %y = nn.gemm %x, %w, %b {transB = true} : (tensor<4x16xf32>, tensor<8x16xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %loss = nn.softmax_cross_entropy %y, %labels : tensor<4x8xf32>, tensor<4xi64>
  return %loss : tensor<f32>
}
