// pipe.schedule's verifier with a negative module pipe.microbatches: a
// diagnostic naming the attribute, not a crash.
// RUN: gpipe-opt %s --verify-diagnostics

module attributes {pipe.microbatches = -1 : i64} {
  func.func @e0() attributes {pipe.stage = 0 : i64} {
    return
  }
  // expected-error @+1 {{pipe.microbatches}}
  pipe.schedule stage 0 forward @e0 backward @e0 update @e0 actions ["U"]
}
