// gpipe-check-schedule on a module whose pipe.stages is negative: a
// diagnostic naming the attribute, not a crash.
// RUN: gpipe-opt %s --gpipe-check-schedule --verify-diagnostics

// expected-error @+1 {{pipe.stages}}
module attributes {pipe.stages = -1 : i64} {
  func.func @e0() attributes {pipe.stage = 0 : i64} {
    return
  }
  pipe.schedule stage 0 forward @e0 backward @e0 update @e0 actions [#pipe.action<forward, mb = 0>, #pipe.action<backward, mb = 0>, #pipe.action<update>]
}
