// gpipe-flush-sends: with buffered sends, a flush action (S: wait until the
// stage's sends are received) before each run of W actions that follows a
// send since the stage's last flush; none with blocking sends; none where it
// would deadlock (then the schedules stay as they were).
// RUN: gpipe-opt %s --split-input-file --gpipe-flush-sends | FileCheck %s
// RUN: gpipe-opt %s --split-input-file --gpipe-flush-sends | gpipe-opt --split-input-file --gpipe-check-schedule | FileCheck %s

// Stage 0 sends in its forwards: a flush before W0 (F0 and F1 sent since the
// step began) but not before W1 (B1 sends nothing after the flush). Stage 1
// sends in its backwards: a flush before each W.
// CHECK-LABEL: module attributes {pipe.microbatches = 2 : i64, pipe.sends = "buffered", pipe.stages = 2 : i64}
// CHECK: pipe.schedule stage 0 {{.*}} actions [#pipe.action<forward, mb = 0>, #pipe.action<forward, mb = 1>, #pipe.action<backward, mb = 0>, #pipe.action<flush>, #pipe.action<weight, mb = 0>, #pipe.action<backward, mb = 1>, #pipe.action<weight, mb = 1>, #pipe.action<update>]
// CHECK-NEXT: pipe.schedule stage 1 {{.*}} actions [#pipe.action<forward, mb = 0>, #pipe.action<backward, mb = 0>, #pipe.action<flush>, #pipe.action<weight, mb = 0>, #pipe.action<forward, mb = 1>, #pipe.action<backward, mb = 1>, #pipe.action<flush>, #pipe.action<weight, mb = 1>, #pipe.action<update>]
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
  pipe.schedule stage 0 forward @f0 backward @b0 update @u0 actions [#pipe.action<forward, mb = 0>, #pipe.action<forward, mb = 1>, #pipe.action<backward, mb = 0>, #pipe.action<weight, mb = 0>, #pipe.action<backward, mb = 1>, #pipe.action<weight, mb = 1>, #pipe.action<update>]
  pipe.schedule stage 1 forward @f1 backward @b1 update @u1 actions [#pipe.action<forward, mb = 0>, #pipe.action<backward, mb = 0>, #pipe.action<weight, mb = 0>, #pipe.action<forward, mb = 1>, #pipe.action<backward, mb = 1>, #pipe.action<weight, mb = 1>, #pipe.action<update>]
}

// -----

// Blocking sends (a send has completed when it returns): nothing to flush.
// CHECK-LABEL: module attributes {pipe.microbatches = 1 : i64, pipe.sends = "blocking", pipe.stages = 2 : i64}
// CHECK: pipe.schedule stage 0 {{.*}} actions [#pipe.action<forward, mb = 0>, #pipe.action<backward, mb = 0>, #pipe.action<weight, mb = 0>, #pipe.action<update>]
// CHECK-NEXT: pipe.schedule stage 1 {{.*}} actions [#pipe.action<forward, mb = 0>, #pipe.action<backward, mb = 0>, #pipe.action<weight, mb = 0>, #pipe.action<update>]
module attributes {pipe.microbatches = 1 : i64, pipe.sends = "blocking", pipe.stages = 2 : i64} {
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
  pipe.schedule stage 0 forward @f0 backward @b0 update @u0 actions [#pipe.action<forward, mb = 0>, #pipe.action<backward, mb = 0>, #pipe.action<weight, mb = 0>, #pipe.action<update>]
  pipe.schedule stage 1 forward @f1 backward @b1 update @u1 actions [#pipe.action<forward, mb = 0>, #pipe.action<backward, mb = 0>, #pipe.action<weight, mb = 0>, #pipe.action<update>]
}

// -----

// A flush that would deadlock is left out: stage 1's first forward receives
// stage 0's per-step message (sent by stage 0's update) before micro-batch
// 0's activation, so stage 0 waiting before W0 until that activation is
// received would never go on.
// CHECK-LABEL: module attributes {pipe.microbatches = 1 : i64, pipe.sends = "buffered", pipe.stages = 2 : i64}
// CHECK: pipe.schedule stage 0 {{.*}} actions [#pipe.action<forward, mb = 0>, #pipe.action<backward, mb = 0>, #pipe.action<weight, mb = 0>, #pipe.action<update>]
module attributes {pipe.microbatches = 1 : i64, pipe.sends = "buffered", pipe.stages = 2 : i64} {
  func.func @f0(%x: tensor<4xf32>) attributes {pipe.stage = 0 : i64} {
    pipe.send %x to 1 tag 0 : tensor<4xf32>
    return
  }
  func.func @b0() attributes {pipe.stage = 0 : i64} {
    return
  }
  func.func @u0(%w: tensor<4xf32>) attributes {pipe.stage = 0 : i64} {
    pipe.send %w to 1 tag 3 per_step : tensor<4xf32>
    return
  }
  func.func @f1() attributes {pipe.stage = 1 : i64} {
    %w = pipe.recv from 0 tag 3 per_step : tensor<4xf32>
    %x = pipe.recv from 0 tag 0 : tensor<4xf32>
    return
  }
  func.func @b1() attributes {pipe.stage = 1 : i64} {
    return
  }
  func.func @u1() attributes {pipe.stage = 1 : i64} {
    return
  }
  pipe.schedule stage 0 forward @f0 backward @b0 update @u0 actions [#pipe.action<forward, mb = 0>, #pipe.action<backward, mb = 0>, #pipe.action<weight, mb = 0>, #pipe.action<update>]
  pipe.schedule stage 1 forward @f1 backward @b1 update @u1 actions [#pipe.action<forward, mb = 0>, #pipe.action<backward, mb = 0>, #pipe.action<update>]
}
