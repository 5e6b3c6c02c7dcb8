// gpipe-schedule errors: a schedule that is not registered, and a stage
// without its outlined functions (here stage 1 of 2).
// RUN: not gpipe-opt %s --gpipe-schedule=schedule=zb 2>&1 | FileCheck %s --check-prefix=KIND
// RUN: not gpipe-opt %s --gpipe-schedule 2>&1 | FileCheck %s --check-prefix=FUNCS

// KIND: error: unknown schedule 'zb' (registered: gpipe, 1f1b, zbh1, interleaved)
// FUNCS: error: stage 1 lacks its functions; run gpipe-outline-stages first
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
  func.func @f1() attributes {pipe.phase = "forward", pipe.stage = 1 : i64} {
    return
  }
}
