// gpipe-outline-stages when a parameter's gradient is a constant: a learnable
// scalar added to the loss has d(loss)/d(offset) = the seed 1.0, an
// nn.constant that gpipe-autodiff marks nn.backward on the loss's stage. The
// stage's backward must accumulate it and its update apply it, like any other
// gradient. (M = 1, so the micro-batch scaling of the loss does not matter.)
// RUN: gpipe-opt %s --pass-pipeline='builtin.module(func.func(gpipe-microbatch{microbatches=1}, gpipe-partition{stages=2}, gpipe-autodiff, gpipe-optimizer), cse, gpipe-outline-stages)' | FileCheck %s

nn.parameter @w : tensor<4x4xf32>
nn.parameter @offset : tensor<f32>
// CHECK-LABEL: func.func @stage0_backward(
// CHECK: pipe.accumulate_grad %{{.+}} to @w : tensor<4x4xf32>
// CHECK-LABEL: func.func @stage1_forward(
// CHECK: %[[L0:.+]] = nn.softmax_cross_entropy
// CHECK-NEXT: %[[P:.+]] = nn.param @offset : tensor<f32>
// CHECK-NEXT: %[[LOSS:.+]] = nn.add %[[L0]], %[[P]]
// CHECK-NEXT: pipe.report_loss %[[LOSS]] : tensor<f32>
// CHECK-LABEL: func.func @stage1_backward(
// CHECK-DAG: %[[ONE:.+]] = nn.constant dense<1.000000e+00> : tensor<f32>
// CHECK-DAG: pipe.accumulate_grad %[[ONE]] to @offset : tensor<f32>
// CHECK: pipe.send
// CHECK-LABEL: func.func @stage1_update(
// CHECK-NEXT: %[[G:.+]] = pipe.accumulated_grad @offset : tensor<f32>
// CHECK-NEXT: %[[P:.+]] = nn.param @offset : tensor<f32>
// CHECK-NEXT: pipe.sgd_update %[[P]], %[[G]]
func.func @step(%x: tensor<8x4xf32>, %labels: tensor<8xi64>) -> (tensor<f32> {nn.loss}) {
  %w = nn.param @w : tensor<4x4xf32>
  %y = nn.gemm %x, %w : (tensor<8x4xf32>, tensor<4x4xf32>) -> tensor<8x4xf32>
  %l0 = nn.softmax_cross_entropy %y, %labels : tensor<8x4xf32>, tensor<8xi64>
  %p = nn.param @offset : tensor<f32>
  %loss = nn.add %l0, %p : tensor<f32>, tensor<f32> -> tensor<f32>
  return %loss : tensor<f32>
}
