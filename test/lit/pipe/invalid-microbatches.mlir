// A module pipe.microbatches out of range: a diagnostic naming the attribute,
// not a crash. Negative: the dialect's attribute verifier, on the module;
// above 2^20: pipe.schedule's verifier.
// RUN: gpipe-opt %s --split-input-file --verify-diagnostics

// expected-error @+1 {{'builtin.module' op attribute 'pipe.microbatches' must be an i64 >= 1, got -1 : i64}}
module attributes {pipe.microbatches = -1 : i64} {
  func.func @e0() attributes {pipe.stage = 0 : i64} {
    return
  }
  pipe.schedule stage 0 forward @e0 backward @e0 update @e0 actions [#pipe.action<update>]
}

// -----

module attributes {pipe.microbatches = 2097152 : i64} {
  func.func @e0() attributes {pipe.stage = 0 : i64} {
    return
  }
  // expected-error @+1 {{'pipe.schedule' op the module's pipe.microbatches must be in [1, 2^20], got 2097152}}
  pipe.schedule stage 0 forward @e0 backward @e0 update @e0 actions [#pipe.action<update>]
}
