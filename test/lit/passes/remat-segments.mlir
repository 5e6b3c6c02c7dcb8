// gpipe-remat mode=segments: per piece, a stash budget in bytes per
// micro-batch (stash-bytes, -1: none). On remat.mlir's first module (below):
// - stage 0 keeps scale (32 bytes), tanh's output t (1536) and x (1024):
//   2592 bytes over a budget of 2000. It stops keeping t, so its stash is the
//   graph inputs it reads (1056 bytes), and its backward recomputes the GEMM
//   and the tanh in a pipe.remat region.
// - stage 1 (-1) keeps its stash as it is.
// - stage 2 keeps y (128 bytes), labels (64), e (1536) and scale (32): 1760
//   over 1700. Recomputing everything from its boundary inputs would stash
//   more (b and c, 1536 each), so it keeps e and recomputes only y's GEMM.
// A budget nothing fits (0) recomputes the whole forward, as mode=stage.
// RUN: gpipe-opt %s --gpipe-remat="mode=segments stash-bytes=2000,-1,1700" | FileCheck %s
// RUN: gpipe-opt %s --gpipe-remat="mode=segments stash-bytes=0,-1,-1" | FileCheck %s --check-prefix=ALL
// RUN: gpipe-opt %s --gpipe-remat="mode=segments stash-bytes=-1,-1,-1" | FileCheck %s --check-prefix=KEEP
// RUN: not gpipe-opt %s --gpipe-remat="mode=segments stash-bytes=1,2" 2>&1 | FileCheck %s --check-prefix=COUNT
// RUN: not gpipe-opt %s --gpipe-remat="mode=segments stages=0 stash-bytes=1,2,3" 2>&1 | FileCheck %s --check-prefix=STAGES

// CHECK-LABEL: module attributes {pipe.batch_size = 16 : i64, pipe.microbatches = 2 : i64, pipe.remat = "stage", pipe.stages = 3 : i64}
// CHECK-LABEL: func.func @stage0_forward(
// CHECK-SAME: -> (tensor<8x32xf32>, tensor<8x1xf32>)
// CHECK-LABEL: func.func @stage0_backward(
// CHECK-NEXT: pipe.remat
// CHECK: nn.gemm
// CHECK-NEXT: nn.tanh
// CHECK-LABEL: func.func @stage1_forward() -> tensor<8x48xf32>
// CHECK-LABEL: func.func @stage1_backward(
// CHECK-NOT: pipe.remat
// CHECK-LABEL: func.func @stage2_forward(
// CHECK-SAME: -> (tensor<8x48xf32>, tensor<8xi64>, tensor<8x1xf32>)
// CHECK-LABEL: func.func @stage2_backward(
// CHECK-NEXT: pipe.remat
// CHECK-NOT: nn.add
// CHECK: nn.gemm
// CHECK-NOT: nn.add
// CHECK: pipe.yield

// ALL-LABEL: func.func @stage0_forward(
// ALL-SAME: -> (tensor<8x32xf32>, tensor<8x1xf32>)
// ALL-LABEL: func.func @stage2_forward(
// ALL-SAME: -> (tensor<8x4xf32>, tensor<8xi64>, tensor<8x48xf32>, tensor<8x1xf32>)
// ALL-LABEL: func.func @stage2_backward(
// ALL-NOT: pipe.remat
// ALL-LABEL: func.func @stage2_update()

// KEEP-NOT: pipe.remat
// KEEP-LABEL: func.func @stage0_forward(
// KEEP-SAME: -> (tensor<8x1xf32>, tensor<8x48xf32>, tensor<8x32xf32>)
// KEEP-NOT: pipe.remat

// COUNT: error: remat mode=segments needs stash-bytes= with one entry per piece (3), got 2
// STAGES: error: remat stages= goes with mode=stage; mode=segments takes stash-bytes= (one per piece)

