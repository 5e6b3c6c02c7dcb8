// gpipe-partition errors: every stage needs a compute op, a parameter lives
// on one stage, K >= 1.
// RUN: gpipe-opt %s --split-input-file --gpipe-partition=stages=2 --verify-diagnostics
// RUN: not gpipe-opt %s --split-input-file --gpipe-partition=stages=0 2>&1 | FileCheck %s --check-prefix=ZERO

// ZERO: error: stages must be >= 1, got 0

nn.parameter @w : tensor<4x8xf32>
// One compute op (parameters and constants do not count) for two stages.
// expected-error @+1 {{cannot split 1 compute ops into 2 stages: every stage needs at least one op}}
func.func @too_few(%l: tensor<4xi64>) -> (tensor<f32> {nn.loss}) {
  %w = nn.param @w : tensor<4x8xf32>
  %c = nn.constant dense<1.0> : tensor<f32>
  %loss = nn.softmax_cross_entropy %w, %l : tensor<4x8xf32>, tensor<4xi64>
  return %loss : tensor<f32>
}

// -----

nn.parameter @tied : tensor<64x64xf32>
// A weight shared by the first GEMM (stage 0) and the last one (stage 1); the
// two stages are named in the order the users are visited.
func.func @shared_weight(%x: tensor<8x64xf32>, %l: tensor<8xi64>) -> (tensor<f32> {nn.loss}) {
  // expected-error-re @+1 {{parameter 'tied' is used on stages {{0 and 1|1 and 0}}; a parameter must live on one stage (weights shared across stages are not supported)}}
  %w = nn.param @tied : tensor<64x64xf32>
  %h = nn.gemm %x, %w : (tensor<8x64xf32>, tensor<64x64xf32>) -> tensor<8x64xf32>
  %y = nn.gemm %h, %w : (tensor<8x64xf32>, tensor<64x64xf32>) -> tensor<8x64xf32>
  %loss = nn.softmax_cross_entropy %y, %l : tensor<8x64xf32>, tensor<8xi64>
  return %loss : tensor<f32>
}
