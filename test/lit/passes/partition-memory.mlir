// gpipe-partition with a memory budget: only cuts whose every stage's
// estimated memory fits (parameters with gradients and optimizer state,
// plus the stash times the stage's in-flight micro-batches). Four tanh of
// 8x1024 floats (32 KiB each), stage 0 keeping 8 micro-batches in flight
// and stage 1 one (as 1F1B would at K = 2, M = 8).
// Without a budget the costs balance 2 | 2 (+ the loss).
// RUN: gpipe-opt %s --gpipe-partition="stages=2" | FileCheck %s --check-prefix=FREE
// With remat none, stage 0's estimate for 2 | 2 is 8 x (x + 2 results) =
// 8 x 96 KiB = 786432 bytes: it fits 800000 ...
// RUN: gpipe-opt %s --gpipe-partition="stages=2 memory-per-stage=800000 in-flight=8,1 remat=none" | FileCheck %s --check-prefix=FREE
// ... but not 600000, where the cut moves to 1 | 3 (8 x 64 KiB = 524288):
// RUN: gpipe-opt %s --gpipe-partition="stages=2 memory-per-stage=600000 in-flight=8,1 remat=none" | FileCheck %s --check-prefix=TIGHT
// ... and nothing fits 400000: the error names the least any cut needs.
// RUN: not gpipe-opt %s --gpipe-partition="stages=2 memory-per-stage=400000 in-flight=8,1 remat=none" 2>&1 | FileCheck %s --check-prefix=NONE
// With remat stage a stage stashes only what it reads from before it (x:
// 8 x 32 KiB), so 2 | 2 fits 300000.
// RUN: gpipe-opt %s --gpipe-partition="stages=2 memory-per-stage=300000 in-flight=8,1 remat=stage" | FileCheck %s --check-prefix=FREE

// FREE: nn.tanh {{.+}} {pipe.stage = 0 : i64}
// FREE-NEXT: nn.tanh {{.+}} {pipe.stage = 0 : i64}
// FREE-NEXT: nn.tanh {{.+}} {pipe.stage = 1 : i64}
// FREE-NEXT: nn.tanh {{.+}} {pipe.stage = 1 : i64}
// FREE-NEXT: nn.softmax_cross_entropy {{.+}} {pipe.stage = 1 : i64}
// TIGHT: nn.tanh {{.+}} {pipe.stage = 0 : i64}
// TIGHT-NEXT: nn.tanh {{.+}} {pipe.stage = 1 : i64}
// TIGHT-NEXT: nn.tanh {{.+}} {pipe.stage = 1 : i64}
// TIGHT-NEXT: nn.tanh {{.+}} {pipe.stage = 1 : i64}
// NONE: error: no partition into 2 stages fits --memory-per-stage 400000 bytes: the smallest estimate of a partition's fullest stage is 524288 bytes (raise the budget, add stages, or use --remat stage)
func.func @chain(%x: tensor<8x1024xf32>, %labels: tensor<8xi64>) -> (tensor<f32> {nn.loss}) {
  %a = nn.tanh %x : tensor<8x1024xf32>
  %b = nn.tanh %a : tensor<8x1024xf32>
  %c = nn.tanh %b : tensor<8x1024xf32>
  %d = nn.tanh %c : tensor<8x1024xf32>
  %loss = nn.softmax_cross_entropy %d, %labels : tensor<8x1024xf32>, tensor<8xi64>
  return %loss : tensor<f32>
}
