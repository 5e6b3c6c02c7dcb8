// gpipe-remat mode=segments costs=TABLE: which stash value to recompute is
// ranked by the table's measured forward seconds instead of the analytic
// model's. The stash below holds x (a graph input, kept), p = tanh(x),
// q = sigmoid(x), s = p * q (1024 bytes each), y and the labels: 4288 bytes
// per micro-batch; under 3300 one of p, q, s is recomputed, each saving 1024
// bytes. The analytic model finds the tanh cheapest and recomputes p; the
// table (costs-remat.jsonl) measured the tanh and the sigmoid at 100 times
// the multiplication, so s is recomputed instead (from the kept p and q).
// RUN: gpipe-opt %s --gpipe-remat="mode=segments stash-bytes=3300" | FileCheck %s --check-prefix=ANALYTIC
// RUN: gpipe-opt %s --gpipe-remat="mode=segments stash-bytes=3300 costs=%S/../Inputs/costs-remat.jsonl" | FileCheck %s --check-prefix=MEASURED
// RUN: not gpipe-opt %s --gpipe-remat="mode=segments stash-bytes=3300 costs=%t.missing.jsonl" 2>&1 | FileCheck %s --check-prefix=MISSING

// ANALYTIC-LABEL: func.func @stage0_backward(
// ANALYTIC-NEXT: pipe.remat
// ANALYTIC-NEXT: ^bb0
// ANALYTIC-NEXT: nn.tanh
// ANALYTIC-NEXT: pipe.yield

// MEASURED-LABEL: func.func @stage0_backward(
// MEASURED-NEXT: pipe.remat
// MEASURED-NEXT: ^bb0
// MEASURED-NEXT: nn.mul
// MEASURED-NEXT: pipe.yield

// MISSING: error: cost table: {{.*}}missing.jsonl

module attributes {pipe.batch_size = 16 : i64, pipe.microbatches = 2 : i64, pipe.stages = 1 : i64} {
  nn.parameter @w : tensor<32x4xf32>
  func.func @stage0_forward(%x: tensor<8x32xf32> {nn.input = "x"}, %labels: tensor<8xi64> {nn.input = "labels"}) -> (tensor<8x32xf32>, tensor<8x32xf32>, tensor<8x32xf32>, tensor<8x32xf32>, tensor<8x4xf32>, tensor<8xi64>) attributes {pipe.phase = "forward", pipe.stage = 0 : i64} {
    %p = nn.tanh %x : tensor<8x32xf32> loc("/p/Tanh")
    %q = nn.sigmoid %x : tensor<8x32xf32> loc("/q/Sigmoid")
    %s = nn.mul %p, %q : tensor<8x32xf32>, tensor<8x32xf32> -> tensor<8x32xf32> loc("/s/Mul")
    %w = nn.param @w : tensor<32x4xf32>
    %y = nn.gemm %s, %w : (tensor<8x32xf32>, tensor<32x4xf32>) -> tensor<8x4xf32>
    %loss = nn.softmax_cross_entropy %y, %labels {microbatches = 2 : i64} : tensor<8x4xf32>, tensor<8xi64>
    pipe.report_loss %loss : tensor<f32>
    return %x, %p, %q, %s, %y, %labels : tensor<8x32xf32>, tensor<8x32xf32>, tensor<8x32xf32>, tensor<8x32xf32>, tensor<8x4xf32>, tensor<8xi64>
  }
  func.func @stage0_backward(%x: tensor<8x32xf32>, %p: tensor<8x32xf32>, %q: tensor<8x32xf32>, %s: tensor<8x32xf32>, %y: tensor<8x4xf32>, %labels: tensor<8xi64>) attributes {pipe.phase = "backward", pipe.stage = 0 : i64} {
    %one = nn.constant dense<1.000000e+00> : tensor<f32>
    %dy = nn.softmax_cross_entropy_grad %y, %labels, %one {microbatches = 2 : i64} : tensor<8x4xf32>, tensor<8xi64>
    %dw = nn.gemm %s, %dy {transA = true} : (tensor<8x32xf32>, tensor<8x4xf32>) -> tensor<32x4xf32>
    pipe.accumulate_grad %dw to @w : tensor<32x4xf32>
    %t = nn.add %p, %q : tensor<8x32xf32>, tensor<8x32xf32> -> tensor<8x32xf32>
    %u = nn.add %t, %x : tensor<8x32xf32>, tensor<8x32xf32> -> tensor<8x32xf32>
    return
  }
  func.func @stage0_update() attributes {pipe.phase = "update", pipe.stage = 0 : i64} {
    %g = pipe.accumulated_grad @w : tensor<32x4xf32>
    %w = nn.param @w : tensor<32x4xf32>
    pipe.sgd_update %w, %g {lr = 1.000000e-02 : f64, momentum = 0.000000e+00 : f64, nesterov = false, weight_decay = 0.000000e+00 : f64} : tensor<32x4xf32>
    return
  }
}
