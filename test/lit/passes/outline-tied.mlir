// A weight tied across stages (used by the first GEMM, stage 0, and the last,
// stage 1): gpipe-partition gives the parameter to its first user's stage,
// which owns it (its only nn.param, its update). gpipe-outline-stages sends
// its value to the other stage once per step (`per_step`: in the first
// forward only; the user reads its one copy in every forward and backward),
// the user accumulates its share of the gradient over the micro-batches like
// a parameter of its own, and its update sends the sum once per step to the
// owner's update, which adds it to the owner's accumulated share. No
// per-micro-batch transfer of the 64x64 weight or its gradient is left.
// RUN: gpipe-opt %s --pass-pipeline='builtin.module(func.func(gpipe-microbatch{microbatches=2}, gpipe-partition{stages=2}, gpipe-autodiff, gpipe-optimizer), cse, gpipe-outline-stages)' | FileCheck %s
// With a schedule (checked for deadlock) and a memory plan, GPipe and 1F1B:
// the user's copy is long-lived, not in its stash.
// RUN: gpipe-opt %s --pass-pipeline='builtin.module(func.func(gpipe-microbatch{microbatches=2}, gpipe-partition{stages=2}, gpipe-autodiff, gpipe-optimizer), cse, gpipe-outline-stages, gpipe-schedule, gpipe-plan-memory, gpipe-check-memory)' | FileCheck %s --check-prefix=PLAN
// RUN: gpipe-opt %s --pass-pipeline='builtin.module(func.func(gpipe-microbatch{microbatches=2}, gpipe-partition{stages=2}, gpipe-autodiff, gpipe-optimizer), cse, gpipe-outline-stages, gpipe-remat, gpipe-schedule{schedule=1f1b}, func.func(gpipe-inline-remat), gpipe-plan-memory, gpipe-check-memory)' | FileCheck %s --check-prefix=PLAN
// The C++ of each stage: the value's transfer runs in micro-batch 0's forward
// only (the first forward of both stages' GPipe schedules), into stage 1's
// long-lived copy (arena, not the stash S); the gradient sum crosses in the
// updates (gp_transfer phase 2), once per step.
// RUN: gpipe-opt %s --pass-pipeline='builtin.module(func.func(gpipe-microbatch{microbatches=2}, gpipe-partition{stages=2}, gpipe-autodiff, gpipe-optimizer), cse, gpipe-outline-stages, gpipe-schedule, gpipe-plan-memory)' | gpipe-translate --gpipe-stage-to-cpp --stage 0 | FileCheck %s --check-prefix=CPP0
// RUN: gpipe-opt %s --pass-pipeline='builtin.module(func.func(gpipe-microbatch{microbatches=2}, gpipe-partition{stages=2}, gpipe-autodiff, gpipe-optimizer), cse, gpipe-outline-stages, gpipe-schedule, gpipe-plan-memory)' | gpipe-translate --gpipe-stage-to-cpp --stage 1 | FileCheck %s --check-prefix=CPP1

// CPP0:      static const gp_transfer kTransfers[] = {
// CPP0:        {1, 0, 1, [[W:[0-9]+]], 16384LL, 1},
// CPP0:        {0, 2, 1, [[G:[0-9]+]], 16384LL, 0},
// CPP0-LABEL: static void forward(
// CPP0:        if (mb == 0) gp_send(ctx, 1, [[W]], ((const float *)(A + {{[0-9]+}})), 16384);
// CPP0-LABEL: static void backward(
// CPP0-NOT:    16384);
// CPP0-LABEL: static void update(
// CPP0:        gp_recv(ctx, 1, [[G]], ((float *)(A + {{[0-9]+}})), 16384);

// CPP1:      static const gp_transfer kTransfers[] = {
// CPP1:        {0, 0, 0, [[W:[0-9]+]], 16384LL, 1},
// CPP1:        {1, 2, 0, [[G:[0-9]+]], 16384LL, 0},
// CPP1-LABEL: static void forward(
// CPP1:        if (mb == 0) gp_recv(ctx, 0, [[W]], ((float *)(A + {{[0-9]+}})), 16384);
// CPP1-LABEL: static void backward(
// CPP1-NOT:    16384);
// CPP1-LABEL: static void update(
// CPP1:        gp_send(ctx, 0, [[G]], ((const float *)(A + {{[0-9]+}})), 16384);

