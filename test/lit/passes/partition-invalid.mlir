// gpipe-partition errors: every stage needs a compute op, K >= 1. (A
// parameter used on several stages is owned by the first: outline-tied.mlir.)
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

