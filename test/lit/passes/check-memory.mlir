// gpipe-check-memory: the plan gpipe-plan-memory wrote is checked against
// the IR and the schedule. The plan of this one-stage, two-micro-batch
// module (passes/plan-memory.mlir shows it) passes; each sed below breaks it
// in one way, and the checker names what broke, where.
// RUN: gpipe-opt %s --gpipe-plan-memory --gpipe-check-memory | FileCheck %s --check-prefix=OK
// OK: pipe.memory = #pipe.memory_plan<
//
// Two temporaries alive together share bytes: the loss onto the labels.
// RUN: gpipe-opt %s --gpipe-plan-memory | sed 's/microbatches = 2 : i64, pipe.buffer = #pipe.buffer<arena, offset = 512/microbatches = 2 : i64, pipe.buffer = #pipe.buffer<arena, offset = 448/' | not gpipe-opt --gpipe-check-memory 2>&1 | FileCheck %s --check-prefix=OVERLAP
// OVERLAP: error: stage 0: this value's buffer #pipe.buffer<arena, offset = 448, bytes = 64> overlaps #pipe.buffer<arena, offset = 448, bytes = 64>, which holds a value still alive
//
// One stash slot for a schedule that keeps two micro-batches in flight.
// RUN: gpipe-opt %s --gpipe-plan-memory | sed 's/stash_slots = 2, transient_base/stash_slots = 1, transient_base/' | not gpipe-opt --gpipe-check-memory 2>&1 | FileCheck %s --check-prefix=SLOTS
// SLOTS: error: stage 0: action F1 stashes micro-batch 1 in slot 0, which still holds micro-batch 0 (its backward has not run); the plan has 1 stash slot(s)
//
// The backward's accumulator is not the update's.
// RUN: gpipe-opt %s --gpipe-plan-memory | sed 's/pipe.accumulator = #pipe.buffer<arena, offset = 128/pipe.accumulator = #pipe.buffer<arena, offset = 64/' | not gpipe-opt --gpipe-check-memory 2>&1 | FileCheck %s --check-prefix=TWO
// TWO: error: stage 0: the accumulator of 'w' is at #pipe.buffer<arena, offset = 128, bytes = 64> here but at #pipe.buffer<arena, offset = 64, bytes = 64> elsewhere
//
// The momentum on top of the parameter.
// RUN: gpipe-opt %s --gpipe-plan-memory | sed 's/pipe.state = \[#pipe.buffer<arena, offset = 64/pipe.state = [#pipe.buffer<arena, offset = 0/' | not gpipe-opt --gpipe-check-memory 2>&1 | FileCheck %s --check-prefix=LONG
// LONG: error: stage 0: parameter 'w' at #pipe.buffer<arena, offset = 0, bytes = 64> overlaps optimizer state #0 of 'w' at #pipe.buffer<arena, offset = 0, bytes = 64>
//
// --shard-optimizer: the replica's share of the momentum (on the schedule)
// on top of the accumulator.
// RUN: gpipe-opt %s --gpipe-plan-memory=shard-optimizer=2 | sed 's/pipe.state = \[#pipe.buffer<arena, offset = 128/pipe.state = [#pipe.buffer<arena, offset = 64/' | not gpipe-opt --gpipe-check-memory 2>&1 | FileCheck %s --check-prefix=SHARE
// SHARE: error: stage 0: the accumulator of 'w' at #pipe.buffer<arena, offset = 64, bytes = 64> overlaps optimizer state share #0 at #pipe.buffer<arena, offset = 64, bytes = 64>
//
// The backward reads a stashed value from where the forward did not keep it.
// RUN: gpipe-opt %s --gpipe-plan-memory | sed 's/%arg1: tensor<2x3xf32> {pipe.buffer = #pipe.buffer<stash, offset = 64/%arg1: tensor<2x3xf32> {pipe.buffer = #pipe.buffer<stash, offset = 0/' | not gpipe-opt --gpipe-check-memory 2>&1 | FileCheck %s --check-prefix=STASH
// STASH: error: stage 0: stashed value #1 is kept at #pipe.buffer<stash, offset = 64, bytes = 64> but read at #pipe.buffer<stash, offset = 0, bytes = 64> (a slot has 128 bytes)
//
// A temporary past the end of the temporaries.
// RUN: gpipe-opt %s --gpipe-plan-memory | sed 's/{pipe.buffer = #pipe.buffer<arena, offset = 512, bytes = 64>, transB/{pipe.buffer = #pipe.buffer<arena, offset = 576, bytes = 64>, transB/' | not gpipe-opt --gpipe-check-memory 2>&1 | FileCheck %s --check-prefix=OUTSIDE
// OUTSIDE: error: stage 0: temporary at #pipe.buffer<arena, offset = 576, bytes = 64> is not an aligned buffer of its size inside the temporaries [448, 576)
//
// A temporary among the long-lived objects.
// RUN: gpipe-opt %s --gpipe-plan-memory | sed 's/{pipe.buffer = #pipe.buffer<arena, offset = 512, bytes = 64>, transB/{pipe.buffer = #pipe.buffer<arena, offset = 64, bytes = 64>, transB/' | not gpipe-opt --gpipe-check-memory 2>&1 | FileCheck %s --check-prefix=TEMPLONG
// TEMPLONG: error: stage 0: this value's buffer #pipe.buffer<arena, offset = 64, bytes = 64> lies in the long-lived part of the arena [0, 192), but the value is a temporary
//
// A value without a buffer.
// RUN: gpipe-opt %s --gpipe-plan-memory | sed 's/{pipe.buffer = #pipe.buffer<arena, offset = 512, bytes = 64>, transB/{transB/' | not gpipe-opt --gpipe-check-memory 2>&1 | FileCheck %s --check-prefix=NOBUFFER
// NOBUFFER: error: stage 0: this value has no buffer; run gpipe-plan-memory
//
// No plan at all.
// RUN: not gpipe-opt %s --gpipe-check-memory 2>&1 | FileCheck %s --check-prefix=NOPLAN
// NOPLAN: error: stage 0 has no memory plan (pipe.memory): run gpipe-plan-memory
module attributes {pipe.microbatches = 2 : i64, pipe.stages = 1 : i64} {
  nn.parameter @w : tensor<3x3xf32>
  func.func @forward(%x: tensor<2x3xf32> {nn.input = "x"}, %y: tensor<2xi64> {nn.input = "y"}) -> (tensor<2x3xf32>, tensor<2x3xf32>) attributes {pipe.phase = "forward", pipe.stage = 0 : i64} {
    %w = nn.param @w : tensor<3x3xf32>
    %h = nn.gemm %x, %w {transB = true} : (tensor<2x3xf32>, tensor<3x3xf32>) -> tensor<2x3xf32>
    %e = nn.exp %h {pipe.fused = 0 : i64} : tensor<2x3xf32>
    %t = nn.tanh %e {pipe.fused = 0 : i64} : tensor<2x3xf32>
    %l = nn.softmax_cross_entropy %t, %y {microbatches = 2 : i64} : tensor<2x3xf32>, tensor<2xi64>
    pipe.report_loss %l : tensor<f32>
    return %x, %t : tensor<2x3xf32>, tensor<2x3xf32>
  }
  func.func @backward(%x: tensor<2x3xf32>, %t: tensor<2x3xf32>) attributes {pipe.phase = "backward", pipe.stage = 0 : i64} {
    %c = nn.constant dense<2.000000e+00> : tensor<2x3xf32>
    %g = nn.mul %t, %c : tensor<2x3xf32>, tensor<2x3xf32> -> tensor<2x3xf32>
    %dw = nn.gemm %g, %x {transA = true} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<3x3xf32>
    pipe.accumulate_grad %dw to @w : tensor<3x3xf32>
    return
  }
  func.func @update() attributes {pipe.phase = "update", pipe.stage = 0 : i64} {
    %g = pipe.accumulated_grad @w : tensor<3x3xf32>
    %w = nn.param @w : tensor<3x3xf32>
    pipe.sgd_update %w, %g {lr = 0.1 : f64, momentum = 0.9 : f64, nesterov = false, weight_decay = 0.0 : f64} : tensor<3x3xf32>
    return
  }
  pipe.schedule stage 0 forward @forward backward @backward update @update actions [#pipe.action<forward, mb = 0>, #pipe.action<forward, mb = 1>, #pipe.action<backward, mb = 1>, #pipe.action<backward, mb = 0>, #pipe.action<update>] stash_slots 2
}
