// Batch normalization through the forward-graph passes.
// gpipe-microbatch: the input splits along N; the statistics do not carry the
// batch (each micro-batch normalizes with its own); the update's count is the
// micro-batch's, and batchnorm=deferred gives it the micro-batch count. A
// batch axis other than the first is refused.
// RUN: gpipe-opt %s --split-input-file --gpipe-microbatch=microbatches=4 --verify-diagnostics | FileCheck %s --check-prefix=MB
// RUN: gpipe-opt %s --split-input-file --gpipe-microbatch="microbatches=4 batchnorm=deferred" --verify-diagnostics | FileCheck %s --check-prefix=DEFER
// RUN: not gpipe-opt %s --split-input-file --gpipe-microbatch="batchnorm=eager" 2>&1 | FileCheck %s --check-prefix=BADMODE
// gpipe-partition keeps the update on its batch normalization's stage;
// gpipe-autodiff builds nn.batch_norm_grad and no gradient for the running
// statistics (state parameters).
// RUN: gpipe-opt %s --split-input-file --gpipe-partition=stages=3 --gpipe-autodiff --gpipe-optimizer 2>/dev/null | FileCheck %s --check-prefix=AD

// BADMODE: error: unknown batchnorm mode 'eager' (expected microbatch or deferred)

nn.parameter @s : tensor<2xf32>
nn.parameter @b : tensor<2xf32>
nn.parameter @rm state : tensor<2xf32>
nn.parameter @rv state : tensor<2xf32>
nn.parameter @w : tensor<3x8xf32>
// MB-LABEL: func.func @bn(
// MB: nn.batch_norm %{{.+}} : tensor<2x2x2x2xf32>, tensor<2xf32>
// MB: nn.update_running_stats %{{.+}} {count = 8 : i64, momentum = 0.899999976 : f32} : tensor<2xf32>
// DEFER-LABEL: func.func @bn(
// DEFER: nn.update_running_stats %{{.+}} {count = 8 : i64, microbatches = 4 : i64, momentum = 0.899999976 : f32} : tensor<2xf32>
// AD-LABEL: func.func @bn(
// AD: %[[Y:[^,]+]], %[[M:[^,]+]], %[[V:[^ ]+]] = nn.batch_norm {{.+}} {epsilon = 9.99999974E-6 : f32, pipe.stage = 0 : i64}
// AD: nn.update_running_stats {{.+}} {count = 32 : i64, momentum = 0.899999976 : f32, pipe.stage = 0 : i64}
// AD: nn.relu {{.+}} {pipe.stage = 1 : i64}
// AD: %[[DX:[^,]+]], %[[DS:[^,]+]], %[[DB:[^ ]+]] = nn.batch_norm_grad %{{.+}}, %[[M]], %[[V]], %{{.+}}, %{{.+}} {epsilon = 9.99999974E-6 : f32, nn.backward, pipe.stage = 0 : i64}
// AD-DAG: pipe.sgd_update %{{.+}}, %[[DS]]
// AD-DAG: pipe.sgd_update %{{.+}}, %[[DB]]
// AD-DAG: pipe.sgd_update {{.+}} : tensor<3x8xf32>
// AD-NOT: pipe.sgd_update
// AD-LABEL: func.func @batch_not_first(
func.func @bn(%x: tensor<8x2x2x2xf32>, %l: tensor<8xi64>) -> (tensor<f32> {nn.loss}) {
  %s = nn.param @s : tensor<2xf32>
  %b = nn.param @b : tensor<2xf32>
  %rm = nn.param @rm : tensor<2xf32>
  %rv = nn.param @rv : tensor<2xf32>
  %y, %m, %v = nn.batch_norm %x, %s, %b {epsilon = 1.0e-05 : f32} : tensor<8x2x2x2xf32>, tensor<2xf32>
  nn.update_running_stats %rm, %rv, %m, %v {count = 32 : i64, momentum = 0.9 : f32} : tensor<2xf32>
  %r = nn.relu %y : tensor<8x2x2x2xf32>
  %f = nn.reshape %r : tensor<8x2x2x2xf32> -> tensor<8x8xf32>
  %w = nn.param @w : tensor<3x8xf32>
  %g = nn.gemm %f, %w {transB = true} : (tensor<8x8xf32>, tensor<3x8xf32>) -> tensor<8x3xf32>
  %loss = nn.softmax_cross_entropy %g, %l : tensor<8x3xf32>, tensor<8xi64>
  return %loss : tensor<f32>
}

// -----

nn.parameter @s : tensor<4xf32>
nn.parameter @rm state : tensor<4xf32>
nn.parameter @rv state : tensor<4xf32>
func.func @batch_not_first(%x: tensor<4x8xf32>, %l: tensor<4xi64>) -> (tensor<f32> {nn.loss}) {
  %s = nn.param @s : tensor<4xf32>
  %rm = nn.param @rm : tensor<4xf32>
  %rv = nn.param @rv : tensor<4xf32>
  %t = nn.transpose %x, [1, 0] : tensor<4x8xf32> -> tensor<8x4xf32>
  // expected-error @+1 {{cannot split the batch into micro-batches: a batch normalization of a tensor whose batch axis is not the first}}
  %y, %m, %v = nn.batch_norm %t, %s, %s {epsilon = 1.0e-05 : f32} : tensor<8x4xf32>, tensor<4xf32>
  nn.update_running_stats %rm, %rv, %m, %v {count = 8 : i64, momentum = 0.9 : f32} : tensor<4xf32>
  %u = nn.transpose %y, [1, 0] : tensor<8x4xf32> -> tensor<4x8xf32>
  %loss = nn.softmax_cross_entropy %u, %l : tensor<4x8xf32>, tensor<4xi64>
  return %loss : tensor<f32>
}
