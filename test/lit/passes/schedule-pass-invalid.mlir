// gpipe-schedule errors: a schedule that is not registered, and a stage
// without its outlined functions (here stage 1 of 2).
// RUN: not gpipe-opt %s --gpipe-schedule=schedule=zb 2>&1 | FileCheck %s --check-prefix=KIND
// RUN: not gpipe-opt %s --gpipe-schedule 2>&1 | FileCheck %s --check-prefix=FUNCS
// A schedule's requirements on K, M and V (here pipe.stages 2 as K*V):
// RUN: not gpipe-opt %s --gpipe-schedule="schedule=interleaved virtual-stages=2" 2>&1 | FileCheck %s --check-prefix=ILK
// RUN: not gpipe-opt %s --gpipe-schedule="schedule=gpipe virtual-stages=2" 2>&1 | FileCheck %s --check-prefix=ONECHUNK
// RUN: not gpipe-opt %s --gpipe-schedule="schedule=interleaved virtual-stages=3" 2>&1 | FileCheck %s --check-prefix=DIVIDE

// KIND: error: unknown schedule 'zb' (registered: gpipe, 1f1b, zbh1, zbh2, interleaved, zbv, bfpp)
// FUNCS: error: stage 1 lacks its functions; run gpipe-outline-stages first
// ILK: error: --schedule interleaved needs --stages >= 2 (its chunks pass micro-batches from stage to stage), got 1
// ONECHUNK: error: --schedule gpipe runs one model chunk per stage: --virtual-stages must be 1, got 2
// DIVIDE: error: virtual-stages (3) must be >= 1 and divide the module's pipe.stages (2, the pieces gpipe-partition cut)
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
