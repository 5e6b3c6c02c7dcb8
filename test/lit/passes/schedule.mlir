// gpipe-schedule: one pipe.schedule per stage, in stage order, naming the
// stage's outlined functions; GPipe's actions: F0..F(M-1), then B(M-1)..B0,
// then U, with M the module's pipe.microbatches (1 if absent), and M stash
// slots; the module gets pipe.schedule = "gpipe" and pipe.sends =
// "blocking". The schedules it builds pass gpipe-check-schedule.
// 1F1B (schedule=1f1b): stage s runs K-1-s warm-up forwards, then one
// forward and one backward in turn, then the remaining backwards; its stash
// has min(K-s, M) slots, and the module needs buffered sends.
// RUN: gpipe-opt %s --split-input-file --gpipe-schedule | FileCheck %s
// RUN: gpipe-opt %s --split-input-file --gpipe-schedule=schedule=1f1b | FileCheck %s --check-prefix=ONEF
// RUN: gpipe-opt %s --split-input-file --gpipe-schedule=schedule=1f1b | gpipe-opt --split-input-file --gpipe-check-schedule | FileCheck %s --check-prefix=ONEF
// RUN: gpipe-opt %s --split-input-file --gpipe-schedule=schedule=gpipe | gpipe-opt --split-input-file --gpipe-check-schedule | FileCheck %s
// ZB-H1 (schedule=zbh1): 1F1B's order and stash (min(K-s, M) slots), the
// backward split into B and W; each W as soon as the stage would wait, the
// rest before the update.
// RUN: gpipe-opt %s --split-input-file --gpipe-schedule=schedule=zbh1 | gpipe-opt --split-input-file --gpipe-check-schedule | FileCheck %s --check-prefix=ZB
// ZB-H2 (schedule=zbh2): ZB-H1's preferences with min(2(K-s)-1, M) stash
// slots (4, 3, 1 here: stage 0 runs all four forwards before its first B).
// At K = 2, M = 8 (below, the example MLP) stage 0 runs its six owed W's as
// one run once its forwards are done and it would wait (one call), and its
// last two after its last B.
// RUN: gpipe-opt %s --split-input-file --gpipe-schedule=schedule=zbh2 | gpipe-opt --split-input-file --gpipe-check-schedule | FileCheck %s --check-prefix=ZB2
// RUN: gpipe-compile %examples/mlp.onnx --emit mlir -o - --stages 2 --microbatches 8 --schedule zbh2 | gpipe-opt --gpipe-check-schedule | FileCheck %s --check-prefix=ZB2M8
// ZB2M8: pipe.schedule stage 0 forward @stage0_forward backward @stage0_backward update @stage0_update actions [#pipe.action<forward, mb = 0>, #pipe.action<forward, mb = 1>, #pipe.action<forward, mb = 2>, #pipe.action<backward, mb = 0>, #pipe.action<forward, mb = 3>, #pipe.action<backward, mb = 1>, #pipe.action<forward, mb = 4>, #pipe.action<backward, mb = 2>, #pipe.action<forward, mb = 5>, #pipe.action<backward, mb = 3>, #pipe.action<forward, mb = 6>, #pipe.action<backward, mb = 4>, #pipe.action<forward, mb = 7>, #pipe.action<backward, mb = 5>, #pipe.action<flush>, #pipe.action<weight, mb = 0>, #pipe.action<weight, mb = 1>, #pipe.action<weight, mb = 2>, #pipe.action<weight, mb = 3>, #pipe.action<weight, mb = 4>, #pipe.action<weight, mb = 5>, #pipe.action<backward, mb = 6>, #pipe.action<backward, mb = 7>, #pipe.action<weight, mb = 6>, #pipe.action<weight, mb = 7>, #pipe.action<update>] stash_slots 3{{$}}
// ZB2M8-NEXT: pipe.schedule stage 1 forward @stage1_forward backward @stage1_backward update @stage1_update actions [#pipe.action<forward, mb = 0>, #pipe.action<backward, mb = 0>, #pipe.action<forward, mb = 1>, #pipe.action<backward, mb = 1>, #pipe.action<forward, mb = 2>, #pipe.action<backward, mb = 2>, #pipe.action<forward, mb = 3>, #pipe.action<backward, mb = 3>, #pipe.action<forward, mb = 4>, #pipe.action<backward, mb = 4>, #pipe.action<forward, mb = 5>, #pipe.action<backward, mb = 5>, #pipe.action<forward, mb = 6>, #pipe.action<backward, mb = 6>, #pipe.action<forward, mb = 7>, #pipe.action<backward, mb = 7>, #pipe.action<flush>, #pipe.action<weight, mb = 0>, #pipe.action<weight, mb = 1>, #pipe.action<weight, mb = 2>, #pipe.action<weight, mb = 3>, #pipe.action<weight, mb = 4>, #pipe.action<weight, mb = 5>, #pipe.action<weight, mb = 6>, #pipe.action<weight, mb = 7>, #pipe.action<update>] stash_slots 1{{$}}
// The driver's whole pipeline on the example MLP, K = 3, M = 4 and M = 1:
// RUN: gpipe-compile %examples/mlp.onnx --emit mlir -o - --stages 3 --microbatches 4 | FileCheck %s --check-prefix=M4
// RUN: gpipe-compile %examples/mlp.onnx --emit mlir -o - --stages 3 --microbatches 1 --remat none | FileCheck %s --check-prefix=M1
// Interleaved (K = 2, V = 2, M = 4): four pieces, stage s holding pieces s
// and s+2 as its chunks 0 and 1; the micro-batches in groups of K, chunk 0's
// forwards then chunk 1's, backwards chunk 1 first; stage s starts with
// (K-1-s)*2 + (V-1)*K warm-up forwards.
// RUN: gpipe-compile %examples/mlp.onnx --emit mlir -o - --stages 2 --microbatches 4 --schedule interleaved --virtual-stages 2 | FileCheck %s --check-prefix=IL
// IL: module attributes {pipe.batch_size = 32 : i64, pipe.microbatches = 4 : i64, pipe.remat = "stage", pipe.schedule = "interleaved", pipe.sends = "buffered", pipe.stages = 4 : i64}
// IL: pipe.schedule stage 0 forward [@stage0_forward, @stage2_forward] backward [@stage0_backward, @stage2_backward] update [@stage0_update, @stage2_update] actions [#pipe.action<forward, mb = 0>, #pipe.action<forward, mb = 1>, #pipe.action<forward, mb = 0, chunk = 1>, #pipe.action<forward, mb = 1, chunk = 1>, #pipe.action<forward, mb = 2>, #pipe.action<backward, mb = 0, chunk = 1>, #pipe.action<forward, mb = 3>, #pipe.action<backward, mb = 1, chunk = 1>, #pipe.action<forward, mb = 2, chunk = 1>, #pipe.action<backward, mb = 0>, #pipe.action<forward, mb = 3, chunk = 1>, #pipe.action<backward, mb = 1>, #pipe.action<backward, mb = 2, chunk = 1>, #pipe.action<backward, mb = 3, chunk = 1>, #pipe.action<backward, mb = 2>, #pipe.action<backward, mb = 3>, #pipe.action<update>] stash_slots 4
// IL-NEXT: pipe.schedule stage 1 forward [@stage1_forward, @stage3_forward] backward [@stage1_backward, @stage3_backward] update [@stage1_update, @stage3_update] actions [#pipe.action<forward, mb = 0>, #pipe.action<forward, mb = 1>, #pipe.action<forward, mb = 0, chunk = 1>, #pipe.action<backward, mb = 0, chunk = 1>, #pipe.action<forward, mb = 1, chunk = 1>, #pipe.action<backward, mb = 1, chunk = 1>, #pipe.action<forward, mb = 2>, #pipe.action<backward, mb = 0>, #pipe.action<forward, mb = 3>, #pipe.action<backward, mb = 1>, #pipe.action<forward, mb = 2, chunk = 1>, #pipe.action<backward, mb = 2, chunk = 1>, #pipe.action<forward, mb = 3, chunk = 1>, #pipe.action<backward, mb = 3, chunk = 1>, #pipe.action<backward, mb = 2>, #pipe.action<backward, mb = 3>, #pipe.action<update>] stash_slots 3
// IL-NEXT: }
// Breadth-first (K = 2, M = 4, V = 2): interleaved's placement, GPipe's
// order chunk by chunk; every micro-batch of each chunk in flight.
// RUN: gpipe-compile %examples/mlp.onnx --emit mlir -o - --stages 2 --microbatches 4 --schedule bfpp --virtual-stages 2 | gpipe-opt --gpipe-check-schedule | FileCheck %s --check-prefix=BFPP
// BFPP: pipe.sends = "buffered"
// BFPP: pipe.schedule stage 0 forward [@stage0_forward, @stage2_forward] backward [@stage0_backward, @stage2_backward] update [@stage0_update, @stage2_update] actions [#pipe.action<forward, mb = 0>, #pipe.action<forward, mb = 1>, #pipe.action<forward, mb = 2>, #pipe.action<forward, mb = 3>, #pipe.action<forward, mb = 0, chunk = 1>, #pipe.action<forward, mb = 1, chunk = 1>, #pipe.action<forward, mb = 2, chunk = 1>, #pipe.action<forward, mb = 3, chunk = 1>, #pipe.action<backward, mb = 3, chunk = 1>, #pipe.action<backward, mb = 2, chunk = 1>, #pipe.action<backward, mb = 1, chunk = 1>, #pipe.action<backward, mb = 0, chunk = 1>, #pipe.action<backward, mb = 3>, #pipe.action<backward, mb = 2>, #pipe.action<backward, mb = 1>, #pipe.action<backward, mb = 0>, #pipe.action<update>] stash_slots 4
// BFPP-NEXT: pipe.schedule stage 1 forward [@stage1_forward, @stage3_forward]

