// The pipe dialect's discardable attributes (pipe.stage, pipe.phase,
// pipe.stages, pipe.microbatches, pipe.batch_size, pipe.remat, pipe.schedule,
// pipe.sends, and the lowering's pipe.fused): what
// PipeDialect::verifyOperationAttribute and the argument
// and result hooks reject. One case per message.
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
