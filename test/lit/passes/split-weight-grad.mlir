// gpipe-split-weight-grad: with M > 1 micro-batches, an in-place
// accumulation of a weight gradient A^T B (transA, no transB, alpha 1) is
// marked deferred: the update computes it once over all micro-batches. Other
// GEMMs, accumulations not in place, and M = 1 are left alone.
// RUN: gpipe-opt %s --split-input-file --gpipe-split-weight-grad | FileCheck %s
// RUN: gpipe-opt %s --split-input-file --gpipe-lower | FileCheck %s --check-prefix=LOWER

// CHECK-LABEL: func.func @four_microbatches(
// CHECK: pipe.accumulate_grad %{{.+}} to @w {deferred, in_place} :
// CHECK: pipe.accumulate_grad %{{.+}} to @s {in_place} :
// CHECK: pipe.accumulate_grad %{{.+}} to @t {in_place} :
// CHECK: pipe.accumulate_grad %{{.+}} to @n :
// gpipe-lower marks in_place first, then defers.
// LOWER-LABEL: func.func @four_microbatches(
// LOWER: pipe.accumulate_grad %{{.+}} to @w {deferred, in_place} :
// LOWER: pipe.accumulate_grad %{{.+}} to @s {in_place} :
// LOWER: pipe.accumulate_grad %{{.+}} to @t {in_place} :
// LOWER: pipe.accumulate_grad %{{.+}} to @n {deferred, in_place} :
module attributes {pipe.microbatches = 4 : i64} {
  nn.parameter @w : tensor<4x3xf32>
  nn.parameter @s : tensor<4x3xf32>
  nn.parameter @t : tensor<4x3xf32>
  nn.parameter @n : tensor<4x3xf32>
  func.func @four_microbatches(%x: tensor<2x4xf32>, %d: tensor<2x3xf32>, %y: tensor<4x2xf32>) {
    %gw = nn.gemm %x, %d {transA = true} : (tensor<2x4xf32>, tensor<2x3xf32>) -> tensor<4x3xf32>
    pipe.accumulate_grad %gw to @w {in_place} : tensor<4x3xf32>
    // Scaled by alpha: not deferred.
    %gs = nn.gemm %x, %d {transA = true, alpha = 2.0 : f32} : (tensor<2x4xf32>, tensor<2x3xf32>) -> tensor<4x3xf32>
    pipe.accumulate_grad %gs to @s {in_place} : tensor<4x3xf32>
    // Not A^T B.
    %gt = nn.gemm %y, %d : (tensor<4x2xf32>, tensor<2x3xf32>) -> tensor<4x3xf32>
    pipe.accumulate_grad %gt to @t {in_place} : tensor<4x3xf32>
    // Not in place (yet): left alone by this pass.
    %gn = nn.gemm %x, %d {transA = true} : (tensor<2x4xf32>, tensor<2x3xf32>) -> tensor<4x3xf32>
    pipe.accumulate_grad %gn to @n : tensor<4x3xf32>
    return
  }
}

// -----

// M = 1: nothing to defer over.
// CHECK-LABEL: func.func @one_microbatch(
// CHECK: pipe.accumulate_grad %{{.+}} to @w {in_place} :
module attributes {pipe.microbatches = 1 : i64} {
  nn.parameter @w : tensor<4x3xf32>
  func.func @one_microbatch(%x: tensor<8x4xf32>, %d: tensor<8x3xf32>) {
    %gw = nn.gemm %x, %d {transA = true} : (tensor<8x4xf32>, tensor<8x3xf32>) -> tensor<4x3xf32>
    pipe.accumulate_grad %gw to @w {in_place} : tensor<4x3xf32>
    return
  }
}
