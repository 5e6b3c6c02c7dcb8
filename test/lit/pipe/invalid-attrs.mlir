// The pipe dialect's discardable attributes (pipe.stage, pipe.phase,
// pipe.stages, pipe.microbatches, pipe.batch_size, pipe.remat, pipe.schedule,
// pipe.sends, the lowering's pipe.fused and pipe.bf16_shadow, and memory
// planning's pipe.buffer, pipe.shadow, pipe.accumulator, pipe.state,
// pipe.deferred_operands and pipe.memory), and the #pipe.buffer and
// #pipe.memory_plan attributes: what PipeDialect::verifyOperationAttribute,
// the argument and result hooks, and the attributes' verifiers reject. One
// case per message.
// RUN: gpipe-opt %s --split-input-file --verify-diagnostics

// pipe.stage: stages are numbered from 0.
func.func @stage_negative(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'nn.relu' op attribute 'pipe.stage' must be an i64 >= 0, got -1 : i64}}
  %y = nn.relu %x {pipe.stage = -1 : i64} : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

// pipe.stage: an i64, not another integer type.
// expected-error @+1 {{'func.func' op attribute 'pipe.stage' must be an i64 >= 0, got 0 : i32}}
func.func @stage_i32() attributes {pipe.stage = 0 : i32} {
  return
}

// -----

// pipe.stage: an integer, not a string.
// expected-error @+1 {{'func.func' op attribute 'pipe.stage' must be an i64 >= 0, got "0"}}
func.func @stage_string() attributes {pipe.stage = "0"} {
  return
}

// -----

// pipe.stages, pipe.microbatches and pipe.batch_size count something: >= 1.
// expected-error @+1 {{'builtin.module' op attribute 'pipe.stages' must be an i64 >= 1, got 0 : i64}}
module attributes {pipe.stages = 0 : i64} {
}

// -----

// expected-error @+1 {{'func.func' op attribute 'pipe.batch_size' must be an i64 >= 1, got 0 : i64}}
func.func @batch_size_zero() attributes {pipe.batch_size = 0 : i64, pipe.microbatches = 1 : i64} {
  return
}

// -----

// pipe.phase names one of the stage's functions.
// expected-error @+1 {{'func.func' op attribute 'pipe.phase' must be "forward", "backward" or "update", got "fwd"}}
func.func @phase_unknown() attributes {pipe.phase = "fwd", pipe.stage = 0 : i64} {
  return
}

// -----

// pipe.phase belongs on an outlined function, not on an op.
func.func @phase_on_op(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'nn.relu' op attribute 'pipe.phase' belongs on a function}}
  %y = nn.relu %x {pipe.phase = "forward"} : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

// pipe.sends names the runtime's send semantics: blocking or buffered.
// expected-error @+1 {{'builtin.module' op attribute 'pipe.sends' must be "blocking" or "buffered", got "eager"}}
module attributes {pipe.sends = "eager", pipe.stages = 1 : i64} {
}

// -----

// pipe.remat is set by gpipe-remat's only mode that changes the IR.
// expected-error @+1 {{'builtin.module' op attribute 'pipe.remat' must be "stage", got "all"}}
module attributes {pipe.remat = "all"} {
}

// -----

// pipe.schedule names the registered schedule.
// expected-error @+1 {{'builtin.module' op attribute 'pipe.schedule' must be the name of a schedule, got ""}}
module attributes {pipe.schedule = ""} {
}

// -----

// An attribute in the pipe namespace that the dialect does not declare (a
// misspelling, say).
// expected-error @+1 {{'func.func' op has 'pipe.stgae', which is not an attribute of the pipe dialect}}
func.func @misspelled() attributes {pipe.stgae = 0 : i64} {
  return
}

// -----

// The pipe attributes belong on operations, not on arguments or results.
// expected-error @+1 {{'func.func' op argument #0 has 'pipe.stage': pipe attributes belong on operations}}
func.func @on_argument(%x: tensor<4xf32> {pipe.stage = 0 : i64}) {
  return
}

// -----

// expected-error @+1 {{'func.func' op result #0 has 'pipe.phase': pipe attributes belong on operations}}
func.func @on_result(%x: tensor<4xf32>) -> (tensor<4xf32> {pipe.phase = "forward"}) {
  return %x : tensor<4xf32>
}