module attributes {pipe.batch_size = 16 : i64, pipe.microbatches = 2 : i64, pipe.stages = 3 : i64} {
  nn.parameter @w0 : tensor<32x48xf32>
  nn.parameter @w1 : tensor<48x48xf32>
  nn.parameter @w2 : tensor<48x4xf32>
  func.func @stage0_forward(%x: tensor<8x32xf32> {nn.input = "x"}, %scale: tensor<8x1xf32> {nn.input = "scale"}) -> (tensor<8x1xf32>, tensor<8x48xf32>, tensor<8x32xf32>) attributes {pipe.phase = "forward", pipe.stage = 0 : i64} {
    %w0 = nn.param @w0 : tensor<32x48xf32>
    %a = nn.gemm %x, %w0 : (tensor<8x32xf32>, tensor<32x48xf32>) -> tensor<8x48xf32>
    %t = nn.tanh %a : tensor<8x48xf32>
    %b = nn.mul %t, %scale : tensor<8x48xf32>, tensor<8x1xf32> -> tensor<8x48xf32>
    pipe.send %a to 1 tag 0 : tensor<8x48xf32>
    pipe.send %b to 2 tag 2 : tensor<8x48xf32>
    pipe.send %scale to 2 tag 3 : tensor<8x1xf32>
    return %scale, %t, %x : tensor<8x1xf32>, tensor<8x48xf32>, tensor<8x32xf32>
  }
  func.func @stage0_backward(%scale: tensor<8x1xf32>, %t: tensor<8x48xf32>, %x: tensor<8x32xf32>) attributes {pipe.phase = "backward", pipe.stage = 0 : i64} {
    %db = pipe.recv from 2 tag 5 : tensor<8x48xf32>
    %da1 = pipe.recv from 1 tag 6 : tensor<8x48xf32>
    %dt = nn.mul %db, %scale : tensor<8x48xf32>, tensor<8x1xf32> -> tensor<8x48xf32>
    %da2 = nn.tanh_grad %t, %dt : tensor<8x48xf32>
    %da = nn.add %da1, %da2 : tensor<8x48xf32>, tensor<8x48xf32> -> tensor<8x48xf32>
    %dw0 = nn.gemm %x, %da {transA = true} : (tensor<8x32xf32>, tensor<8x48xf32>) -> tensor<32x48xf32>
    pipe.accumulate_grad %dw0 to @w0 : tensor<32x48xf32>
    return
  }
  func.func @stage0_update() attributes {pipe.phase = "update", pipe.stage = 0 : i64} {
    %g = pipe.accumulated_grad @w0 : tensor<32x48xf32>
    %w0 = nn.param @w0 : tensor<32x48xf32>
    pipe.sgd_update %w0, %g {lr = 1.000000e-02 : f64, momentum = 0.000000e+00 : f64, nesterov = false, weight_decay = 0.000000e+00 : f64} : tensor<32x48xf32>
    return
  }
  func.func @stage1_forward() -> tensor<8x48xf32> attributes {pipe.phase = "forward", pipe.stage = 1 : i64} {
    %a = pipe.recv from 0 tag 0 : tensor<8x48xf32>
    %w1 = nn.param @w1 : tensor<48x48xf32>
    %c = nn.gemm %a, %w1 : (tensor<8x48xf32>, tensor<48x48xf32>) -> tensor<8x48xf32>
    pipe.send %c to 2 tag 1 : tensor<8x48xf32>
    return %a : tensor<8x48xf32>
  }
  func.func @stage1_backward(%a: tensor<8x48xf32>) attributes {pipe.phase = "backward", pipe.stage = 1 : i64} {
    %dc = pipe.recv from 2 tag 4 : tensor<8x48xf32>
    %w1 = nn.param @w1 : tensor<48x48xf32>
    %da = nn.gemm %dc, %w1 {transB = true} : (tensor<8x48xf32>, tensor<48x48xf32>) -> tensor<8x48xf32>
    %dw1 = nn.gemm %a, %dc {transA = true} : (tensor<8x48xf32>, tensor<8x48xf32>) -> tensor<48x48xf32>
    pipe.accumulate_grad %dw1 to @w1 : tensor<48x48xf32>
    pipe.send %da to 0 tag 6 : tensor<8x48xf32>
    return
  }
  func.func @stage1_update() attributes {pipe.phase = "update", pipe.stage = 1 : i64} {
    %g = pipe.accumulated_grad @w1 : tensor<48x48xf32>
    %w1 = nn.param @w1 : tensor<48x48xf32>
    pipe.sgd_update %w1, %g {lr = 1.000000e-02 : f64, momentum = 0.000000e+00 : f64, nesterov = false, weight_decay = 0.000000e+00 : f64} : tensor<48x48xf32>
    return
  }
  func.func @stage2_forward(%labels: tensor<8xi64> {nn.input = "labels"}) -> (tensor<8x4xf32>, tensor<8xi64>, tensor<8x48xf32>, tensor<8x1xf32>) attributes {pipe.phase = "forward", pipe.stage = 2 : i64} {
    %b = pipe.recv from 0 tag 2 : tensor<8x48xf32>
    %scale = pipe.recv from 0 tag 3 : tensor<8x1xf32>
    %c = pipe.recv from 1 tag 1 : tensor<8x48xf32>
    %d = nn.add %c, %b : tensor<8x48xf32>, tensor<8x48xf32> -> tensor<8x48xf32>
    %e = nn.mul %d, %scale : tensor<8x48xf32>, tensor<8x1xf32> -> tensor<8x48xf32>
    %w2 = nn.param @w2 : tensor<48x4xf32>
    %y = nn.gemm %e, %w2 : (tensor<8x48xf32>, tensor<48x4xf32>) -> tensor<8x4xf32>
    %loss = nn.softmax_cross_entropy %y, %labels {microbatches = 2 : i64} : tensor<8x4xf32>, tensor<8xi64>
    pipe.report_loss %loss : tensor<f32>
    return %y, %labels, %e, %scale : tensor<8x4xf32>, tensor<8xi64>, tensor<8x48xf32>, tensor<8x1xf32>
  }
  func.func @stage2_backward(%y: tensor<8x4xf32>, %labels: tensor<8xi64>, %e: tensor<8x48xf32>, %scale: tensor<8x1xf32>) attributes {pipe.phase = "backward", pipe.stage = 2 : i64} {
    %one = nn.constant dense<1.000000e+00> : tensor<f32>
    %dy = nn.softmax_cross_entropy_grad %y, %labels, %one {microbatches = 2 : i64} : tensor<8x4xf32>, tensor<8xi64>
    %w2 = nn.param @w2 : tensor<48x4xf32>
    %de = nn.gemm %dy, %w2 {transB = true} : (tensor<8x4xf32>, tensor<48x4xf32>) -> tensor<8x48xf32>
    %dw2 = nn.gemm %e, %dy {transA = true} : (tensor<8x48xf32>, tensor<8x4xf32>) -> tensor<48x4xf32>
    pipe.accumulate_grad %dw2 to @w2 : tensor<48x4xf32>
    %dd = nn.mul %de, %scale : tensor<8x48xf32>, tensor<8x1xf32> -> tensor<8x48xf32>
    pipe.send %dd to 1 tag 4 : tensor<8x48xf32>
    pipe.send %dd to 0 tag 5 : tensor<8x48xf32>
    return
  }
  func.func @stage2_update() attributes {pipe.phase = "update", pipe.stage = 2 : i64} {
    %g = pipe.accumulated_grad @w2 : tensor<48x4xf32>
    %w2 = nn.param @w2 : tensor<48x4xf32>
    pipe.sgd_update %w2, %g {lr = 1.000000e-02 : f64, momentum = 0.000000e+00 : f64, nesterov = false, weight_decay = 0.000000e+00 : f64} : tensor<48x4xf32>
    return
  }
}