// ZB-V (K = 2, M = 4): four pieces in a V, stage 0 holding pieces 0 and 3
// (the first and the loss), stage 1 pieces 1 and 2; B and W split as ZB-H1,
// every (chunk, micro-batch) with its W after its B; each run of W's chunk by
// chunk (so that the step loop merges a chunk's consecutive W's into one
// call); gpipe-flush-sends's flush (wait for the stage's sends) before runs
// of W actions.
// RUN: gpipe-compile %examples/mlp.onnx --emit mlir -o - --stages 2 --microbatches 4 --schedule zbv --virtual-stages 2 | gpipe-opt --gpipe-check-schedule | FileCheck %s --check-prefix=ZBV
// ZBV: module attributes {pipe.batch_size = 32 : i64, pipe.microbatches = 4 : i64, pipe.remat = "stage", pipe.schedule = "zbv", pipe.sends = "buffered", pipe.stages = 4 : i64}
// ZBV: pipe.schedule stage 0 forward [@stage0_forward, @stage3_forward] backward [@stage0_backward, @stage3_backward] update [@stage0_update, @stage3_update] actions [#pipe.action<forward, mb = 0>, #pipe.action<forward, mb = 1>, #pipe.action<forward, mb = 2>, #pipe.action<forward, mb = 0, chunk = 1>, #pipe.action<backward, mb = 0, chunk = 1>, #pipe.action<forward, mb = 1, chunk = 1>, #pipe.action<backward, mb = 1, chunk = 1>, #pipe.action<backward, mb = 0>, #pipe.action<forward, mb = 3>, #pipe.action<backward, mb = 1>, #pipe.action<flush>, #pipe.action<weight, mb = 0, chunk = 1>,
// ZBV-SAME: #pipe.action<backward, mb = 3>, #pipe.action<weight, mb = 0>, #pipe.action<weight, mb = 1>, #pipe.action<weight, mb = 2>, #pipe.action<weight, mb = 3>, #pipe.action<weight, mb = 2, chunk = 1>, #pipe.action<weight, mb = 3, chunk = 1>, #pipe.action<update>] stash_slots 3
// ZBV-NEXT: pipe.schedule stage 1 forward [@stage1_forward, @stage2_forward] backward [@stage1_backward, @stage2_backward] update [@stage1_update, @stage2_update] actions [#pipe.action<forward, mb = 0>, #pipe.action<forward, mb = 0, chunk = 1>, #pipe.action<forward, mb = 1>, #pipe.action<forward, mb = 1, chunk = 1>, #pipe.action<backward, mb = 0, chunk = 1>, #pipe.action<backward, mb = 0>,
// ZBV-SAME: #pipe.action<backward, mb = 3>, #pipe.action<flush>, #pipe.action<weight, mb = 0>, #pipe.action<weight, mb = 1>, #pipe.action<weight, mb = 2>, #pipe.action<weight, mb = 3>, #pipe.action<weight, mb = 0, chunk = 1>, #pipe.action<weight, mb = 1, chunk = 1>, #pipe.action<weight, mb = 2, chunk = 1>, #pipe.action<weight, mb = 3, chunk = 1>, #pipe.action<update>] stash_slots 2