// -----

// pipe.fused: a fusion group number, from 0.
func.func @fused_negative(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'nn.relu' op attribute 'pipe.fused' must be an i64 >= 0, got -2 : i64}}
  %y = nn.relu %x {pipe.fused = -2 : i64} : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

// pipe.fused: on an op with one result, not on a function.
// expected-error @+1 {{'func.func' op attribute 'pipe.fused' belongs on an op with one result (a fusion group member)}}
func.func @fused_on_function() attributes {pipe.fused = 0 : i64} {
  return
}

// -----

// Memory planning's attributes. pipe.buffer: a #pipe.buffer, on an op with
// one result.
func.func @buffer_not_a_buffer(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'nn.relu' op attribute 'pipe.buffer' must be a #pipe.buffer, got 64 : i64}}
  %y = nn.relu %x {pipe.buffer = 64 : i64} : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

// An op with several results (nn.layer_norm) holds one #pipe.buffer per
// result.
func.func @buffer_per_result(%x: tensor<2x4xf32>, %s: tensor<4xf32>) -> tensor<2x4xf32> {
  // expected-error @+1 {{'nn.layer_norm' op attribute 'pipe.buffer' must be an array of one #pipe.buffer per result (3), got [#pipe.buffer<arena, offset = 0, bytes = 32>, #pipe.buffer<arena, offset = 64, bytes = 8>]}}
  %y:3 = nn.layer_norm %x, %s {axis = 1 : i64, epsilon = 1.0e-05 : f32, pipe.buffer = [#pipe.buffer<arena, offset = 0, bytes = 32>, #pipe.buffer<arena, offset = 64, bytes = 8>]} : tensor<2x4xf32>, tensor<4xf32> -> tensor<2xf32>
  return %y#0 : tensor<2x4xf32>
}

// -----

// expected-error @+1 {{'func.func' op attribute 'pipe.buffer' belongs on an op with results, or a function argument}}
func.func @buffer_on_function() attributes {pipe.buffer = #pipe.buffer<arena, offset = 0, bytes = 64>} {
  return
}

// -----

// On a function argument it is allowed, and must be a #pipe.buffer.
// expected-error @+1 {{'func.func' op argument #0: attribute 'pipe.buffer' must be a #pipe.buffer, got "S"}}
func.func @buffer_argument(%x: tensor<4xf32> {pipe.buffer = "S"}) {
  return
}

// -----

// #pipe.buffer: offsets and sizes are not negative.
func.func @buffer_negative(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{a buffer's offset and bytes must be >= 0, got -64 and 64}}
  %y = nn.relu %x {pipe.buffer = #pipe.buffer<arena, offset = -64, bytes = 64>} : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

// pipe.shadow and pipe.bf16_shadow: on an nn.param; the shadow in the arena.
func.func @shadow_not_param(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'nn.relu' op attribute 'pipe.bf16_shadow' belongs on an nn.param}}
  %y = nn.relu %x {pipe.bf16_shadow} : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

nn.parameter @w : tensor<4xf32>
func.func @shadow_in_stash() -> tensor<4xf32> {
  // expected-error @+1 {{'nn.param' op attribute 'pipe.shadow' must be an arena #pipe.buffer, got #pipe.buffer<stash, offset = 0, bytes = 64>}}
  %w = nn.param @w {pipe.shadow = #pipe.buffer<stash, offset = 0, bytes = 64>} : tensor<4xf32>
  return %w : tensor<4xf32>
}

// -----

nn.parameter @w : tensor<4xf32>
// pipe.state: arena buffers, on an optimizer update.
func.func @state_not_buffers(%g: tensor<4xf32>) {
  %w = nn.param @w : tensor<4xf32>
  // expected-error @+1 {{'pipe.sgd_update' op attribute 'pipe.state' must be an array of arena #pipe.buffer, got [64]}}
  pipe.sgd_update %w, %g {lr = 0.1 : f64, momentum = 0.9 : f64, nesterov = false, weight_decay = 0.0 : f64, pipe.state = [64]} : tensor<4xf32>
  return
}

// -----

nn.parameter @w : tensor<4xf32>
// pipe.accumulator and pipe.deferred_operands: on pipe.accumulate_grad; the
// deferred operands are G and X.
func.func @deferred_one(%g: tensor<4xf32>) {
  // expected-error @+1 {{'pipe.accumulate_grad' op attribute 'pipe.deferred_operands' must be two arena #pipe.buffer (G, then X), got [#pipe.buffer<arena, offset = 0, bytes = 64>]}}
  pipe.accumulate_grad %g to @w {pipe.deferred_operands = [#pipe.buffer<arena, offset = 0, bytes = 64>]} : tensor<4xf32>
  return
}

// -----

func.func @accumulator_elsewhere(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'nn.relu' op attribute 'pipe.accumulator' belongs on a pipe.accumulate_grad}}
  %y = nn.relu %x {pipe.accumulator = #pipe.buffer<arena, offset = 0, bytes = 64>} : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

// pipe.memory: a #pipe.memory_plan, on a pipe.schedule.
// expected-error @+1 {{'func.func' op attribute 'pipe.memory' belongs on a pipe.schedule}}
func.func @memory_on_function() attributes {pipe.memory = #pipe.memory_plan<target = "cpu", precision = "fp32", align = 64, arena = 0, parameters = 0, optimizer = 0, gradients = 0, constants = 0, shadows = 0, cleared_begin = 0, cleared_end = 0, stash_base = 0, stash_slot = 0, stash_slots = 1, transient_base = 0, transient = 0, scratch = 0>} {
  return
}

// -----

// #pipe.memory_plan: a known target.
// expected-error @+1 {{memory plan: target must be "cpu" or "cuda", got "tpu"}}
func.func @plan_target() attributes {test.plan = #pipe.memory_plan<target = "tpu", precision = "fp32", align = 64, arena = 0, parameters = 0, optimizer = 0, gradients = 0, constants = 0, shadows = 0, cleared_begin = 0, cleared_end = 0, stash_base = 0, stash_slot = 0, stash_slots = 1, transient_base = 0, transient = 0, scratch = 0>} {
  return
}

// -----

// #pipe.memory_plan: the alignment is a power of two.
// expected-error @+1 {{memory plan: align must be a power of two, got 48}}
func.func @plan_align() attributes {test.plan = #pipe.memory_plan<target = "cpu", precision = "fp32", align = 48, arena = 0, parameters = 0, optimizer = 0, gradients = 0, constants = 0, shadows = 0, cleared_begin = 0, cleared_end = 0, stash_base = 0, stash_slot = 0, stash_slots = 1, transient_base = 0, transient = 0, scratch = 0>} {
  return
}

// -----

// #pipe.memory_plan: the stash slots end before the temporaries.
// expected-error @+1 {{memory plan: 2 stash slots of 128 bytes from 64 overlap the temporaries at 192}}
func.func @plan_stash() attributes {test.plan = #pipe.memory_plan<target = "cpu", precision = "fp32", align = 64, arena = 256, parameters = 64, optimizer = 0, gradients = 0, constants = 0, shadows = 0, cleared_begin = 64, cleared_end = 64, stash_base = 64, stash_slot = 128, stash_slots = 2, transient_base = 192, transient = 64, scratch = 0>} {
  return
}

// -----

// #pipe.memory_plan: the temporaries end inside the arena.
// expected-error @+1 {{memory plan: the temporaries [128, 256) end past the arena (192 bytes)}}
func.func @plan_arena() attributes {test.plan = #pipe.memory_plan<target = "cpu", precision = "fp32", align = 64, arena = 192, parameters = 64, optimizer = 0, gradients = 0, constants = 0, shadows = 0, cleared_begin = 64, cleared_end = 64, stash_base = 64, stash_slot = 64, stash_slots = 1, transient_base = 128, transient = 128, scratch = 0>} {
  return
}

// -----

// #pipe.memory_plan: the long-lived buffers fit before the stash.
// expected-error @+1 {{memory plan: the long-lived buffers (192 bytes) do not fit before the stash (128)}}
func.func @plan_long_lived() attributes {test.plan = #pipe.memory_plan<target = "cpu", precision = "fp32", align = 64, arena = 256, parameters = 128, optimizer = 64, gradients = 0, constants = 0, shadows = 0, cleared_begin = 0, cleared_end = 0, stash_base = 128, stash_slot = 64, stash_slots = 1, transient_base = 192, transient = 64, scratch = 0>} {
  return
}
