// Code generation from pipeline IR (gpipe-translate), not from ONNX: a
// two-stage, two-micro-batch pipeline (stage 0: a GEMM; stage 1: exp and the
// loss), as gpipe-compile --emit mlir prints it lowered (gpipe-lower marked
// the weight gradient's accumulation in_place and deferred), with one
// location added; gpipe-plan-memory adds the memory plan the printer prints.
// Stage 0 shows the memory plan (parameters, the accumulator, the deferred
// weight-gradient GEMM's operands, two stash slots, temporaries, all 64-byte
// aligned, in one arena), the schedule as an action table, the transfers,
// and the deferred weight-gradient GEMM (each backward keeps its operands;
// the update multiplies once over both micro-batches). Stage 1: exp as a
// loop, its result kept in the stash for the backward; the loss divides by
// the mini-batch size 4 (2 micro-batches of 2).
// RUN: gpipe-opt %s --gpipe-plan-memory --mlir-print-debuginfo | gpipe-translate --gpipe-stage-to-cpp --stage 0 | FileCheck %s --check-prefix=S0
// RUN: gpipe-opt %s --gpipe-plan-memory --mlir-print-debuginfo | gpipe-translate --gpipe-stage-to-cpp --stage 1 | FileCheck %s --check-prefix=S1
// Without the marks the printer follows the plain IR: the backward computes
// the weight gradient into a buffer of its own, pipe.accumulate_grad adds it
// to the accumulator, and the update multiplies nothing.
// RUN: sed 's/ {deferred, in_place}//' %s | gpipe-opt --gpipe-plan-memory --mlir-print-debuginfo | gpipe-translate --gpipe-stage-to-cpp --stage 0 | FileCheck %s --check-prefix=PLAIN
// The printer prints the plan, it does not make one: moved by hand in the
// planned IR, the forward GEMM's result is written where the IR says.
// RUN: gpipe-opt %s --gpipe-plan-memory | sed 's/offset = 384, bytes = 64>, transB/offset = 1024, bytes = 64>, transB/' | gpipe-translate --gpipe-stage-to-cpp --stage 0 | FileCheck %s --check-prefix=MOVED
// MOVED-LABEL: static void forward(
// MOVED: gp_gemm(0, 1, 2, 3, 3, 1.0f, ((const float *)(S + 0)), 3, ((const float *)(A + 0)), 3, 0.0f, ((float *)(A + 1024)), 3);
// Without a plan, or with one for another target, it refuses.
// RUN: not gpipe-translate --gpipe-stage-to-cpp --stage 0 %s 2>&1 | FileCheck %s --check-prefix=NOPLAN
// NOPLAN: error: code generation needs the memory plan (pipe.memory): run gpipe-lower, which runs gpipe-plan-memory
// RUN: gpipe-opt %s --gpipe-plan-memory | not gpipe-translate --gpipe-stage-to-cpp --stage 0 --target cuda 2>&1 | FileCheck %s --check-prefix=OTHERPLAN
// OTHERPLAN: error: the memory plan is for target cpu, precision fp32, but code generation is for cuda, fp32: lower with gpipe-lower="target=cuda precision=fp32"
// Fusion groups are checked: a GEMM and a parameter cannot be one unit.
// RUN: sed 's/{transB = true}/{pipe.fused = 0 : i64, transB = true}/; s/nn.param @w : tensor<3x3xf32>$/nn.param @w {pipe.fused = 0 : i64} : tensor<3x3xf32>/' %s | gpipe-opt --gpipe-plan-memory --mlir-print-debuginfo | not gpipe-translate --gpipe-stage-to-cpp --stage 0 2>&1 | FileCheck %s --check-prefix=BADGROUP
// BADGROUP: error: code generation cannot emit this fusion group (pipe.fused) as one unit: it needs elementwise ops of one result shape, or on CUDA a GEMM and the relu that is its only reader
// PLAIN-LABEL: static void backward(
// PLAIN: // nn.gemm
// PLAIN-NEXT: gp_gemm(1, 0, 3, 3, 2, 1.0f,
// PLAIN: // pipe.accumulate_grad
// PLAIN-NEXT: {
// PLAIN: acc[i] += g[i];
// PLAIN-LABEL: static void update(
// PLAIN-NOT: gp_gemm

