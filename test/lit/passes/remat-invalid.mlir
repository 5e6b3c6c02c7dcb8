// gpipe-remat errors: a stage without its outlined functions, and a stashed
// value that is not recomputable (not a pure nn op).
// RUN: gpipe-opt %s --split-input-file --gpipe-remat --verify-diagnostics

// Two stages, but stage 1 has no functions.
// expected-error @+1 {{stage 1 has no forward or backward function; run gpipe-outline-stages first}}
module attributes {pipe.stages = 2 : i64} {
  func.func @stage0_forward() attributes {pipe.phase = "forward", pipe.stage = 0 : i64} {
    return
  }
  func.func @stage0_backward() attributes {pipe.phase = "backward", pipe.stage = 0 : i64} {
    return
  }
}

// -----

// The stash holds an accumulated gradient (it reads the accumulator: not
// pure).
module attributes {pipe.stages = 1 : i64} {
  nn.parameter @w : tensor<4xf32>
  func.func @stage0_forward(%x: tensor<4xf32>) -> tensor<4xf32> attributes {pipe.phase = "forward", pipe.stage = 0 : i64} {
    // expected-error @+1 {{cannot rematerialize 'pipe.accumulated_grad': it is not a pure nn op}}
    %g = pipe.accumulated_grad @w : tensor<4xf32>
    %y = nn.add %x, %g : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
    return %y : tensor<4xf32>
  }
  func.func @stage0_backward(%y: tensor<4xf32>) attributes {pipe.phase = "backward", pipe.stage = 0 : i64} {
    pipe.accumulate_grad %y to @w : tensor<4xf32>
    return
  }
}