// M4: module attributes {pipe.batch_size = 32 : i64, pipe.microbatches = 4 : i64, pipe.remat = "stage", pipe.schedule = "gpipe", pipe.sends = "blocking", pipe.stages = 3 : i64}
// M4: pipe.schedule stage 0 forward @stage0_forward backward @stage0_backward update @stage0_update actions [#pipe.action<forward, mb = 0>, #pipe.action<forward, mb = 1>, #pipe.action<forward, mb = 2>, #pipe.action<forward, mb = 3>, #pipe.action<backward, mb = 3>, #pipe.action<backward, mb = 2>, #pipe.action<backward, mb = 1>, #pipe.action<backward, mb = 0>, #pipe.action<update>]
// M4-NEXT: pipe.schedule stage 1 forward @stage1_forward backward @stage1_backward update @stage1_update actions [#pipe.action<forward, mb = 0>, #pipe.action<forward, mb = 1>, #pipe.action<forward, mb = 2>, #pipe.action<forward, mb = 3>, #pipe.action<backward, mb = 3>, #pipe.action<backward, mb = 2>, #pipe.action<backward, mb = 1>, #pipe.action<backward, mb = 0>, #pipe.action<update>]
// M4-NEXT: pipe.schedule stage 2 forward @stage2_forward backward @stage2_backward update @stage2_update actions [#pipe.action<forward, mb = 0>, #pipe.action<forward, mb = 1>, #pipe.action<forward, mb = 2>, #pipe.action<forward, mb = 3>, #pipe.action<backward, mb = 3>, #pipe.action<backward, mb = 2>, #pipe.action<backward, mb = 1>, #pipe.action<backward, mb = 0>, #pipe.action<update>]
// M4-NEXT: }
// M1: module attributes {pipe.batch_size = 32 : i64, pipe.microbatches = 1 : i64, pipe.schedule = "gpipe", pipe.sends = "blocking", pipe.stages = 3 : i64}
// M1: pipe.schedule stage 0 forward @stage0_forward backward @stage0_backward update @stage0_update actions [#pipe.action<forward, mb = 0>, #pipe.action<backward, mb = 0>, #pipe.action<update>]
// M1-NEXT: pipe.schedule stage 1 forward @stage1_forward backward @stage1_backward update @stage1_update actions [#pipe.action<forward, mb = 0>, #pipe.action<backward, mb = 0>, #pipe.action<update>]
// M1-NEXT: pipe.schedule stage 2 forward @stage2_forward backward @stage2_backward update @stage2_update actions [#pipe.action<forward, mb = 0>, #pipe.action<backward, mb = 0>, #pipe.action<update>]
// M1-NEXT: }

