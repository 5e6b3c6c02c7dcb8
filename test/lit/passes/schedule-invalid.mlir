// gpipe-check-schedule errors on hand-written modules: transfers that do not
// pair up (no peer, another type, another micro-batch), schedules that
// deadlock under blocking sends and receives (with a note at each blocked
// transfer), and missing, duplicate or out-of-range schedules and peers; a W
// action before its backward; a flush action that deadlocks.
// RUN: gpipe-opt %s --split-input-file --gpipe-check-schedule --verify-diagnostics

// Deadlock: stage 0 sends tag 0 then tag 1, stage 1 receives tag 1 first.
// Every transfer has its partner, but neither stage can go on.
module attributes {pipe.stages = 2 : i64} {
  func.func @f0(%x: tensor<4xf32>) attributes {pipe.stage = 0 : i64} {
    // expected-note @+1 {{stage 0 blocks in action F0 on pipe.send to stage 1 (tag 0, tensor<4xf32>)}}
    pipe.send %x to 1 tag 0 : tensor<4xf32>
    pipe.send %x to 1 tag 1 : tensor<4xf32>
    return
  }
  func.func @f1() attributes {pipe.stage = 1 : i64} {
    // expected-note @+1 {{stage 1 blocks in action F0 on pipe.recv from stage 0 (tag 1, tensor<4xf32>)}}
    %b = pipe.recv from 0 tag 1 : tensor<4xf32>
    %a = pipe.recv from 0 tag 0 : tensor<4xf32>
    return
  }
  func.func @e0() attributes {pipe.stage = 0 : i64} {
    return
  }
  func.func @e1() attributes {pipe.stage = 1 : i64} {
    return
  }
  // expected-error @+1 {{the schedule deadlocks: stage 0 blocks in action F0 on pipe.send to stage 1 (tag 0, tensor<4xf32>)}}
  pipe.schedule stage 0 forward @f0 backward @e0 update @e0 actions [#pipe.action<forward, mb = 0>, #pipe.action<backward, mb = 0>, #pipe.action<update>]
  pipe.schedule stage 1 forward @f1 backward @e1 update @e1 actions [#pipe.action<forward, mb = 0>, #pipe.action<backward, mb = 0>, #pipe.action<update>]
}

// -----

// Deadlock across actions: stage 1 runs one micro-batch's backward before
// the next forward (1F1B) while stage 0 runs both forwards first; with
// blocking sends, stage 0's second forward send and stage 1's first backward
// send wait for each other. The deadlock is reported in the later actions.
module attributes {pipe.microbatches = 2 : i64, pipe.stages = 2 : i64} {
  func.func @f0(%x: tensor<4xf32>) attributes {pipe.stage = 0 : i64} {
    // expected-note @+1 {{stage 0 blocks in action F1 on pipe.send to stage 1 (tag 0, tensor<4xf32>)}}
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
    // expected-note @+1 {{stage 1 blocks in action B0 on pipe.send to stage 0 (tag 1, tensor<4xf32>)}}
    pipe.send %g to 0 tag 1 : tensor<4xf32>
    return
  }
  func.func @u0() attributes {pipe.stage = 0 : i64} {
    return
  }
  func.func @u1() attributes {pipe.stage = 1 : i64} {
    return
  }
  // expected-error @+1 {{the schedule deadlocks: stage 0 blocks in action F1 on pipe.send to stage 1 (tag 0, tensor<4xf32>)}}
  pipe.schedule stage 0 forward @f0 backward @b0 update @u0 actions [#pipe.action<forward, mb = 0>, #pipe.action<forward, mb = 1>, #pipe.action<backward, mb = 0>, #pipe.action<backward, mb = 1>, #pipe.action<update>]
  pipe.schedule stage 1 forward @f1 backward @b1 update @u1 actions [#pipe.action<forward, mb = 0>, #pipe.action<backward, mb = 0>, #pipe.action<forward, mb = 1>, #pipe.action<backward, mb = 1>, #pipe.action<update>]
}

// -----

// A send that stage 1 never receives.
module attributes {pipe.stages = 2 : i64} {
  func.func @f0(%x: tensor<4xf32>) attributes {pipe.stage = 0 : i64} {
    // expected-note @+1 {{this transfer}}
    pipe.send %x to 1 tag 0 : tensor<4xf32>
    return
  }
  func.func @e0() attributes {pipe.stage = 0 : i64} {
    return
  }
  func.func @e1() attributes {pipe.stage = 1 : i64} {
    return
  }
  // expected-error @+1 {{stage 0, action F0 on pipe.send to stage 1 (tag 0, tensor<4xf32>): no matching pipe.recv in stage 1 (1 sends of this tag per step, 0 receives)}}
  pipe.schedule stage 0 forward @f0 backward @e0 update @e0 actions [#pipe.action<forward, mb = 0>, #pipe.action<backward, mb = 0>, #pipe.action<update>]
  pipe.schedule stage 1 forward @e1 backward @e1 update @e1 actions [#pipe.action<forward, mb = 0>, #pipe.action<backward, mb = 0>, #pipe.action<update>]
}

// -----

// A receive with no send: stage 1 expects tag 3 from stage 0, which sends
// tag 0 only (matched), over M = 2.
module attributes {pipe.microbatches = 2 : i64, pipe.stages = 2 : i64} {
  func.func @f0(%x: tensor<4xf32>) attributes {pipe.stage = 0 : i64} {
    pipe.send %x to 1 tag 0 : tensor<4xf32>
    return
  }
  func.func @f1() attributes {pipe.stage = 1 : i64} {
    %a = pipe.recv from 0 tag 0 : tensor<4xf32>
    // expected-note @+1 {{this transfer}}
    %b = pipe.recv from 0 tag 3 : tensor<4xf32>
    return
  }
  func.func @e0() attributes {pipe.stage = 0 : i64} {
    return
  }
  func.func @e1() attributes {pipe.stage = 1 : i64} {
    return
  }
  pipe.schedule stage 0 forward @f0 backward @e0 update @e0 actions [#pipe.action<forward, mb = 0>, #pipe.action<forward, mb = 1>, #pipe.action<backward, mb = 1>, #pipe.action<backward, mb = 0>, #pipe.action<update>]
  // expected-error @+1 {{stage 1, action F0 on pipe.recv from stage 0 (tag 3, tensor<4xf32>): no matching pipe.send in stage 0 (2 receives of this tag per step, 0 sends)}}
  pipe.schedule stage 1 forward @f1 backward @e1 update @e1 actions [#pipe.action<forward, mb = 0>, #pipe.action<forward, mb = 1>, #pipe.action<backward, mb = 1>, #pipe.action<backward, mb = 0>, #pipe.action<update>]
}

// -----

// Stage 0 sends tag 0 in its forward only, stage 1 receives it in both its
// forward and its backward: one send too few per micro-batch.
module attributes {pipe.stages = 2 : i64} {
  func.func @f0(%x: tensor<4xf32>) attributes {pipe.stage = 0 : i64} {
    pipe.send %x to 1 tag 0 : tensor<4xf32>
    return
  }
  func.func @f1() attributes {pipe.stage = 1 : i64} {
    %a = pipe.recv from 0 tag 0 : tensor<4xf32>
    return
  }
  func.func @b1() attributes {pipe.stage = 1 : i64} {
    // expected-note @+1 {{this transfer}}
    %a = pipe.recv from 0 tag 0 : tensor<4xf32>
    return
  }
  func.func @e0() attributes {pipe.stage = 0 : i64} {
    return
  }
  func.func @e1() attributes {pipe.stage = 1 : i64} {
    return
  }
  pipe.schedule stage 0 forward @f0 backward @e0 update @e0 actions [#pipe.action<forward, mb = 0>, #pipe.action<backward, mb = 0>, #pipe.action<update>]
  // expected-error @+1 {{stage 1, action B0 on pipe.recv from stage 0 (tag 0, tensor<4xf32>): no matching pipe.send in stage 0 (2 receives of this tag per step, 1 sends)}}
  pipe.schedule stage 1 forward @f1 backward @b1 update @e1 actions [#pipe.action<forward, mb = 0>, #pipe.action<backward, mb = 0>, #pipe.action<update>]
}

// -----

// The receive's type differs from the send's (same tag and peers).
module attributes {pipe.stages = 2 : i64} {
  func.func @f0(%x: tensor<4xf32>) attributes {pipe.stage = 0 : i64} {
    pipe.send %x to 1 tag 0 : tensor<4xf32>
    return
  }
  func.func @f1() attributes {pipe.stage = 1 : i64} {
    // expected-error @+1 {{stage 1 receives 'tensor<2x2xf32>' with tag 0 but stage 0 sends 'tensor<4xf32>'}}
    %a = pipe.recv from 0 tag 0 : tensor<2x2xf32>
    return
  }
  func.func @e0() attributes {pipe.stage = 0 : i64} {
    return
  }
  func.func @e1() attributes {pipe.stage = 1 : i64} {
    return
  }
  pipe.schedule stage 0 forward @f0 backward @e0 update @e0 actions [#pipe.action<forward, mb = 0>, #pipe.action<backward, mb = 0>, #pipe.action<update>]
  pipe.schedule stage 1 forward @f1 backward @e1 update @e1 actions [#pipe.action<forward, mb = 0>, #pipe.action<backward, mb = 0>, #pipe.action<update>]
}

// -----

// The stages run the micro-batches' forwards in different orders: stage 1's
// first receive (in F1) gets what stage 0 sent in F0.
module attributes {pipe.microbatches = 2 : i64, pipe.stages = 2 : i64} {
  func.func @f0(%x: tensor<4xf32>) attributes {pipe.stage = 0 : i64} {
    pipe.send %x to 1 tag 0 : tensor<4xf32>
    return
  }
  func.func @f1() attributes {pipe.stage = 1 : i64} {
    %a = pipe.recv from 0 tag 0 : tensor<4xf32>
    return
  }
  func.func @e0() attributes {pipe.stage = 0 : i64} {
    return
  }
  func.func @e1() attributes {pipe.stage = 1 : i64} {
    return
  }
  pipe.schedule stage 0 forward @f0 backward @e0 update @e0 actions [#pipe.action<forward, mb = 0>, #pipe.action<forward, mb = 1>, #pipe.action<backward, mb = 1>, #pipe.action<backward, mb = 0>, #pipe.action<update>]
  // expected-error @+1 {{stage 1, action F1 on pipe.recv from stage 0 (tag 0, tensor<4xf32>) gets micro-batch 0 (sent in stage 0's action F0): the stages run micro-batches in different orders}}
  pipe.schedule stage 1 forward @f1 backward @e1 update @e1 actions [#pipe.action<forward, mb = 1>, #pipe.action<forward, mb = 0>, #pipe.action<backward, mb = 1>, #pipe.action<backward, mb = 0>, #pipe.action<update>]
}

// -----

// Stage 1 has no schedule.
// expected-error @+1 {{stage 1 has no pipe.schedule}}
module attributes {pipe.stages = 2 : i64} {
  func.func @e0() attributes {pipe.stage = 0 : i64} {
    return
  }
  pipe.schedule stage 0 forward @e0 backward @e0 update @e0 actions [#pipe.action<forward, mb = 0>, #pipe.action<backward, mb = 0>, #pipe.action<update>]
}

// -----

// No schedule at all (pipe.stages absent: one stage).
// expected-error @+1 {{stage 0 has no pipe.schedule}}
module {
  func.func @e0() attributes {pipe.stage = 0 : i64} {
    return
  }
}

// -----

// A schedule for a stage the module does not have.
module attributes {pipe.stages = 2 : i64} {
  func.func @e0() attributes {pipe.stage = 0 : i64} {
    return
  }
  func.func @e1() attributes {pipe.stage = 1 : i64} {
    return
  }
  func.func @e2() attributes {pipe.stage = 2 : i64} {
    return
  }
  pipe.schedule stage 0 forward @e0 backward @e0 update @e0 actions [#pipe.action<forward, mb = 0>, #pipe.action<backward, mb = 0>, #pipe.action<update>]
  pipe.schedule stage 1 forward @e1 backward @e1 update @e1 actions [#pipe.action<forward, mb = 0>, #pipe.action<backward, mb = 0>, #pipe.action<update>]
  // expected-error @+1 {{schedule of stage 2 but the module has 2 stages}}
  pipe.schedule stage 2 forward @e2 backward @e2 update @e2 actions [#pipe.action<forward, mb = 0>, #pipe.action<backward, mb = 0>, #pipe.action<update>]
}

// -----

// Two schedules for stage 0.
module {
  func.func @e0() attributes {pipe.stage = 0 : i64} {
    return
  }
  pipe.schedule stage 0 forward @e0 backward @e0 update @e0 actions [#pipe.action<forward, mb = 0>, #pipe.action<backward, mb = 0>, #pipe.action<update>]
  // expected-error @+1 {{stage 0 has two schedules}}
  pipe.schedule stage 0 forward @e0 backward @e0 update @e0 actions [#pipe.action<forward, mb = 0>, #pipe.action<backward, mb = 0>, #pipe.action<update>]
}

// -----

// A transfer naming a stage the module does not have.
module attributes {pipe.stages = 2 : i64} {
  func.func @f0(%x: tensor<4xf32>) attributes {pipe.stage = 0 : i64} {
    // expected-error @+1 {{stage 0 names stage 5 but there are 2 stages}}
    pipe.send %x to 5 tag 0 : tensor<4xf32>
    return
  }
  func.func @e0() attributes {pipe.stage = 0 : i64} {
    return
  }
  func.func @e1() attributes {pipe.stage = 1 : i64} {
    return
  }
  pipe.schedule stage 0 forward @f0 backward @e0 update @e0 actions [#pipe.action<forward, mb = 0>, #pipe.action<backward, mb = 0>, #pipe.action<update>]
  pipe.schedule stage 1 forward @e1 backward @e1 update @e1 actions [#pipe.action<forward, mb = 0>, #pipe.action<backward, mb = 0>, #pipe.action<update>]
}

// -----

// A broken 1F1B with buffered sends: stage 0 runs B0 right after F0 (no
// warm-up) but stage 1 does a warm-up forward, so it waits for micro-batch
// 1's activation while stage 0 waits for micro-batch 0's gradient. Buffered
// sends do not help: both stages block in a receive.
module attributes {pipe.microbatches = 2 : i64, pipe.sends = "buffered", pipe.stages = 2 : i64} {
  func.func @f0(%x: tensor<4xf32>) attributes {pipe.stage = 0 : i64} {
    pipe.send %x to 1 tag 0 : tensor<4xf32>
    return
  }
  func.func @b0() attributes {pipe.stage = 0 : i64} {
    // expected-note @+1 {{stage 0 blocks in action B0 on pipe.recv from stage 1 (tag 1, tensor<4xf32>)}}
    %g = pipe.recv from 1 tag 1 : tensor<4xf32>
    return
  }
  func.func @f1() attributes {pipe.stage = 1 : i64} {
    // expected-note @+1 {{stage 1 blocks in action F1 on pipe.recv from stage 0 (tag 0, tensor<4xf32>)}}
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
  // expected-error @+1 {{the schedule deadlocks even with buffered sends: stage 0 blocks in action B0 on pipe.recv from stage 1 (tag 1, tensor<4xf32>)}}
  pipe.schedule stage 0 forward @f0 backward @b0 update @u0 actions [#pipe.action<forward, mb = 0>, #pipe.action<backward, mb = 0>, #pipe.action<forward, mb = 1>, #pipe.action<backward, mb = 1>, #pipe.action<update>]
  pipe.schedule stage 1 forward @f1 backward @b1 update @u1 actions [#pipe.action<forward, mb = 0>, #pipe.action<forward, mb = 1>, #pipe.action<backward, mb = 0>, #pipe.action<backward, mb = 1>, #pipe.action<update>]
}


// -----

// A tied weight sent once per step (`per_step`) in the owner's first forward,
// but the user receives it after the activation of micro-batch 0: stage 0
// cannot send the activation before its per-step send completes. The
// per-step transfers are checked in the first forward (F0) only.
module attributes {pipe.microbatches = 2 : i64, pipe.stages = 2 : i64} {
  func.func @f0(%x: tensor<4xf32>, %w: tensor<4xf32>) attributes {pipe.stage = 0 : i64} {
    // expected-note @+1 {{stage 0 blocks in action F0 on pipe.send to stage 1 (tag 1, tensor<4xf32>)}}
    pipe.send %w to 1 tag 1 per_step : tensor<4xf32>
    pipe.send %x to 1 tag 0 : tensor<4xf32>
    return
  }
  func.func @f1() attributes {pipe.stage = 1 : i64} {
    // expected-note @+1 {{stage 1 blocks in action F0 on pipe.recv from stage 0 (tag 0, tensor<4xf32>)}}
    %x = pipe.recv from 0 tag 0 : tensor<4xf32>
    %w = pipe.recv from 0 tag 1 per_step : tensor<4xf32>
    return
  }
  func.func @e0() attributes {pipe.stage = 0 : i64} {
    return
  }
  func.func @e1() attributes {pipe.stage = 1 : i64} {
    return
  }
  // expected-error @+1 {{the schedule deadlocks: stage 0 blocks in action F0 on pipe.send to stage 1 (tag 1, tensor<4xf32>)}}
  pipe.schedule stage 0 forward @f0 backward @e0 update @e0 actions [#pipe.action<forward, mb = 0>, #pipe.action<forward, mb = 1>, #pipe.action<backward, mb = 1>, #pipe.action<backward, mb = 0>, #pipe.action<update>]
  pipe.schedule stage 1 forward @f1 backward @e1 update @e1 actions [#pipe.action<forward, mb = 0>, #pipe.action<forward, mb = 1>, #pipe.action<backward, mb = 1>, #pipe.action<backward, mb = 0>, #pipe.action<update>]
}

// -----

// A per-step receive whose send runs with every micro-batch: M = 2 sends of
// the tag per step, 1 receive.
module attributes {pipe.microbatches = 2 : i64, pipe.stages = 2 : i64} {
  func.func @f0(%w: tensor<4xf32>) attributes {pipe.stage = 0 : i64} {
    // expected-note @+1 {{this transfer}}
    pipe.send %w to 1 tag 0 : tensor<4xf32>
    return
  }
  func.func @f1() attributes {pipe.stage = 1 : i64} {
    %w = pipe.recv from 0 tag 0 per_step : tensor<4xf32>
    return
  }
  func.func @e0() attributes {pipe.stage = 0 : i64} {
    return
  }
  func.func @e1() attributes {pipe.stage = 1 : i64} {
    return
  }
  // expected-error @+1 {{stage 0, action F1 on pipe.send to stage 1 (tag 0, tensor<4xf32>): no matching pipe.recv in stage 1 (2 sends of this tag per step, 1 receives)}}
  pipe.schedule stage 0 forward @f0 backward @e0 update @e0 actions [#pipe.action<forward, mb = 0>, #pipe.action<forward, mb = 1>, #pipe.action<backward, mb = 1>, #pipe.action<backward, mb = 0>, #pipe.action<update>]
  pipe.schedule stage 1 forward @f1 backward @e1 update @e1 actions [#pipe.action<forward, mb = 0>, #pipe.action<forward, mb = 1>, #pipe.action<backward, mb = 1>, #pipe.action<backward, mb = 0>, #pipe.action<update>]
}

// -----

// A per-step send needs a per-step receive (whose value later actions read),
// even where the counts agree (one micro-batch).
module attributes {pipe.stages = 2 : i64} {
  func.func @f0(%w: tensor<4xf32>) attributes {pipe.stage = 0 : i64} {
    pipe.send %w to 1 tag 0 per_step : tensor<4xf32>
    return
  }
  func.func @f1() attributes {pipe.stage = 1 : i64} {
    // expected-error @+1 {{stage 1 receives tag 0 per micro-batch but stage 0 sends it once per step}}
    %w = pipe.recv from 0 tag 0 : tensor<4xf32>
    return
  }
  func.func @e0() attributes {pipe.stage = 0 : i64} {
    return
  }
  func.func @e1() attributes {pipe.stage = 1 : i64} {
    return
  }
  pipe.schedule stage 0 forward @f0 backward @e0 update @e0 actions [#pipe.action<forward, mb = 0>, #pipe.action<backward, mb = 0>, #pipe.action<update>]
  pipe.schedule stage 1 forward @f1 backward @e1 update @e1 actions [#pipe.action<forward, mb = 0>, #pipe.action<backward, mb = 0>, #pipe.action<update>]
}

// -----

// A hand-broken ZB-H1: stage 1 runs W0 before B0 (the weight-gradient GEMMs
// need the operands B0 keeps). W actions have no transfers of their own; the
// schedule's verifier names the action.
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
  // expected-error @+1 {{'pipe.schedule' op action #2: W0 comes before B0 (the weight gradient needs the backward's operands)}}
  pipe.schedule stage 1 forward @f1 backward @b1 update @u1 actions [#pipe.action<forward, mb = 0>, #pipe.action<forward, mb = 1>, #pipe.action<weight, mb = 0>, #pipe.action<backward, mb = 0>, #pipe.action<backward, mb = 1>, #pipe.action<weight, mb = 1>, #pipe.action<update>]
}

// -----

// Two chunks per stage (pieces 0 and 2 on stage 0, 1 and 3 on stage 1),
// buffered sends: stage 0 runs chunk 1's forward (piece 2, which receives
// from piece 1 on stage 1) before chunk 0's (piece 0, whose send piece 1
// waits for): a cycle even with buffered sends. Peers are pieces; the
// messages name the stage holding each.
module attributes {pipe.stages = 4 : i64, pipe.sends = "buffered"} {
  func.func @p0(%x: tensor<4xf32>) attributes {pipe.stage = 0 : i64, pipe.phase = "forward"} {
    pipe.send %x to 1 tag 0 : tensor<4xf32>
    return
  }
  func.func @p1() attributes {pipe.stage = 1 : i64, pipe.phase = "forward"} {
    // expected-note @+1 {{stage 1 blocks in action F0 on pipe.recv from stage 0 (virtual stage 0) (tag 0, tensor<4xf32>)}}
    %x = pipe.recv from 0 tag 0 : tensor<4xf32>
    pipe.send %x to 2 tag 1 : tensor<4xf32>
    return
  }
  func.func @p2() attributes {pipe.stage = 2 : i64, pipe.phase = "forward"} {
    // expected-note @+1 {{stage 0 blocks in action F0c1 on pipe.recv from stage 1 (virtual stage 1) (tag 1, tensor<4xf32>)}}
    %x = pipe.recv from 1 tag 1 : tensor<4xf32>
    return
  }
  func.func @p3() attributes {pipe.stage = 3 : i64, pipe.phase = "forward"} {
    return
  }
  func.func @e0() attributes {pipe.stage = 0 : i64} {
    return
  }
  func.func @e1() attributes {pipe.stage = 1 : i64} {
    return
  }
  func.func @e2() attributes {pipe.stage = 2 : i64} {
    return
  }
  func.func @e3() attributes {pipe.stage = 3 : i64} {
    return
  }
  // expected-error @+1 {{the schedule deadlocks even with buffered sends: stage 0 blocks in action F0c1 on pipe.recv from stage 1 (virtual stage 1) (tag 1, tensor<4xf32>)}}
  pipe.schedule stage 0 forward [@p0, @p2] backward [@e0, @e2] update [@e0, @e2] actions [#pipe.action<forward, mb = 0, chunk = 1>, #pipe.action<forward, mb = 0>, #pipe.action<backward, mb = 0, chunk = 1>, #pipe.action<backward, mb = 0>, #pipe.action<update>]
  pipe.schedule stage 1 forward [@p1, @p3] backward [@e1, @e3] update [@e1, @e3] actions [#pipe.action<forward, mb = 0>, #pipe.action<forward, mb = 0, chunk = 1>, #pipe.action<backward, mb = 0, chunk = 1>, #pipe.action<backward, mb = 0>, #pipe.action<update>]
}

// -----

// Every piece on exactly one stage: piece 1 is named by both schedules.
module attributes {pipe.stages = 2 : i64} {
  func.func @p0() attributes {pipe.stage = 0 : i64} {
    return
  }
  func.func @p1() attributes {pipe.stage = 1 : i64} {
    return
  }
  pipe.schedule stage 0 forward [@p0, @p1] backward [@p0, @p1] update [@p0, @p1] actions [#pipe.action<forward, mb = 0>, #pipe.action<forward, mb = 0, chunk = 1>, #pipe.action<backward, mb = 0, chunk = 1>, #pipe.action<backward, mb = 0>, #pipe.action<update>]
  // expected-error @+1 {{virtual stage 1 is placed on stage 0 and on stage 1}}
  pipe.schedule stage 1 forward @p1 backward @p1 update @p1 actions [#pipe.action<forward, mb = 0>, #pipe.action<backward, mb = 0>, #pipe.action<update>]
}

// -----

// ... and piece 3 of 4 on none.
// expected-error @+1 {{virtual stage 3 has no pipe.schedule (no stage's schedule names its functions)}}
module attributes {pipe.stages = 4 : i64} {
  func.func @p0() attributes {pipe.stage = 0 : i64} {
    return
  }
  func.func @p1() attributes {pipe.stage = 1 : i64} {
    return
  }
  func.func @p2() attributes {pipe.stage = 2 : i64} {
    return
  }
  pipe.schedule stage 0 forward [@p0, @p2] backward [@p0, @p2] update [@p0, @p2] actions [#pipe.action<forward, mb = 0>, #pipe.action<forward, mb = 0, chunk = 1>, #pipe.action<backward, mb = 0, chunk = 1>, #pipe.action<backward, mb = 0>, #pipe.action<update>]
  pipe.schedule stage 1 forward @p1 backward @p1 update @p1 actions [#pipe.action<forward, mb = 0>, #pipe.action<backward, mb = 0>, #pipe.action<update>]
}

// -----

// A flush (S: wait until the stage's sends are received) that deadlocks:
// stage 1 receives stage 0's per-step message (sent in stage 0's update)
// before micro-batch 0's activation, which stage 0 waits on before W0.
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
    // expected-note @+1 {{stage 1 blocks in action F0 on pipe.recv from stage 0 (tag 3, tensor<4xf32>)}}
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
  // expected-error @+2 {{the schedule deadlocks even with buffered sends: stage 0 blocks in action S (a flush: it waits until the messages the stage sent are received)}}
  // expected-note @+1 {{stage 0 blocks in action S (a flush: it waits until the messages the stage sent are received)}}
  pipe.schedule stage 0 forward @f0 backward @b0 update @u0 actions [#pipe.action<forward, mb = 0>, #pipe.action<backward, mb = 0>, #pipe.action<flush>, #pipe.action<weight, mb = 0>, #pipe.action<update>]
  pipe.schedule stage 1 forward @f1 backward @b1 update @u1 actions [#pipe.action<forward, mb = 0>, #pipe.action<backward, mb = 0>, #pipe.action<update>]
}
