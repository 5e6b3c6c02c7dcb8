// gpipe-accumulate-in-place: a pipe.accumulate_grad whose gradient is an
// nn.gemm without C, read by nothing else, is marked in_place (the GEMM adds
// into the accumulator); with one micro-batch, the parameter's only such
// contribution is also marked overwrite (the GEMM writes the accumulator).
// Other accumulations are left alone.
// RUN: gpipe-opt %s --split-input-file --gpipe-accumulate-in-place | FileCheck %s

// M = 1: w's one GEMM overwrites; v has two contributions (in_place, no
// overwrite); b's gradient is not a GEMM; u's GEMM has another reader.
// CHECK-LABEL: func.func @one_microbatch(
// CHECK: pipe.accumulate_grad %[[GW:.+]] to @w {in_place, overwrite}
// CHECK: pipe.accumulate_grad %{{.+}} to @v {in_place} :
// CHECK: pipe.accumulate_grad %{{.+}} to @v {in_place} :
// CHECK: pipe.accumulate_grad %{{.+}} to @b :
// CHECK: pipe.accumulate_grad %{{.+}} to @u :
module attributes {pipe.microbatches = 1 : i64} {
  nn.parameter @w : tensor<4x3xf32>
  nn.parameter @v : tensor<4x3xf32>
  nn.parameter @b : tensor<3xf32>
  nn.parameter @u : tensor<4x3xf32>
  func.func @one_microbatch(%x: tensor<8x4xf32>, %d: tensor<8x3xf32>, %e: tensor<3xf32>) -> tensor<4x3xf32> {
    %gw = nn.gemm %x, %d {transA = true} : (tensor<8x4xf32>, tensor<8x3xf32>) -> tensor<4x3xf32>
    pipe.accumulate_grad %gw to @w : tensor<4x3xf32>
    %gv1 = nn.gemm %x, %d {transA = true} : (tensor<8x4xf32>, tensor<8x3xf32>) -> tensor<4x3xf32>
    pipe.accumulate_grad %gv1 to @v : tensor<4x3xf32>
    %gv2 = nn.gemm %x, %d {transA = true} : (tensor<8x4xf32>, tensor<8x3xf32>) -> tensor<4x3xf32>
    pipe.accumulate_grad %gv2 to @v : tensor<4x3xf32>
    pipe.accumulate_grad %e to @b : tensor<3xf32>
    %gu = nn.gemm %x, %d {transA = true} : (tensor<8x4xf32>, tensor<8x3xf32>) -> tensor<4x3xf32>
    pipe.accumulate_grad %gu to @u : tensor<4x3xf32>
    return %gu : tensor<4x3xf32>
  }
}

// -----

// M = 4: in place, never overwrite (the micro-batches add up).
// CHECK-LABEL: func.func @four_microbatches(
// CHECK: pipe.accumulate_grad %{{.+}} to @w {in_place} :
module attributes {pipe.microbatches = 4 : i64} {
  nn.parameter @w : tensor<4x3xf32>
  func.func @four_microbatches(%x: tensor<2x4xf32>, %d: tensor<2x3xf32>) {
    %gw = nn.gemm %x, %d {transA = true} : (tensor<2x4xf32>, tensor<2x3xf32>) -> tensor<4x3xf32>
    pipe.accumulate_grad %gw to @w : tensor<4x3xf32>
    return
  }
}
