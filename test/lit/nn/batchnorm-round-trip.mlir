// The batch normalization ops in their custom form (nn.batch_norm,
// nn.batch_norm_grad, nn.update_running_stats, and `state` parameters):
// parsed, printed, re-parsed and printed again; then through the generic
// form.
// RUN: gpipe-opt %s | gpipe-opt | FileCheck %s
// RUN: gpipe-opt %s --mlir-print-op-generic | gpipe-opt | FileCheck %s

// CHECK: nn.parameter @scale : tensor<2xf32>
// CHECK: nn.parameter @rm state : tensor<2xf32>
// CHECK: nn.parameter @rv state : tensor<2xf32>
// CHECK-LABEL: func.func @batch_norm(
// CHECK: %[[Y:[^,]+]], %[[M:[^,]+]], %[[V:[^ ]+]] = nn.batch_norm %{{.+}}, %{{.+}}, %{{.+}} {epsilon = 9.99999974E-6 : f32} : tensor<4x2x3x3xf32>, tensor<2xf32>
// CHECK: nn.update_running_stats %{{.+}}, %{{.+}}, %[[M]], %[[V]] {count = 36 : i64, momentum = 0.899999976 : f32} : tensor<2xf32>
// CHECK: nn.update_running_stats %{{.+}}, %{{.+}}, %[[M]], %[[V]] {count = 36 : i64, microbatches = 4 : i64, momentum = 0.899999976 : f32} : tensor<2xf32>
// CHECK: nn.batch_norm_grad %{{.+}}, %[[M]], %[[V]], %{{.+}}, %[[Y]] {epsilon = 9.99999974E-6 : f32} : tensor<4x2x3x3xf32>, tensor<2xf32>
nn.parameter @scale : tensor<2xf32>
nn.parameter @rm state : tensor<2xf32>
nn.parameter @rv state : tensor<2xf32>
func.func @batch_norm(%x: tensor<4x2x3x3xf32>, %b: tensor<2xf32>) -> (tensor<4x2x3x3xf32>, tensor<2xf32>, tensor<2xf32>) {
  %s = nn.param @scale : tensor<2xf32>
  %y, %m, %v = nn.batch_norm %x, %s, %b {epsilon = 1.0e-05 : f32} : tensor<4x2x3x3xf32>, tensor<2xf32>
  %rm = nn.param @rm : tensor<2xf32>
  %rv = nn.param @rv : tensor<2xf32>
  nn.update_running_stats %rm, %rv, %m, %v {count = 36 : i64, momentum = 0.9 : f32} : tensor<2xf32>
  nn.update_running_stats %rm, %rv, %m, %v {count = 36 : i64, momentum = 0.9 : f32, microbatches = 4 : i64} : tensor<2xf32>
  %dx, %ds, %db = nn.batch_norm_grad %x, %m, %v, %s, %y {epsilon = 1.0e-05 : f32} : tensor<4x2x3x3xf32>, tensor<2xf32>
  return %dx, %ds, %db : tensor<4x2x3x3xf32>, tensor<2xf32>, tensor<2xf32>
}
