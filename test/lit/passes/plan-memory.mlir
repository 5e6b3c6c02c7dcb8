// gpipe-plan-memory: every value's place in its stage's arena, and the
// arena's layout (pipe.memory on the stage's pipe.schedule). Code generation
// prints these offsets (codegen/stage-from-ir.mlir).
// RUN: gpipe-opt %s --split-input-file --gpipe-plan-memory | FileCheck %s
// RUN: gpipe-opt %s --split-input-file --gpipe-plan-memory=target=cuda | FileCheck %s --check-prefix=CUDA
// RUN: gpipe-opt %s --split-input-file --gpipe-bf16-shadows --gpipe-plan-memory="target=cuda precision=bf16" | FileCheck %s --check-prefix=BF16
// RUN: not gpipe-opt %s --split-input-file --gpipe-plan-memory=target=tpu 2>&1 | FileCheck %s --check-prefix=BADTARGET
// RUN: not gpipe-opt %s --split-input-file --gpipe-plan-memory=precision=fp8 2>&1 | FileCheck %s --check-prefix=BADPRECISION
// shard-optimizer=2 (ZeRO-1): the update has no state of its own; the
// schedule holds the momentum of one replica's share of the accumulator's
// 9 floats (5, aligned to 64 bytes) after the accumulator, which
// gpipe-check-memory accepts.
// RUN: gpipe-opt %s --split-input-file --gpipe-plan-memory=shard-optimizer=2 --gpipe-check-memory | FileCheck %s --check-prefix=SHARD
// SHARD: pipe.sgd_update
// SHARD-NOT: pipe.state
// SHARD: pipe.schedule stage 0 {{.*}}optimizer = 64, gradients = 64, {{.*}}cleared_begin = 64, cleared_end = 128, {{.*}}, pipe.state = [#pipe.buffer<arena, offset = 128, bytes = 64>]}
// BADTARGET: error: gpipe-plan-memory: target must be cpu or cuda, got 'tpu'
// BADPRECISION: error: gpipe-plan-memory: precision must be fp32 or bf16, got 'fp8'

// One stage, SGD with momentum, M = 2 (GPipe: 2 stash slots). Long-lived,
// 64-byte aligned: the parameter w [0, 64), the momentum [64, 128), the
// accumulator [128, 192). Then the stash (2 slots of 64 + 64 bytes: the
// input x and the tanh the backward reads) from 192, then the temporaries
// from 448.
// CHECK-LABEL: func.func @forward(
// CHECK-SAME: %arg0: tensor<2x3xf32> {nn.input = "x", pipe.buffer = #pipe.buffer<stash, offset = 0, bytes = 64>}
// CHECK-SAME: %arg1: tensor<2xi64> {nn.input = "y", pipe.buffer = #pipe.buffer<arena, offset = 448, bytes = 64>}
// CHECK: nn.param @w {pipe.buffer = #pipe.buffer<arena, offset = 0, bytes = 64>}
// The GEMM's result is a temporary; exp and tanh are one fusion group: the
// exp's result stays in a register (no buffer); the tanh is stashed.
// CHECK-NEXT: nn.gemm {{.*}}pipe.buffer = #pipe.buffer<arena, offset = 512, bytes = 64>
// CHECK-NEXT: nn.exp %{{.+}} {pipe.fused = 0 : i64} :
// CHECK-NEXT: nn.tanh %{{.+}} {pipe.buffer = #pipe.buffer<stash, offset = 64, bytes = 64>, pipe.fused = 0 : i64}
// A reshape is a view of its input: no buffer.
// CHECK-NEXT: nn.reshape %{{.+}} : tensor<2x3xf32> -> tensor<6xf32>
// The GEMM's slot is free again once its fusion group has run: the loss
// takes it (first fit; the labels still hold 448).
// CHECK-NEXT: nn.softmax_cross_entropy {{.*}}pipe.buffer = #pipe.buffer<arena, offset = 512, bytes = 64>
// CHECK-LABEL: func.func @backward(
// CHECK-SAME: %arg0: tensor<2x3xf32> {pipe.buffer = #pipe.buffer<stash, offset = 0, bytes = 64>}
// CHECK-SAME: %arg1: tensor<2x3xf32> {pipe.buffer = #pipe.buffer<stash, offset = 64, bytes = 64>}
// CHECK: pipe.accumulate_grad %{{.+}} to @w {pipe.accumulator = #pipe.buffer<arena, offset = 128, bytes = 64>}
// CHECK-LABEL: func.func @update(
// CHECK: pipe.accumulated_grad @w {pipe.buffer = #pipe.buffer<arena, offset = 128, bytes = 64>}
// CHECK: pipe.sgd_update {{.*}}pipe.state = [#pipe.buffer<arena, offset = 64, bytes = 64>]
// CHECK: pipe.schedule stage 0 {{.*}} {pipe.memory = #pipe.memory_plan<target = "cpu", precision = "fp32", align = 64, arena = 576, parameters = 64, optimizer = 64, gradients = 64, constants = 0, shadows = 0, cleared_begin = 128, cleared_end = 192, stash_base = 192, stash_slot = 128, stash_slots = 2, transient_base = 448, transient = 128, scratch = 0>}

