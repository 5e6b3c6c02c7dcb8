// gpipe-autodiff errors: what the loss must be, and ops without a gradient
// rule on the path from the parameters to the loss.
// RUN: gpipe-opt %s --split-input-file --gpipe-autodiff --verify-diagnostics

nn.parameter @w : tensor<4x8xf32>
// No result is marked nn.loss.
// expected-error @+1 {{no result is marked 'nn.loss'; nothing to differentiate}}
func.func @no_loss(%l: tensor<4xi64>) -> tensor<f32> {
  %w = nn.param @w : tensor<4x8xf32>
  %loss = nn.softmax_cross_entropy %w, %l : tensor<4x8xf32>, tensor<4xi64>
  return %loss : tensor<f32>
}

// -----

nn.parameter @w : tensor<4x8xf32>
// Two results are marked nn.loss.
// expected-error @+1 {{more than one result is marked 'nn.loss'}}
func.func @two_losses(%l: tensor<4xi64>) -> (tensor<f32> {nn.loss}, tensor<f32> {nn.loss}) {
  %w = nn.param @w : tensor<4x8xf32>
  %loss = nn.softmax_cross_entropy %w, %l : tensor<4x8xf32>, tensor<4xi64>
  return %loss, %loss : tensor<f32>, tensor<f32>
}

// -----

nn.parameter @w : tensor<4x8xf32>
// The loss must be a scalar (here result #1, a [4, 8] tensor).
// expected-error @+1 {{the loss (result #1) must be a tensor<f32> scalar, got 'tensor<4x8xf32>'}}
func.func @non_scalar_loss(%l: tensor<4xi64>) -> (tensor<f32>, tensor<4x8xf32> {nn.loss}) {
  %w = nn.param @w : tensor<4x8xf32>
  %loss = nn.softmax_cross_entropy %w, %l : tensor<4x8xf32>, tensor<4xi64>
  %t = nn.tanh %w : tensor<4x8xf32>
  return %loss, %t : tensor<f32>, tensor<4x8xf32>
}

// -----

// The loss must be f32 (a rank-0 i64 is not a loss).
// expected-error @+1 {{the loss (result #0) must be a tensor<f32> scalar, got 'tensor<i64>'}}
func.func @i64_loss(%x: tensor<i64>) -> (tensor<i64> {nn.loss}) {
  return %x : tensor<i64>
}

// -----

// The training step is one block.
// expected-error @+1 {{the training step must be a single block}}
func.func @two_blocks(%x: tensor<f32>) -> (tensor<f32> {nn.loss}) {
  return %x : tensor<f32>
^bb1:
  return %x : tensor<f32>
}

// -----

nn.parameter @w : tensor<4x8xf32>
// Gradient ops (here nn.tanh_grad) have no gradient rule: they may not sit
// between a parameter and the loss.
func.func @grad_op_on_path(%l: tensor<4xi64>) -> (tensor<f32> {nn.loss}) {
  %w = nn.param @w : tensor<4x8xf32>
  %t = nn.tanh %w : tensor<4x8xf32>
  // expected-error @+1 {{cannot differentiate 'nn.tanh_grad': it has no gradient rule}}
  %s = nn.tanh_grad %t, %w : tensor<4x8xf32>
  %loss = nn.softmax_cross_entropy %s, %l : tensor<4x8xf32>, tensor<4xi64>
  return %loss : tensor<f32>
}

// -----

nn.parameter @w : tensor<4x8xf32>
// Gradient ops are not differentiated again (no second-order gradients).
func.func @grad_op_on_path(%x: tensor<4x8xf32>, %l: tensor<4xi64>) -> (tensor<f32> {nn.loss}) {
  %w = nn.param @w : tensor<4x8xf32>
  // expected-error @+1 {{cannot differentiate 'nn.relu_grad': it has no gradient rule}}
  %g = nn.relu_grad %x, %w : tensor<4x8xf32>
  %loss = nn.softmax_cross_entropy %g, %l : tensor<4x8xf32>, tensor<4xi64>
  return %loss : tensor<f32>
}

// -----

nn.parameter @w : tensor<3x3xf32>
// Parameter names are unique: two nn.param @w would be updated twice.
func.func @duplicate_param(%x: tensor<4x3xf32>, %y: tensor<4xi64>) -> (tensor<f32> {nn.loss}) {
  // expected-note @+1 {{first declared here}}
  %w = nn.param @w : tensor<3x3xf32>
  // expected-error @+1 {{parameter 'w' is declared twice}}
  %w2 = nn.param @w : tensor<3x3xf32>
  %h = nn.gemm %x, %w : (tensor<4x3xf32>, tensor<3x3xf32>) -> tensor<4x3xf32>
  %g = nn.gemm %h, %w2 : (tensor<4x3xf32>, tensor<3x3xf32>) -> tensor<4x3xf32>
  %l = nn.softmax_cross_entropy %g, %y : tensor<4x3xf32>, tensor<4xi64>
  return %l : tensor<f32>
}

// -----

nn.parameter @w : tensor<4x8xf32>
nn.parameter @s : tensor<8xf32>
// A layer normalization's statistics (ONNX Mean, InvStdDev) have no gradient
// rule: only its output may reach the loss.
func.func @layer_norm_mean(%l: tensor<4xi64>) -> (tensor<f32> {nn.loss}) {
  %w = nn.param @w : tensor<4x8xf32>
  %s = nn.param @s : tensor<8xf32>
  // expected-error @+1 {{cannot differentiate through a layer normalization's Mean or InvStdDev output: only its output Y may reach the loss}}
  %y:3 = nn.layer_norm %w, %s {axis = 1 : i64, epsilon = 1.0e-05 : f32} : tensor<4x8xf32>, tensor<8xf32> -> tensor<4xf32>
  %m = nn.reshape %y#1 : tensor<4xf32> -> tensor<4x1xf32>
  %z = nn.add %y#0, %m : tensor<4x8xf32>, tensor<4x1xf32> -> tensor<4x8xf32>
  %loss = nn.softmax_cross_entropy %z, %l : tensor<4x8xf32>, tensor<4xi64>
  return %loss : tensor<f32>
}

// -----

nn.parameter @q : tensor<2x4x8xf32>
// An attention's log-sum-exp has no gradient rule: only its output may reach
// the loss.
func.func @attention_lse(%l: tensor<2xi64>) -> (tensor<f32> {nn.loss}) {
  %q = nn.param @q : tensor<2x4x8xf32>
  // expected-error @+1 {{cannot differentiate through an attention's log-sum-exp: only its output may reach the loss}}
  %o:2 = nn.attention %q, %q, %q {scale = 1.0 : f32} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> (tensor<2x4x8xf32>, tensor<2x4xf32>)
  %loss = nn.softmax_cross_entropy %o#1, %l : tensor<2x4xf32>, tensor<2xi64>
  return %loss : tensor<f32>
}
