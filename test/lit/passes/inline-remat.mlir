// gpipe-inline-remat: a pipe.remat region becomes ordinary ops of its
// function, in its place: the region's block arguments become its inputs,
// its results what pipe.yield returned; nothing else changes. A function
// without a region is left alone.
// RUN: gpipe-opt %s --split-input-file --gpipe-inline-remat | FileCheck %s
// RUN: gpipe-opt %s --split-input-file --gpipe-lower | FileCheck %s

nn.parameter @w0 : tensor<32x48xf32>
// CHECK-LABEL: func.func @stage0_backward(
// CHECK-SAME: %[[X:[^:]+]]: tensor<8x32xf32>, %[[S:[^:]+]]: tensor<8x1xf32>)
// CHECK-NOT: pipe.remat
// CHECK-NEXT: %[[W:.+]] = nn.param @w0 : tensor<32x48xf32>
// CHECK-NEXT: %[[A:.+]] = nn.gemm %[[X]], %[[W]]
// CHECK-NEXT: %[[T:.+]] = nn.tanh %[[A]]
// CHECK-NEXT: %[[G:.+]] = pipe.recv from 2 tag 5
// CHECK-NEXT: %[[DT:.+]] = nn.mul %[[G]], %[[S]]
// CHECK-NEXT: %[[DA:.+]] = nn.tanh_grad %[[T]], %[[DT]]
// CHECK-NEXT: %[[DW:.+]] = nn.gemm %[[X]], %[[DA]] {transA = true}
// CHECK-NEXT: pipe.accumulate_grad %[[DW]] to @w0
// CHECK-NEXT: return
func.func @stage0_backward(%x: tensor<8x32xf32>, %s: tensor<8x1xf32>) attributes {pipe.phase = "backward", pipe.stage = 0 : i64} {
  %r:3 = pipe.remat(%x, %s) : (tensor<8x32xf32>, tensor<8x1xf32>) -> (tensor<8x1xf32>, tensor<8x48xf32>, tensor<8x32xf32>) {
  ^bb0(%ix: tensor<8x32xf32>, %is: tensor<8x1xf32>):
    %w = nn.param @w0 : tensor<32x48xf32>
    %a = nn.gemm %ix, %w : (tensor<8x32xf32>, tensor<32x48xf32>) -> tensor<8x48xf32>
    %t = nn.tanh %a : tensor<8x48xf32>
    pipe.yield %is, %t, %ix : tensor<8x1xf32>, tensor<8x48xf32>, tensor<8x32xf32>
  }
  %g = pipe.recv from 2 tag 5 : tensor<8x48xf32>
  %dt = nn.mul %g, %r#0 : tensor<8x48xf32>, tensor<8x1xf32> -> tensor<8x48xf32>
  %da = nn.tanh_grad %r#1, %dt : tensor<8x48xf32>
  %dw = nn.gemm %r#2, %da {transA = true} : (tensor<8x32xf32>, tensor<8x48xf32>) -> tensor<32x48xf32>
  pipe.accumulate_grad %dw to @w0 : tensor<32x48xf32>
  return
}

// -----

nn.parameter @w0 : tensor<32x48xf32>
// No region: unchanged.
// CHECK-LABEL: func.func @stage0_update(
// CHECK-NEXT: %[[W:.+]] = nn.param @w0
// CHECK-NEXT: %[[G:.+]] = pipe.accumulated_grad @w0
// CHECK-NEXT: pipe.sgd_update %[[W]], %[[G]]
// CHECK-NEXT: return
func.func @stage0_update() attributes {pipe.phase = "update", pipe.stage = 0 : i64} {
  %w = nn.param @w0 : tensor<32x48xf32>
  %g = pipe.accumulated_grad @w0 : tensor<32x48xf32>
  pipe.sgd_update %w, %g {lr = 1.000000e-01 : f64, momentum = 0.000000e+00 : f64, nesterov = false, weight_decay = 0.000000e+00 : f64} : tensor<32x48xf32>
  return
}
