// gpipe-microbatch errors of the pooling family: a pool whose batch is not
// the leading axis N, a padding of the batch axis.
// RUN: gpipe-opt %s --split-input-file --gpipe-microbatch=microbatches=4 --verify-diagnostics

// The batch moved to C: a pool over each [n, c] plane would need it as N.
func.func @pool_batch_not_n(%x: tensor<8x2x6xf32>) -> (tensor<f32> {nn.loss}) {
  %t = nn.transpose %x, [1, 0, 2] : tensor<8x2x6xf32> -> tensor<2x8x6xf32>
  // expected-error @+1 {{cannot split the batch into micro-batches: a pooling whose batch is not the leading axis N}}
  %y = nn.avg_pool %t {kernel_shape = array<i64: 2>, strides = array<i64: 2>, pads = array<i64: 0, 0>, dilations = array<i64: 1>} : tensor<2x8x6xf32> -> tensor<2x8x3xf32>
  %r = nn.reduce_to %y : tensor<2x8x3xf32> -> tensor<f32>
  return %r : tensor<f32>
}

// -----

// Padding the batch axis adds samples that belong to no micro-batch.
func.func @pad_batch(%x: tensor<8x3xf32>) -> (tensor<f32> {nn.loss}) {
  // expected-error @+1 {{cannot split the batch into micro-batches: a padding of the batch axis}}
  %y = nn.pad %x {pads = array<i64: 1, 0, 0, 0>, value = 0.0 : f32} : tensor<8x3xf32> -> tensor<9x3xf32>
  %r = nn.reduce_to %y : tensor<9x3xf32> -> tensor<f32>
  return %r : tensor<f32>
}
