// gpipe-check-schedule accepts hand-written schedules whose transfers pair up
// (same sender, receiver, tag, type and micro-batch) and that run to their end
// under the module's pipe.sends semantics (blocking, rendezvous, by default;
// or buffered); it leaves them unchanged.
// RUN: gpipe-opt %s --split-input-file --gpipe-check-schedule | FileCheck %s

// Three stages, M = 2, GPipe order, with a skip in both directions: stage 0
// sends to 1 then 2; stage 2 receives from 0 then 1; backward mirrored.
// CHECK-LABEL: module attributes {pipe.microbatches = 2 : i64, pipe.stages = 3 : i64}
// CHECK: pipe.schedule stage 0 forward @s0_f backward @s0_b update @s0_u actions [#pipe.action<forward, mb = 0>, #pipe.action<forward, mb = 1>, #pipe.action<backward, mb = 1>, #pipe.action<backward, mb = 0>, #pipe.action<update>]
// CHECK-NEXT: pipe.schedule stage 1 forward @s1_f backward @s1_b update @s1_u actions [#pipe.action<forward, mb = 0>, #pipe.action<forward, mb = 1>, #pipe.action<backward, mb = 1>, #pipe.action<backward, mb = 0>, #pipe.action<update>]
// CHECK-NEXT: pipe.schedule stage 2 forward @s2_f backward @s2_b update @s2_u actions [#pipe.action<forward, mb = 0>, #pipe.action<forward, mb = 1>, #pipe.action<backward, mb = 1>, #pipe.action<backward, mb = 0>, #pipe.action<update>]
module attributes {pipe.microbatches = 2 : i64, pipe.stages = 3 : i64} {
  func.func @s0_f(%x: tensor<4x8xf32>) attributes {pipe.stage = 0 : i64} {
    pipe.send %x to 1 tag 0 : tensor<4x8xf32>
    pipe.send %x to 2 tag 1 : tensor<4x8xf32>
    return
  }
  func.func @s0_b() attributes {pipe.stage = 0 : i64} {
    %a = pipe.recv from 2 tag 4 : tensor<4x8xf32>
    %b = pipe.recv from 1 tag 5 : tensor<4x8xf32>
    return
  }
  func.func @s0_u() attributes {pipe.stage = 0 : i64} {
    return
  }
  func.func @s1_f() attributes {pipe.stage = 1 : i64} {
    %a = pipe.recv from 0 tag 0 : tensor<4x8xf32>
    pipe.send %a to 2 tag 2 : tensor<4x8xf32>
    return
  }
  func.func @s1_b() attributes {pipe.stage = 1 : i64} {
    %g = pipe.recv from 2 tag 3 : tensor<4x8xf32>
    pipe.send %g to 0 tag 5 : tensor<4x8xf32>
    return
  }
  func.func @s1_u() attributes {pipe.stage = 1 : i64} {
    return
  }
  func.func @s2_f(%l: tensor<4xi64>) attributes {pipe.stage = 2 : i64} {
    %a = pipe.recv from 0 tag 1 : tensor<4x8xf32>
    %b = pipe.recv from 1 tag 2 : tensor<4x8xf32>
    return
  }
  func.func @s2_b() attributes {pipe.stage = 2 : i64} {
    %g = nn.constant dense<1.0> : tensor<4x8xf32>
    pipe.send %g to 1 tag 3 : tensor<4x8xf32>
    pipe.send %g to 0 tag 4 : tensor<4x8xf32>
    return
  }
  func.func @s2_u() attributes {pipe.stage = 2 : i64} {
    return
  }
  pipe.schedule stage 0 forward @s0_f backward @s0_b update @s0_u actions [#pipe.action<forward, mb = 0>, #pipe.action<forward, mb = 1>, #pipe.action<backward, mb = 1>, #pipe.action<backward, mb = 0>, #pipe.action<update>]
  pipe.schedule stage 1 forward @s1_f backward @s1_b update @s1_u actions [#pipe.action<forward, mb = 0>, #pipe.action<forward, mb = 1>, #pipe.action<backward, mb = 1>, #pipe.action<backward, mb = 0>, #pipe.action<update>]
  pipe.schedule stage 2 forward @s2_f backward @s2_b update @s2_u actions [#pipe.action<forward, mb = 0>, #pipe.action<forward, mb = 1>, #pipe.action<backward, mb = 1>, #pipe.action<backward, mb = 0>, #pipe.action<update>]
}

// -----

// Not GPipe's order, but consistent: both stages run the backwards in
// forward order, and the schedules may be listed in any order. Transfers of
// i64 tensors (labels) are checked like f32 ones.
// CHECK-LABEL: module attributes {pipe.microbatches = 3 : i64, pipe.stages = 2 : i64}
// CHECK: pipe.schedule stage 1 forward @f1 backward @b1 update @u1 actions [#pipe.action<forward, mb = 0>, #pipe.action<forward, mb = 1>, #pipe.action<forward, mb = 2>, #pipe.action<backward, mb = 0>, #pipe.action<backward, mb = 1>, #pipe.action<backward, mb = 2>, #pipe.action<update>]
// CHECK-NEXT: pipe.schedule stage 0 forward @f0 backward @b0 update @u0 actions [#pipe.action<forward, mb = 0>, #pipe.action<forward, mb = 1>, #pipe.action<forward, mb = 2>, #pipe.action<backward, mb = 0>, #pipe.action<backward, mb = 1>, #pipe.action<backward, mb = 2>, #pipe.action<update>]
module attributes {pipe.microbatches = 3 : i64, pipe.stages = 2 : i64} {
  func.func @f0(%x: tensor<2x3xf32>, %l: tensor<2xi64>) attributes {pipe.stage = 0 : i64} {
    pipe.send %x to 1 tag 0 : tensor<2x3xf32>
    pipe.send %l to 1 tag 1 : tensor<2xi64>
    return
  }
  func.func @b0() attributes {pipe.stage = 0 : i64} {
    %g = pipe.recv from 1 tag 2 : tensor<2x3xf32>
    return
  }
  func.func @u0() attributes {pipe.stage = 0 : i64} {
    return
  }
  func.func @f1() attributes {pipe.stage = 1 : i64} {
    %x = pipe.recv from 0 tag 0 : tensor<2x3xf32>
    %l = pipe.recv from 0 tag 1 : tensor<2xi64>
    return
  }
  func.func @b1() attributes {pipe.stage = 1 : i64} {
    %g = nn.constant dense<0.5> : tensor<2x3xf32>
    pipe.send %g to 0 tag 2 : tensor<2x3xf32>
    return
  }
  func.func @u1() attributes {pipe.stage = 1 : i64} {
    return
  }
  pipe.schedule stage 1 forward @f1 backward @b1 update @u1 actions [#pipe.action<forward, mb = 0>, #pipe.action<forward, mb = 1>, #pipe.action<forward, mb = 2>, #pipe.action<backward, mb = 0>, #pipe.action<backward, mb = 1>, #pipe.action<backward, mb = 2>, #pipe.action<update>]
  pipe.schedule stage 0 forward @f0 backward @b0 update @u0 actions [#pipe.action<forward, mb = 0>, #pipe.action<forward, mb = 1>, #pipe.action<forward, mb = 2>, #pipe.action<backward, mb = 0>, #pipe.action<backward, mb = 1>, #pipe.action<backward, mb = 2>, #pipe.action<update>]
}

// -----

// One stage, no transfers at all, no module attributes (K = M = 1).
// CHECK-LABEL: module {
// CHECK: pipe.schedule stage 0 forward @f backward @b update @u actions [#pipe.action<forward, mb = 0>, #pipe.action<backward, mb = 0>, #pipe.action<update>]
module {
  func.func @f() attributes {pipe.stage = 0 : i64} {
    return
  }
  func.func @b() attributes {pipe.stage = 0 : i64} {
    return
  }
  func.func @u() attributes {pipe.stage = 0 : i64} {
    return
  }
  pipe.schedule stage 0 forward @f backward @b update @u actions [#pipe.action<forward, mb = 0>, #pipe.action<backward, mb = 0>, #pipe.action<update>]
}

// -----

// 1F1B on two stages, M = 2: stage 0 sends micro-batch 1's activation while
// stage 1 sends micro-batch 0's gradient. That deadlocks with blocking sends
// (schedule-invalid.mlir) but runs with buffered ones (pipe.sends).
// CHECK-LABEL: module attributes {pipe.microbatches = 2 : i64, pipe.sends = "buffered", pipe.stages = 2 : i64}
// CHECK: pipe.schedule stage 0 forward @f0 backward @b0 update @u0 actions [#pipe.action<forward, mb = 0>, #pipe.action<forward, mb = 1>, #pipe.action<backward, mb = 0>, #pipe.action<backward, mb = 1>, #pipe.action<update>] stash_slots 2
// CHECK-NEXT: pipe.schedule stage 1 forward @f1 backward @b1 update @u1 actions [#pipe.action<forward, mb = 0>, #pipe.action<backward, mb = 0>, #pipe.action<forward, mb = 1>, #pipe.action<backward, mb = 1>, #pipe.action<update>] stash_slots 1
module attributes {pipe.microbatches = 2 : i64, pipe.sends = "buffered", pipe.stages = 2 : i64} {
  func.func @f0(%x: tensor<4xf32>) attributes {pipe.stage = 0 : i64} {
    pipe.send %x to 1 tag 0 : tensor<4xf32>
    return
  }
  func.func @b0() attributes {pipe.stage = 0 : i64} {
    %g = pipe.recv from 1 tag 1 : tensor<4xf32>
    return
  }
  func.func @f1() attributes {pipe.stage = 1 : i64} {
    %x = pipe.recv from 0 tag 0 : tensor<4xf32>
    return
  }
  func.func @b1(%g: tensor<4xf32>) attributes {pipe.stage = 1 : i64} {
    pipe.send %g to 0 tag 1 : tensor<4xf32>
    return
  }
  func.func @u0() attributes {pipe.stage = 0 : i64} {
    return
  }
  func.func @u1() attributes {pipe.stage = 1 : i64} {
    return
  }
  pipe.schedule stage 0 forward @f0 backward @b0 update @u0 actions [#pipe.action<forward, mb = 0>, #pipe.action<forward, mb = 1>, #pipe.action<backward, mb = 0>, #pipe.action<backward, mb = 1>, #pipe.action<update>] stash_slots 2
  pipe.schedule stage 1 forward @f1 backward @b1 update @u1 actions [#pipe.action<forward, mb = 0>, #pipe.action<backward, mb = 0>, #pipe.action<forward, mb = 1>, #pipe.action<backward, mb = 1>, #pipe.action<update>] stash_slots 1
}

// -----

// A weight tied across stages, sent once per step: stage 0's first forward
// sends it (`per_step`) to stage 1's first forward, before the activation;
// stage 1's update sends its summed gradient share to stage 0's update. The
// per-step transfers count in F0 (and U) only, so with M = 2 each tag pairs
// one send with one receive.
// CHECK-LABEL: module attributes {pipe.microbatches = 2 : i64, pipe.stages = 2 : i64}
// CHECK: pipe.send %{{.+}} to 1 tag 1 per_step : tensor<4xf32>
// CHECK: pipe.recv from 0 tag 1 per_step : tensor<4xf32>
module attributes {pipe.microbatches = 2 : i64, pipe.stages = 2 : i64} {
  func.func @f0(%x: tensor<4xf32>, %w: tensor<4xf32>) attributes {pipe.stage = 0 : i64} {
    pipe.send %w to 1 tag 1 per_step : tensor<4xf32>
    pipe.send %x to 1 tag 0 : tensor<4xf32>
    return
  }
  func.func @b0() attributes {pipe.stage = 0 : i64} {
    %g = pipe.recv from 1 tag 2 : tensor<4xf32>
    return
  }
  func.func @u0() attributes {pipe.stage = 0 : i64} {
    %s = pipe.recv from 1 tag 3 : tensor<4xf32>
    return
  }
  func.func @f1() attributes {pipe.stage = 1 : i64} {
    %w = pipe.recv from 0 tag 1 per_step : tensor<4xf32>
    %x = pipe.recv from 0 tag 0 : tensor<4xf32>
    return
  }
  func.func @b1(%g: tensor<4xf32>) attributes {pipe.stage = 1 : i64} {
    pipe.send %g to 0 tag 2 : tensor<4xf32>
    return
  }
  func.func @u1(%s: tensor<4xf32>) attributes {pipe.stage = 1 : i64} {
    pipe.send %s to 0 tag 3 : tensor<4xf32>
    return
  }
  pipe.schedule stage 0 forward @f0 backward @b0 update @u0 actions [#pipe.action<forward, mb = 0>, #pipe.action<forward, mb = 1>, #pipe.action<backward, mb = 1>, #pipe.action<backward, mb = 0>, #pipe.action<update>]
  pipe.schedule stage 1 forward @f1 backward @b1 update @u1 actions [#pipe.action<forward, mb = 0>, #pipe.action<forward, mb = 1>, #pipe.action<backward, mb = 1>, #pipe.action<backward, mb = 0>, #pipe.action<update>]
}