// For CUDA, 256-byte alignment, and the constant lives in the arena (init uploads
// it).
// CUDA-LABEL: func.func @backward(
// CUDA: nn.constant {pipe.buffer = #pipe.buffer<arena, offset = 768, bytes = 256>}
// CUDA: pipe.schedule stage 0 {{.*}} {pipe.memory = #pipe.memory_plan<target = "cuda", precision = "fp32", align = 256, arena = {{[0-9]+}}, parameters = 256, optimizer = 256, gradients = 256, constants = 256, shadows = 0, cleared_begin = 512, cleared_end = 768, stash_base = 1024, stash_slot = 512, stash_slots = 2,

// With bf16, w, read by GEMMs, keeps a bf16 copy after the constant; every
// nn.param of w (forward and update) points at it. The scratch holds the
// largest GEMM's other operands in bf16.
// BF16-LABEL: func.func @forward(
// BF16: nn.param @w {pipe.bf16_shadow, pipe.buffer = #pipe.buffer<arena, offset = 0, bytes = 256>, pipe.shadow = #pipe.buffer<arena, offset = 1024, bytes = 256>}
// BF16-LABEL: func.func @update(
// BF16: nn.param @w {pipe.bf16_shadow, pipe.buffer = #pipe.buffer<arena, offset = 0, bytes = 256>, pipe.shadow = #pipe.buffer<arena, offset = 1024, bytes = 256>}
// BF16: pipe.memory_plan<target = "cuda", precision = "bf16", {{.*}} shadows = 256, {{.*}} scratch = 512>
module attributes {pipe.microbatches = 2 : i64, pipe.stages = 1 : i64} {
  nn.parameter @w : tensor<3x3xf32>
  func.func @forward(%x: tensor<2x3xf32> {nn.input = "x"}, %y: tensor<2xi64> {nn.input = "y"}) -> (tensor<2x3xf32>, tensor<2x3xf32>) attributes {pipe.phase = "forward", pipe.stage = 0 : i64} {
    %w = nn.param @w : tensor<3x3xf32>
    %h = nn.gemm %x, %w {transB = true} : (tensor<2x3xf32>, tensor<3x3xf32>) -> tensor<2x3xf32>
    %e = nn.exp %h {pipe.fused = 0 : i64} : tensor<2x3xf32>
    %t = nn.tanh %e {pipe.fused = 0 : i64} : tensor<2x3xf32>
    %flat = nn.reshape %t : tensor<2x3xf32> -> tensor<6xf32>
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

// -----

// Before gpipe-schedule there are no stages: nothing to plan.
// CHECK-LABEL: func.func @unscheduled(
// CHECK-NOT: pipe.buffer
func.func @unscheduled(%x: tensor<4xf32>) -> tensor<4xf32> {
  %y = nn.relu %x : tensor<4xf32>
  return %y : tensor<4xf32>
}