// Three stages, M = 4, with transfers in both directions and a skip
// (0 -> 2 forward, 2 -> 0 backward), in the order gpipe-outline-stages emits
// them.
// CHECK-LABEL: module attributes {pipe.microbatches = 4 : i64, pipe.schedule = "gpipe", pipe.sends = "blocking", pipe.stages = 3 : i64}
// CHECK: func.func @s2_u()
// CHECK-NEXT: return
// CHECK-NEXT: }
// CHECK-NEXT: pipe.schedule stage 0 forward @s0_f backward @s0_b update @s0_u actions [#pipe.action<forward, mb = 0>, #pipe.action<forward, mb = 1>, #pipe.action<forward, mb = 2>, #pipe.action<forward, mb = 3>, #pipe.action<backward, mb = 3>, #pipe.action<backward, mb = 2>, #pipe.action<backward, mb = 1>, #pipe.action<backward, mb = 0>, #pipe.action<update>] stash_slots 4{{$}}
// CHECK-NEXT: pipe.schedule stage 1 forward @s1_f backward @s1_b update @s1_u actions [#pipe.action<forward, mb = 0>, #pipe.action<forward, mb = 1>, #pipe.action<forward, mb = 2>, #pipe.action<forward, mb = 3>, #pipe.action<backward, mb = 3>, #pipe.action<backward, mb = 2>, #pipe.action<backward, mb = 1>, #pipe.action<backward, mb = 0>, #pipe.action<update>] stash_slots 4{{$}}
// CHECK-NEXT: pipe.schedule stage 2 forward @s2_f backward @s2_b update @s2_u actions [#pipe.action<forward, mb = 0>, #pipe.action<forward, mb = 1>, #pipe.action<forward, mb = 2>, #pipe.action<forward, mb = 3>, #pipe.action<backward, mb = 3>, #pipe.action<backward, mb = 2>, #pipe.action<backward, mb = 1>, #pipe.action<backward, mb = 0>, #pipe.action<update>] stash_slots 4{{$}}
// CHECK-NEXT: }
// ONEF-LABEL: module attributes {pipe.microbatches = 4 : i64, pipe.schedule = "1f1b", pipe.sends = "buffered", pipe.stages = 3 : i64}
// ONEF: pipe.schedule stage 0 forward @s0_f backward @s0_b update @s0_u actions [#pipe.action<forward, mb = 0>, #pipe.action<forward, mb = 1>, #pipe.action<forward, mb = 2>, #pipe.action<backward, mb = 0>, #pipe.action<forward, mb = 3>, #pipe.action<backward, mb = 1>, #pipe.action<backward, mb = 2>, #pipe.action<backward, mb = 3>, #pipe.action<update>] stash_slots 3{{$}}
// ONEF-NEXT: pipe.schedule stage 1 forward @s1_f backward @s1_b update @s1_u actions [#pipe.action<forward, mb = 0>, #pipe.action<forward, mb = 1>, #pipe.action<backward, mb = 0>, #pipe.action<forward, mb = 2>, #pipe.action<backward, mb = 1>, #pipe.action<forward, mb = 3>, #pipe.action<backward, mb = 2>, #pipe.action<backward, mb = 3>, #pipe.action<update>] stash_slots 2{{$}}
// ONEF-NEXT: pipe.schedule stage 2 forward @s2_f backward @s2_b update @s2_u actions [#pipe.action<forward, mb = 0>, #pipe.action<backward, mb = 0>, #pipe.action<forward, mb = 1>, #pipe.action<backward, mb = 1>, #pipe.action<forward, mb = 2>, #pipe.action<backward, mb = 2>, #pipe.action<forward, mb = 3>, #pipe.action<backward, mb = 3>, #pipe.action<update>] stash_slots 1{{$}}
// ONEF-NEXT: }
// ZB2-LABEL: module attributes {pipe.microbatches = 4 : i64, pipe.schedule = "zbh2", pipe.sends = "buffered", pipe.stages = 3 : i64}
// ZB2: pipe.schedule stage 0 forward @s0_f backward @s0_b update @s0_u actions [#pipe.action<forward, mb = 0>, #pipe.action<forward, mb = 1>, #pipe.action<forward, mb = 2>, #pipe.action<forward, mb = 3>, #pipe.action<backward, mb = 0>, #pipe.action<weight, mb = 0>, #pipe.action<backward, mb = 1>, #pipe.action<weight, mb = 1>, #pipe.action<backward, mb = 2>, #pipe.action<weight, mb = 2>, #pipe.action<backward, mb = 3>, #pipe.action<weight, mb = 3>, #pipe.action<update>] stash_slots 4{{$}}
// ZB2-NEXT: pipe.schedule stage 1 forward @s1_f backward @s1_b update @s1_u actions [#pipe.action<forward, mb = 0>, #pipe.action<forward, mb = 1>, #pipe.action<forward, mb = 2>, #pipe.action<backward, mb = 0>, #pipe.action<forward, mb = 3>, #pipe.action<backward, mb = 1>, #pipe.action<weight, mb = 0>, #pipe.action<backward, mb = 2>, #pipe.action<weight, mb = 1>, #pipe.action<backward, mb = 3>, #pipe.action<weight, mb = 2>, #pipe.action<weight, mb = 3>, #pipe.action<update>] stash_slots 3{{$}}
// ZB2-NEXT: pipe.schedule stage 2 forward @s2_f backward @s2_b update @s2_u actions [#pipe.action<forward, mb = 0>, #pipe.action<backward, mb = 0>, #pipe.action<forward, mb = 1>, #pipe.action<backward, mb = 1>, #pipe.action<forward, mb = 2>, #pipe.action<backward, mb = 2>, #pipe.action<forward, mb = 3>, #pipe.action<backward, mb = 3>, #pipe.action<weight, mb = 0>, #pipe.action<weight, mb = 1>, #pipe.action<weight, mb = 2>, #pipe.action<weight, mb = 3>, #pipe.action<update>] stash_slots 1{{$}}
// ZB2-NEXT: }
// ZB-LABEL: module attributes {pipe.microbatches = 4 : i64, pipe.schedule = "zbh1", pipe.sends = "buffered", pipe.stages = 3 : i64}
// ZB: pipe.schedule stage 0 forward @s0_f backward @s0_b update @s0_u actions [#pipe.action<forward, mb = 0>, #pipe.action<forward, mb = 1>, #pipe.action<forward, mb = 2>, #pipe.action<backward, mb = 0>, #pipe.action<forward, mb = 3>, #pipe.action<backward, mb = 1>, #pipe.action<weight, mb = 0>, #pipe.action<backward, mb = 2>, #pipe.action<weight, mb = 1>, #pipe.action<backward, mb = 3>, #pipe.action<weight, mb = 2>, #pipe.action<weight, mb = 3>, #pipe.action<update>] stash_slots 3{{$}}
// ZB-NEXT: pipe.schedule stage 1 forward @s1_f backward @s1_b update @s1_u actions [#pipe.action<forward, mb = 0>, #pipe.action<forward, mb = 1>, #pipe.action<backward, mb = 0>, #pipe.action<forward, mb = 2>, #pipe.action<backward, mb = 1>, #pipe.action<forward, mb = 3>, #pipe.action<backward, mb = 2>, #pipe.action<weight, mb = 0>, #pipe.action<backward, mb = 3>, #pipe.action<weight, mb = 1>, #pipe.action<weight, mb = 2>, #pipe.action<weight, mb = 3>, #pipe.action<update>] stash_slots 2{{$}}
// ZB-NEXT: pipe.schedule stage 2 forward @s2_f backward @s2_b update @s2_u actions [#pipe.action<forward, mb = 0>, #pipe.action<backward, mb = 0>, #pipe.action<forward, mb = 1>, #pipe.action<backward, mb = 1>, #pipe.action<forward, mb = 2>, #pipe.action<backward, mb = 2>, #pipe.action<forward, mb = 3>, #pipe.action<backward, mb = 3>, #pipe.action<weight, mb = 0>, #pipe.action<weight, mb = 1>, #pipe.action<weight, mb = 2>, #pipe.action<weight, mb = 3>, #pipe.action<update>] stash_slots 1{{$}}
// ZB-NEXT: }
module attributes {pipe.microbatches = 4 : i64, pipe.stages = 3 : i64} {
  func.func @s0_f(%x: tensor<4x8xf32>) attributes {pipe.phase = "forward", pipe.stage = 0 : i64} {
    pipe.send %x to 1 tag 0 : tensor<4x8xf32>
    pipe.send %x to 2 tag 1 : tensor<4x8xf32>
    return
  }
  func.func @s0_b() attributes {pipe.phase = "backward", pipe.stage = 0 : i64} {
    %a = pipe.recv from 2 tag 4 : tensor<4x8xf32>
    %b = pipe.recv from 1 tag 5 : tensor<4x8xf32>
    return
  }
  func.func @s0_u() attributes {pipe.phase = "update", pipe.stage = 0 : i64} {
    return
  }
  func.func @s1_f() attributes {pipe.phase = "forward", pipe.stage = 1 : i64} {
    %a = pipe.recv from 0 tag 0 : tensor<4x8xf32>
    pipe.send %a to 2 tag 2 : tensor<4x8xf32>
    return
  }
  func.func @s1_b() attributes {pipe.phase = "backward", pipe.stage = 1 : i64} {
    %g = pipe.recv from 2 tag 3 : tensor<4x8xf32>
    pipe.send %g to 0 tag 5 : tensor<4x8xf32>
    return
  }
  func.func @s1_u() attributes {pipe.phase = "update", pipe.stage = 1 : i64} {
    return
  }
  func.func @s2_f(%l: tensor<4xi64>) attributes {pipe.phase = "forward", pipe.stage = 2 : i64} {
    %a = pipe.recv from 0 tag 1 : tensor<4x8xf32>
    %b = pipe.recv from 1 tag 2 : tensor<4x8xf32>
    return
  }
  func.func @s2_b() attributes {pipe.phase = "backward", pipe.stage = 2 : i64} {
    %g = nn.constant dense<1.0> : tensor<4x8xf32>
    pipe.send %g to 1 tag 3 : tensor<4x8xf32>
    pipe.send %g to 0 tag 4 : tensor<4x8xf32>
    return
  }
  func.func @s2_u() attributes {pipe.phase = "update", pipe.stage = 2 : i64} {
    return
  }
}

