// gpipe-plan-memory's errors on IR it cannot plan.
// RUN: gpipe-opt %s --split-input-file --gpipe-plan-memory --verify-diagnostics

// Two stages, one scheduled.
// expected-error @+1 {{stage 1 lacks its functions or its pipe.schedule; run gpipe-outline-stages and gpipe-schedule first}}
module attributes {pipe.stages = 2 : i64} {
  func.func @f() attributes {pipe.phase = "forward", pipe.stage = 0 : i64} {
    return
  }
  func.func @b() attributes {pipe.phase = "backward", pipe.stage = 0 : i64} {
    return
  }
  func.func @u() attributes {pipe.phase = "update", pipe.stage = 0 : i64} {
    return
  }
  pipe.schedule stage 0 forward @f backward @b update @u actions [#pipe.action<forward, mb = 0>, #pipe.action<backward, mb = 0>, #pipe.action<update>]
}

// -----

// A parameter is in the arena already: the forward must not stash it.
module attributes {pipe.stages = 1 : i64} {
  nn.parameter @w : tensor<4xf32>
  func.func @f() -> tensor<4xf32> attributes {pipe.phase = "forward", pipe.stage = 0 : i64} {
    // expected-error @+1 {{a parameter or constant is stashed (the forward returns it): it is in the arena already}}
    %w = nn.param @w : tensor<4xf32>
    return %w : tensor<4xf32>
  }
  func.func @b(%w: tensor<4xf32>) attributes {pipe.phase = "backward", pipe.stage = 0 : i64} {
    return
  }
  func.func @u() attributes {pipe.phase = "update", pipe.stage = 0 : i64} {
    return
  }
  pipe.schedule stage 0 forward @f backward @b update @u actions [#pipe.action<forward, mb = 0>, #pipe.action<backward, mb = 0>, #pipe.action<update>]
}

// -----

// Recomputation must be inlined first (gpipe-inline-remat).
module attributes {pipe.stages = 1 : i64} {
  func.func @f() attributes {pipe.phase = "forward", pipe.stage = 0 : i64} {
    return
  }
  func.func @b(%x: tensor<4xf32>) attributes {pipe.phase = "backward", pipe.stage = 0 : i64} {
    // expected-error @+1 {{gpipe-plan-memory needs the recomputation inlined: run gpipe-inline-remat first}}
    %r = pipe.remat (%x) : (tensor<4xf32>) -> tensor<4xf32> {
    ^bb0(%a: tensor<4xf32>):
      %y = nn.relu %a : tensor<4xf32>
      pipe.yield %y : tensor<4xf32>
    }
    return
  }
  func.func @u() attributes {pipe.phase = "update", pipe.stage = 0 : i64} {
    return
  }
  pipe.schedule stage 0 forward @f backward @b update @u actions [#pipe.action<forward, mb = 0>, #pipe.action<backward, mb = 0>, #pipe.action<update>]
}