// CHECK-LABEL: func.func @stage0_forward(
// CHECK:         %[[W:.+]] = nn.param @tied : tensor<64x64xf32>
// CHECK:         nn.gemm %{{.+}}, %[[W]]
// CHECK:         pipe.send %[[W]] to 1 tag [[WTAG:[0-9]+]] per_step : tensor<64x64xf32>
// CHECK-LABEL: func.func @stage0_backward(
// CHECK-NOT:     tensor<64x64xf32>
// CHECK:         %[[G0:.+]] = nn.gemm {{.+}} -> tensor<64x64xf32>
// CHECK-NOT:     pipe.recv
// CHECK:         pipe.accumulate_grad %[[G0]] to @tied
// CHECK-LABEL: func.func @stage0_update(
// CHECK:         %[[G1:.+]] = pipe.recv from 1 tag [[GTAG:[0-9]+]] : tensor<64x64xf32>
// CHECK:         %[[A:.+]] = pipe.accumulated_grad @tied
// CHECK:         %[[SUM:.+]] = nn.add %[[A]], %[[G1]]
// CHECK:         %[[P:.+]] = nn.param @tied
// CHECK:         pipe.sgd_update %[[P]], %[[SUM]]
// CHECK-LABEL: func.func @stage1_forward(
// CHECK-NOT:     nn.param
// CHECK:         %[[RW:.+]] = pipe.recv from 0 tag [[WTAG]] per_step : tensor<64x64xf32>
// CHECK:         nn.gemm %{{.+}}, %[[RW]]
// CHECK:         return {{.*}}%[[RW]]
// CHECK-LABEL: func.func @stage1_backward(
// CHECK-NOT:     nn.param
// CHECK:         %[[G:.+]] = nn.gemm {{.+}} -> tensor<64x64xf32>
// CHECK:         pipe.accumulate_grad %[[G]] to @tied : tensor<64x64xf32>
// CHECK-NOT:     : tensor<64x64xf32>
// CHECK:         return
// CHECK-LABEL: func.func @stage1_update(
// CHECK-NOT:     nn.param
// CHECK:         %[[S:.+]] = pipe.accumulated_grad @tied : tensor<64x64xf32>
// CHECK-NEXT:    pipe.send %[[S]] to 0 tag [[GTAG]] : tensor<64x64xf32>
// CHECK-NEXT:    return

// The plan: stage 1 keeps one copy of the weight (16384 bytes, counted with
// its parameters) and the backward reads it there; its stash slot holds only
// the micro-batch's activations and labels (a few KB: too small for a copy).
// PLAN-LABEL: func.func @stage1_forward(
// PLAN:         pipe.recv from 0 tag {{[0-9]+}} per_step {pipe.buffer = #pipe.buffer<arena, offset = [[COPY:[0-9]+]], bytes = 16384>} : tensor<64x64xf32>
// PLAN-LABEL: func.func @stage1_backward(
// PLAN-SAME:    tensor<64x64xf32> {pipe.buffer = #pipe.buffer<arena, offset = [[COPY]], bytes = 16384>}
// PLAN:         pipe.schedule stage 1
// PLAN-SAME:    parameters = 16384
// PLAN-SAME:    stash_slot = {{[0-9][0-9]?[0-9]?[0-9]?}},

nn.parameter @tied : tensor<64x64xf32>
func.func @shared_weight(%x: tensor<8x64xf32>, %l: tensor<8xi64>) -> (tensor<f32> {nn.loss}) {
  %w = nn.param @tied : tensor<64x64xf32>
  %h = nn.gemm %x, %w : (tensor<8x64xf32>, tensor<64x64xf32>) -> tensor<8x64xf32>
  %t = nn.tanh %h : tensor<8x64xf32>
  %y = nn.gemm %t, %w : (tensor<8x64xf32>, tensor<64x64xf32>) -> tensor<8x64xf32>
  %loss = nn.softmax_cross_entropy %y, %l : tensor<8x64xf32>, tensor<8xi64>
  return %loss : tensor<f32>
}