// S0: static const gp_tensor_desc kParams[] = {
// S0-NEXT: {"w", "w.npy", GP_F32, 2, shape1, 0},
// S0: static const gp_action kActions[] = {
// S0-NEXT: {GP_FORWARD, 0, 0},
// S0-NEXT: {GP_FORWARD, 1, 0},
// S0-NEXT: {GP_BACKWARD, 1, 0},
// S0-NEXT: {GP_BACKWARD, 0, 0},
// S0-NEXT: {GP_UPDATE, -1, 0},
// S0-NEXT: };
// S0: static const gp_transfer kTransfers[] = {
// S0-NEXT: {1, 0, 1, 0, 24LL, 0},
// S0-NEXT: {0, 1, 1, 1, 24LL, 0},
// S0-LABEL: static void forward(
// S0: unsigned char *S = A + 256LL + mb * 64LL;
// S0: gp_load_input(ctx, 0, mb, ((float *)(S + 0)));
// S0-NEXT: // nn.gemm (node 'h')
// S0-NEXT: gp_gemm(0, 1, 2, 3, 3, 1.0f, ((const float *)(S + 0)), 3, ((const float *)(A + 0)), 3, 0.0f, ((float *)(A + 384)), 3);
// S0-NEXT: // pipe.send
// S0-NEXT: gp_send(ctx, 1, 0, ((const float *)(A + 384)), 24);
// S0-LABEL: static void backward(
// S0: gp_recv(ctx, 1, 1, ((float *)(A + 384)), 24);
// S0-NEXT: // nn.gemm
// S0-NEXT: // weight gradient of 'w': operands kept for the update's GEMM
// S0-NEXT: std::memcpy(A + 128 + mb * 24LL, ((const float *)(A + 384)), 24);
// S0-NEXT: std::memcpy(A + 192 + mb * 24LL, ((const float *)(S + 0)), 24);
// S0-LABEL: static void update(
// S0: // weight gradient of 'w' over all 2 micro-batches
// S0-NEXT: gp_gemm(1, 0, 3, 3, 4, 1.0f, (const float *)(A + 128), 3, (const float *)(A + 192), 3, 1.0f, (float *)(A + 64), 3);
// S0-NEXT: // pipe.sgd_update
// S0-NEXT: gp_sgd_update(((float *)(A + 0)), ((const float *)(A + 64)), nullptr, 9, 0.1f, 0.0f, 0.0f, 0, ctx->step);
// S0-NEXT: std::memset(A + 64, 0, 64);
// S0: static const gp_program kProgram = {"stage0", 0, 2, 2, 4LL, 1, kInputs, 1, kParams, 448LL, 5, kActions, forward, backward, update, 0, "", 2, kTransfers, GP_TARGET_CPU, 0LL, nullptr, 0, 0, kStates, nullptr, 1, nullptr, 0, nullptr, 1, 0, 0LL};

// S1-LABEL: static void forward(
// S1: unsigned char *S = A + 0LL + mb * 128LL;
// S1: gp_recv(ctx, 0, 0, ((float *)(A + [[T:[0-9]+]])), 24);
// S1-NEXT: // nn.exp
// S1-NEXT: {
// S1-NEXT: float *o0 = ((float *)(S + 0));
// S1-NEXT: const float *x0 = ((const float *)(A + [[T]]));
// S1-NEXT: for (int64_t i = 0; i < 6; ++i) {
// S1-NEXT: const float v0 = std::exp(x0[i]);
// S1: gp_softmax_xent_fwd(((const float *)(S + 0)), ((const int64_t *)(S + 64)), 2, 3, 0, 0LL, 4.0,
// S1-LABEL: static void backward(
// S1: // nn.mul
// S1: const float *x1 = ((const float *)(S + 0));
// S1: gp_send(ctx, 0, 1,
// S1: static const gp_program kProgram = {"stage1", 1, 2, 2, 4LL, 1, kInputs, 0, kParams, 384LL, 5, kActions,