// -----

// Two stages, no pipe.microbatches: M = 1. The functions are found by their
// pipe.stage / pipe.phase, whatever their names and order.
// CHECK-LABEL: module attributes {pipe.schedule = "gpipe", pipe.sends = "blocking", pipe.stages = 2 : i64}
// CHECK: pipe.schedule stage 0 forward @fwd0 backward @bwd0 update @upd0 actions [#pipe.action<forward, mb = 0>, #pipe.action<backward, mb = 0>, #pipe.action<update>]
// CHECK-NEXT: pipe.schedule stage 1 forward @fwd1 backward @bwd1 update @upd1 actions [#pipe.action<forward, mb = 0>, #pipe.action<backward, mb = 0>, #pipe.action<update>]
// CHECK-NEXT: }
module attributes {pipe.stages = 2 : i64} {
  func.func @upd1() attributes {pipe.phase = "update", pipe.stage = 1 : i64} {
    return
  }
  func.func @bwd1() attributes {pipe.phase = "backward", pipe.stage = 1 : i64} {
    %g = nn.constant dense<1.0> : tensor<2xf32>
    pipe.send %g to 0 tag 1 : tensor<2xf32>
    return
  }
  func.func @fwd1() attributes {pipe.phase = "forward", pipe.stage = 1 : i64} {
    %a = pipe.recv from 0 tag 0 : tensor<2xf32>
    return
  }
  func.func @fwd0(%x: tensor<2xf32>) attributes {pipe.phase = "forward", pipe.stage = 0 : i64} {
    pipe.send %x to 1 tag 0 : tensor<2xf32>
    return
  }
  func.func @bwd0() attributes {pipe.phase = "backward", pipe.stage = 0 : i64} {
    %g = pipe.recv from 1 tag 1 : tensor<2xf32>
    return
  }
  func.func @upd0() attributes {pipe.phase = "update", pipe.stage = 0 : i64} {
    return
  }
}

// -----

// No pipe.stages: one stage; M = 1 given explicitly.
// CHECK-LABEL: module attributes {pipe.microbatches = 1 : i64, pipe.schedule = "gpipe", pipe.sends = "blocking"}
// CHECK: pipe.schedule stage 0 forward @f backward @b update @u actions [#pipe.action<forward, mb = 0>, #pipe.action<backward, mb = 0>, #pipe.action<update>]
// CHECK-NOT: pipe.schedule
module attributes {pipe.microbatches = 1 : i64} {
  func.func @f() attributes {pipe.phase = "forward", pipe.stage = 0 : i64} {
    return
  }
  func.func @b() attributes {pipe.phase = "backward", pipe.stage = 0 : i64} {
    return
  }
  func.func @u() attributes {pipe.phase = "update", pipe.stage = 0 : i64} {
    return
  }
}
