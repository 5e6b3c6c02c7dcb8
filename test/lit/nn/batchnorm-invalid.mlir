// Verifier errors of nn.batch_norm, nn.batch_norm_grad and
// nn.update_running_stats: one case per message.
// RUN: gpipe-opt %s --split-input-file --verify-diagnostics

func.func @rank(%x: tensor<4xf32>, %s: tensor<4xf32>) {
  // expected-error @+1 {{input must have rank >= 2 ([N, C, ...]), got 'tensor<4xf32>'}}
  %y, %m, %v = nn.batch_norm %x, %s, %s {epsilon = 1.0e-05 : f32} : tensor<4xf32>, tensor<4xf32>
  return
}

// -----

func.func @channels(%x: tensor<4x2x3xf32>, %s: tensor<3xf32>) {
  // expected-error @+1 {{the per-channel operands must have shape [2] (the input's axis 1), got 'tensor<3xf32>'}}
  %y, %m, %v = nn.batch_norm %x, %s, %s {epsilon = 1.0e-05 : f32} : tensor<4x2x3xf32>, tensor<3xf32>
  return
}

// -----

func.func @epsilon(%x: tensor<4x2xf32>, %s: tensor<2xf32>) {
  // expected-error @+1 {{epsilon must be >= 0, got -1.000000e+00}}
  %dx, %ds, %db = nn.batch_norm_grad %x, %s, %s, %s, %x {epsilon = -1.0 : f32} : tensor<4x2xf32>, tensor<2xf32>
  return
}

// -----

func.func @grad_channels(%x: tensor<4x2xf32>, %s: tensor<4xf32>) {
  // expected-error @+1 {{the per-channel operands must have shape [2] (the input's axis 1), got 'tensor<4xf32>'}}
  %dx, %ds, %db = nn.batch_norm_grad %x, %s, %s, %s, %x {epsilon = 1.0e-05 : f32} : tensor<4x2xf32>, tensor<4xf32>
  return
}

// -----

func.func @not_param(%m: tensor<2xf32>) {
  // expected-error @+1 {{the running statistics must be 'nn.param' results}}
  nn.update_running_stats %m, %m, %m, %m {count = 8 : i64, momentum = 0.9 : f32} : tensor<2xf32>
  return
}

// -----

nn.parameter @w : tensor<2xf32>
func.func @trainable(%m: tensor<2xf32>) {
  %w = nn.param @w : tensor<2xf32>
  // expected-error @+1 {{parameter @w is trainable; running statistics must be declared 'state'}}
  nn.update_running_stats %w, %w, %m, %m {count = 8 : i64, momentum = 0.9 : f32} : tensor<2xf32>
  return
}

// -----

nn.parameter @rm state : tensor<2xf32>
func.func @momentum(%m: tensor<2xf32>) {
  %rm = nn.param @rm : tensor<2xf32>
  // expected-error @+1 {{momentum must be in [0, 1], got 1.500000e+00}}
  nn.update_running_stats %rm, %rm, %m, %m {count = 8 : i64, momentum = 1.5 : f32} : tensor<2xf32>
  return
}

// -----

nn.parameter @rm state : tensor<2xf32>
func.func @count(%m: tensor<2xf32>) {
  %rm = nn.param @rm : tensor<2xf32>
  // expected-error @+1 {{count must be >= 2 (the unbiased variance of one value per channel is undefined), got 1}}
  nn.update_running_stats %rm, %rm, %m, %m {count = 1 : i64, momentum = 0.9 : f32} : tensor<2xf32>
  return
}

// -----

nn.parameter @rm state : tensor<2xf32>
func.func @microbatches(%m: tensor<2xf32>) {
  %rm = nn.param @rm : tensor<2xf32>
  // expected-error @+1 {{microbatches must be >= 1, got 0}}
  nn.update_running_stats %rm, %rm, %m, %m {count = 8 : i64, momentum = 0.9 : f32, microbatches = 0 : i64} : tensor<2xf32>
  return
}

// -----

nn.parameter @rm state : tensor<2x2xf32>
func.func @stat_rank(%m: tensor<2x2xf32>) {
  %rm = nn.param @rm : tensor<2x2xf32>
  // expected-error @+1 {{the statistics must have rank 1 ([C]), got 'tensor<2x2xf32>'}}
  nn.update_running_stats %rm, %rm, %m, %m {count = 8 : i64, momentum = 0.9 : f32} : tensor<2x2xf32>
  return
}