module attributes {pipe.batch_size = 4 : i64, pipe.microbatches = 2 : i64, pipe.schedule = "gpipe", pipe.sends = "blocking", pipe.stages = 2 : i64} {
  nn.parameter @w : tensor<3x3xf32>
  func.func @stage0_forward(%arg0: tensor<2x3xf32> {nn.input = "x"}) -> tensor<2x3xf32> attributes {pipe.phase = "forward", pipe.stage = 0 : i64} {
    %0 = nn.param @w : tensor<3x3xf32>
    %1 = nn.gemm %arg0, %0 {transB = true} : (tensor<2x3xf32>, tensor<3x3xf32>) -> tensor<2x3xf32> loc("h")
    pipe.send %1 to 1 tag 0 : tensor<2x3xf32>
    return %arg0 : tensor<2x3xf32>
  }
  func.func @stage0_backward(%arg0: tensor<2x3xf32>) attributes {pipe.phase = "backward", pipe.stage = 0 : i64} {
    %0 = pipe.recv from 1 tag 1 : tensor<2x3xf32>
    %1 = nn.gemm %0, %arg0 {transA = true} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<3x3xf32>
    pipe.accumulate_grad %1 to @w {deferred, in_place} : tensor<3x3xf32>
    return
  }
  func.func @stage0_update() attributes {pipe.phase = "update", pipe.stage = 0 : i64} {
    %0 = pipe.accumulated_grad @w : tensor<3x3xf32>
    %1 = nn.param @w : tensor<3x3xf32>
    pipe.sgd_update %1, %0 {lr = 1.000000e-01 : f64, momentum = 0.000000e+00 : f64, nesterov = false, weight_decay = 0.000000e+00 : f64} : tensor<3x3xf32>
    return
  }
  func.func @stage1_forward(%arg0: tensor<2xi64> {nn.input = "y"}) -> (tensor<2x3xf32>, tensor<2xi64>) attributes {pipe.phase = "forward", pipe.stage = 1 : i64} {
    %0 = pipe.recv from 0 tag 0 : tensor<2x3xf32>
    %1 = nn.exp %0 : tensor<2x3xf32>
    %2 = nn.softmax_cross_entropy %1, %arg0 {microbatches = 2 : i64} : tensor<2x3xf32>, tensor<2xi64>
    pipe.report_loss %2 : tensor<f32>
    return %1, %arg0 : tensor<2x3xf32>, tensor<2xi64>
  }
  func.func @stage1_backward(%arg0: tensor<2x3xf32>, %arg1: tensor<2xi64>) attributes {pipe.phase = "backward", pipe.stage = 1 : i64} {
    %0 = nn.constant dense<1.000000e+00> : tensor<f32>
    %1 = nn.softmax_cross_entropy_grad %arg0, %arg1, %0 {microbatches = 2 : i64} : tensor<2x3xf32>, tensor<2xi64>
    %2 = nn.mul %1, %arg0 : tensor<2x3xf32>, tensor<2x3xf32> -> tensor<2x3xf32>
    pipe.send %2 to 0 tag 1 : tensor<2x3xf32>
    return
  }
  func.func @stage1_update() attributes {pipe.phase = "update", pipe.stage = 1 : i64} {
    return
  }
  pipe.schedule stage 0 forward @stage0_forward backward @stage0_backward update @stage0_update actions [#pipe.action<forward, mb = 0>, #pipe.action<forward, mb = 1>, #pipe.action<backward, mb = 1>, #pipe.action<backward, mb = 0>, #pipe.action<update>] stash_slots 2
  pipe.schedule stage 1 forward @stage1_forward backward @stage1_backward update @stage1_update actions [#pipe.action<forward, mb = 0>, #pipe.action<forward, mb = 1>, #pipe.action<backward, mb = 1>, #pipe.action<backward, mb = 0>, #pipe.action<update>] stash_slots 2
}
