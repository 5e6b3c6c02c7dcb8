// gpipe-microbatch errors: a batch that cannot be split into M micro-batches
// is reported on the function (batch size, graph inputs) or on the op that
// would mix micro-batches (contraction, concat or slice over the batch axis,
// a sum over the batch used other than linearly in the loss, a reshape that
// cuts the micro-batches apart, a merged [T * B] axis reaching an op that is
// not elementwise, a transpose or a GEMM's rows, operands that do not agree
// on it).
// RUN: gpipe-opt %s --split-input-file --gpipe-microbatch=microbatches=4 --verify-diagnostics
// RUN: not gpipe-opt %s --split-input-file --gpipe-microbatch=microbatches=0 2>&1 | FileCheck %s --check-prefix=ZERO

// ZERO: error: microbatches must be >= 1, got 0

// B = 6 is not divisible by M = 4.
// expected-error @+1 {{the batch size 6 is not divisible by the number of micro-batches 4}}
func.func @indivisible(%x: tensor<6x4xf32>, %l: tensor<6xi64>) -> (tensor<f32> {nn.loss}) {
  %loss = nn.softmax_cross_entropy %x, %l : tensor<6x4xf32>, tensor<6xi64>
  return %loss : tensor<f32>
}

// -----

nn.parameter @w : tensor<4x8xf32>
// The graph inputs' first axes must agree (8 and 4).
// expected-error @+1 {{graph inputs disagree on the batch size: 8 and 4 (argument #1)}}
func.func @inputs_disagree(%x: tensor<8x4xf32>, %l: tensor<4xi64>) -> (tensor<f32> {nn.loss}) {
  %w = nn.param @w : tensor<4x8xf32>
  %y = nn.gemm %w, %x : (tensor<4x8xf32>, tensor<8x4xf32>) -> tensor<4x4xf32>
  %loss = nn.softmax_cross_entropy %y, %l : tensor<4x4xf32>, tensor<4xi64>
  return %loss : tensor<f32>
}

// -----

nn.parameter @w : tensor<f32>
// Only scalar inputs: nothing to split.
// expected-error @+1 {{no graph input carries a batch to split}}
func.func @no_batch(%s: tensor<f32>) -> (tensor<f32> {nn.loss}) {
  %w = nn.param @w : tensor<f32>
  %y = nn.mul %w, %s : tensor<f32>, tensor<f32> -> tensor<f32>
  return %y : tensor<f32>
}

// -----

nn.parameter @w : tensor<8x4xf32>
// X^T W contracts over the batch (A = X with transA: batch on A's axis 0).
func.func @gemm_contracts_a(%x: tensor<8x16xf32>) -> (tensor<f32> {nn.loss}) {
  %w = nn.param @w : tensor<8x4xf32>
  // expected-error @+1 {{cannot split the batch into micro-batches: the GEMM contracts over the batch axis}}
  %y = nn.gemm %x, %w {transA = true} : (tensor<8x16xf32>, tensor<8x4xf32>) -> tensor<16x4xf32>
  %s = nn.reduce_to %y : tensor<16x4xf32> -> tensor<f32>
  return %s : tensor<f32>
}

// -----

nn.parameter @w : tensor<4x8xf32>
// W X contracts over the batch (B = X without transB: batch on B's axis 0).
func.func @gemm_contracts_b(%x: tensor<8x16xf32>) -> (tensor<f32> {nn.loss}) {
  %w = nn.param @w : tensor<4x8xf32>
  // expected-error @+1 {{cannot split the batch into micro-batches: the GEMM contracts over the batch axis}}
  %y = nn.gemm %w, %x : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %s = nn.reduce_to %y : tensor<4x16xf32> -> tensor<f32>
  return %s : tensor<f32>
}

// -----

// X^T X: both GEMM operands carry the batch.
func.func @gemm_both(%x: tensor<8x16xf32>) -> (tensor<f32> {nn.loss}) {
  // expected-error @+1 {{cannot split the batch into micro-batches: both GEMM operands carry the batch}}
  %y = nn.gemm %x, %x {transA = true} : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<16x16xf32>
  %s = nn.reduce_to %y : tensor<16x16xf32> -> tensor<f32>
  return %s : tensor<f32>
}

// -----

nn.parameter @a : tensor<12x4xf32>
nn.parameter @b : tensor<4x5xf32>
// Only C carries the batch: the output's rows come from the parameter A, which
// has the batch size on them and cannot be split.
func.func @gemm_c_only(%x: tensor<12x5xf32>, %l: tensor<12xi64>) -> (tensor<f32> {nn.loss}) {
  %a = nn.param @a : tensor<12x4xf32>
  %b = nn.param @b : tensor<4x5xf32>
  // expected-error @+1 {{cannot split the batch into micro-batches}}
  %g = nn.gemm %a, %b, %x : (tensor<12x4xf32>, tensor<4x5xf32>, tensor<12x5xf32>) -> tensor<12x5xf32>
  %loss = nn.softmax_cross_entropy %g, %l : tensor<12x5xf32>, tensor<12xi64>
  return %loss : tensor<f32>
}

// -----

nn.parameter @w : tensor<4x16xf32>
nn.parameter @c : tensor<8xf32>
// A [B] bias through C while the batch is on the output's columns (batch on
// B with transB): the bias has the batch size but does not carry the batch.
func.func @gemm_c_on_batch(%x: tensor<8x16xf32>) -> (tensor<f32> {nn.loss}) {
  %w = nn.param @w : tensor<4x16xf32>
  %c = nn.param @c : tensor<8xf32>
  // expected-error @+1 {{cannot split the batch into micro-batches: the GEMM's C operand has the batch size on the batch axis but does not depend on the graph inputs}}
  %y = nn.gemm %w, %x, %c {transB = true} : (tensor<4x16xf32>, tensor<8x16xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %s = nn.reduce_to %y : tensor<4x8xf32> -> tensor<f32>
  return %s : tensor<f32>
}

// -----

// Concat along the batch axis.
func.func @concat_batch(%x: tensor<8x4xf32>) -> (tensor<f32> {nn.loss}) {
  // expected-error @+1 {{cannot split the batch into micro-batches: concat along the batch axis}}
  %c = nn.concat %x, %x {axis = 0 : i64} : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<16x4xf32>
  %s = nn.reduce_to %c : tensor<16x4xf32> -> tensor<f32>
  return %s : tensor<f32>
}

// -----

nn.parameter @w : tensor<8x2xf32>
// Concat of a batch tensor with a parameter (along another axis).
func.func @concat_param(%x: tensor<8x4xf32>, %l: tensor<8xi64>) -> (tensor<f32> {nn.loss}) {
  %w = nn.param @w : tensor<8x2xf32>
  // expected-error @+1 {{cannot split the batch into micro-batches: concat of tensors that do not all carry the batch on one axis}}
  %c = nn.concat %x, %w {axis = 1 : i64} : (tensor<8x4xf32>, tensor<8x2xf32>) -> tensor<8x6xf32>
  %loss = nn.softmax_cross_entropy %c, %l : tensor<8x6xf32>, tensor<8xi64>
  return %loss : tensor<f32>
}

// -----

// A slice along the batch axis (rows 2..5 of 8).
func.func @slice_batch(%x: tensor<8x4xf32>) -> (tensor<f32> {nn.loss}) {
  // expected-error @+1 {{cannot split the batch into micro-batches: a slice along the batch axis}}
  %s = nn.slice %x {axis = 0 : i64, start = 2 : i64} : tensor<8x4xf32> -> tensor<4x4xf32>
  %r = nn.reduce_to %s : tensor<4x4xf32> -> tensor<f32>
  return %r : tensor<f32>
}

// -----

// The reshape target's first dimension (2) is not divisible by M = 4.
func.func @reshape_indivisible(%x: tensor<8x4xf32>) -> (tensor<f32> {nn.loss}) {
  // expected-error @+1 {{cannot split the batch into micro-batches: a reshape whose result does not hold each micro-batch as a slice of one dimension}}
  %r = nn.reshape %x : tensor<8x4xf32> -> tensor<2x16xf32>
  %s = nn.reduce_to %r : tensor<2x16xf32> -> tensor<f32>
  return %s : tensor<f32>
}

// -----

// [4, 8] (the batch on axis 1) to [8, 4]: each micro-batch's two columns
// of a row land in one half of a row of the result, in every other row: not
// a slice of one dimension.
func.func @reshape_batch_inner(%x: tensor<8x4xf32>) -> (tensor<f32> {nn.loss}) {
  %t = nn.transpose %x, [1, 0] : tensor<8x4xf32> -> tensor<4x8xf32>
  // expected-error @+1 {{cannot split the batch into micro-batches: a reshape whose result does not hold each micro-batch as a slice of one dimension}}
  %r = nn.reshape %t : tensor<4x8xf32> -> tensor<8x4xf32>
  %s = nn.reduce_to %r : tensor<8x4xf32> -> tensor<f32>
  return %s : tensor<f32>
}

// -----

// [T, B, d] flattened to [T * B, d] (the batch shares axis 0 with T): a
// softmax is not among the ops that take such a tensor.
func.func @merged_softmax(%x: tensor<8x4x2xf32>) -> (tensor<f32> {nn.loss}) {
  %t = nn.transpose %x, [1, 0, 2] : tensor<8x4x2xf32> -> tensor<4x8x2xf32>
  %r = nn.reshape %t : tensor<4x8x2xf32> -> tensor<32x2xf32>
  // expected-error @+1 {{cannot split the batch into micro-batches: 'nn.softmax' takes a tensor whose batch axis also holds dimensions that came before the batch (a reshape such as [T, B, d] -> [T * B, d]); only elementwise ops, transposes and a GEMM's rows can take it}}
  %s = nn.softmax %r {axis = 1 : i64} : tensor<32x2xf32>
  %l = nn.reduce_to %s : tensor<32x2xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// The same merged rows as a transposed GEMM operand.
nn.parameter @w : tensor<32x3xf32>
func.func @merged_gemm_transposed(%x: tensor<8x4x2xf32>) -> (tensor<f32> {nn.loss}) {
  %w = nn.param @w : tensor<32x3xf32>
  %t = nn.transpose %x, [1, 0, 2] : tensor<8x4x2xf32> -> tensor<4x8x2xf32>
  %r = nn.reshape %t : tensor<4x8x2xf32> -> tensor<32x2xf32>
  // expected-error @+1 {{'nn.gemm' takes a tensor whose batch axis also holds dimensions}}
  %g = nn.gemm %r, %w {transA = true} : (tensor<32x2xf32>, tensor<32x3xf32>) -> tensor<2x3xf32>
  %l = nn.reduce_to %g : tensor<2x3xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Merged rows ([T * B], blocks of B) added to rows in batch-major order
// ([B * T], one block): the micro-batches' rows do not line up.
func.func @merged_mismatch(%x: tensor<8x4x2xf32>) -> (tensor<f32> {nn.loss}) {
  %t = nn.transpose %x, [1, 0, 2] : tensor<8x4x2xf32> -> tensor<4x8x2xf32>
  %r = nn.reshape %t : tensor<4x8x2xf32> -> tensor<32x2xf32>
  %f = nn.reshape %x : tensor<8x4x2xf32> -> tensor<32x2xf32>
  // expected-error @+1 {{cannot split the batch into micro-batches: its operands hold the batch in different blocks of its axis}}
  %a = nn.add %r, %f : tensor<32x2xf32>, tensor<32x2xf32> -> tensor<32x2xf32>
  %l = nn.reduce_to %a : tensor<32x2xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// [8, 8] + [8]: the batch of the vector aligns with the matrix's axis 1.
func.func @broadcast_misaligned(%x: tensor<8x8xf32>, %l: tensor<8xi64>) -> (tensor<f32> {nn.loss}) {
  %c = nn.slice %x {axis = 1 : i64, start = 0 : i64} : tensor<8x8xf32> -> tensor<8x1xf32>
  %v = nn.reshape %c : tensor<8x1xf32> -> tensor<8xf32>
  // expected-error @+1 {{cannot split the batch into micro-batches: its operands carry the batch on different axes}}
  %a = nn.add %x, %v : tensor<8x8xf32>, tensor<8xf32> -> tensor<8x8xf32>
  %loss = nn.softmax_cross_entropy %a, %l : tensor<8x8xf32>, tensor<8xi64>
  return %loss : tensor<f32>
}

// -----

nn.parameter @bias_per_row : tensor<8x4xf32>
// A [B, 4] constant added to the batch: its rows are not per-sample.
func.func @constant_with_batch_size(%x: tensor<8x4xf32>, %l: tensor<8xi64>) -> (tensor<f32> {nn.loss}) {
  %c = nn.param @bias_per_row : tensor<8x4xf32>
  // expected-error @+1 {{cannot split the batch into micro-batches: an operand that does not depend on the graph inputs has the batch size on the batch axis}}
  %a = nn.add %x, %c : tensor<8x4xf32>, tensor<8x4xf32> -> tensor<8x4xf32>
  %loss = nn.softmax_cross_entropy %a, %l : tensor<8x4xf32>, tensor<8xi64>
  return %loss : tensor<f32>
}

// -----

// The loss's labels must carry the batch on their first axis.
func.func @loss_labels_no_batch(%x: tensor<8x4xf32>) -> (tensor<f32> {nn.loss}) {
  %l = nn.constant dense<1> : tensor<8xi64>
  // expected-error @+1 {{cannot split the batch into micro-batches: the loss's logits and labels must both carry the batch on their first axis}}
  %loss = nn.softmax_cross_entropy %x, %l : tensor<8x4xf32>, tensor<8xi64>
  return %loss : tensor<f32>
}

// -----

nn.parameter @offset : tensor<f32>
// With micro-batches only a mean over the batch can be split: a loss with
// another term (here a parameter added to it) would count that term M times.
func.func @loss_plus_param(%x: tensor<8x3xf32>, %y: tensor<8xi64>) -> (tensor<f32> {nn.loss}) {
  %w = nn.param @offset : tensor<f32>
  %l = nn.softmax_cross_entropy %x, %y : tensor<8x3xf32>, tensor<8xi64>
  // expected-error @+1 {{cannot split the batch into micro-batches: a sum over the batch (each micro-batch computes its share) is added to a term that is not: that term would be counted once per micro-batch}}
  %t = nn.add %l, %w : tensor<f32>, tensor<f32> -> tensor<f32>
  return %t : tensor<f32>
}

// -----

// Softmax along the batch axis mixes the micro-batches.
func.func @softmax_batch(%x: tensor<8x4xf32>) -> (tensor<f32> {nn.loss}) {
  // expected-error @+1 {{cannot split the batch into micro-batches: a softmax along the batch axis}}
  %s = nn.softmax %x {axis = 0 : i64} : tensor<8x4xf32>
  %r = nn.reduce_to %s : tensor<8x4xf32> -> tensor<f32>
  return %r : tensor<f32>
}

// -----

// So does a log-softmax along the batch axis.
func.func @log_softmax_batch(%x: tensor<8x4xf32>) -> (tensor<f32> {nn.loss}) {
  // expected-error @+1 {{cannot split the batch into micro-batches: a log-softmax along the batch axis}}
  %s = nn.log_softmax %x {axis = 0 : i64} : tensor<8x4xf32>
  %r = nn.reduce_to %s : tensor<8x4xf32> -> tensor<f32>
  return %r : tensor<f32>
}

// -----

// A maximum over the batch axis: each micro-batch would see only its own.
func.func @reduce_max_batch(%x: tensor<8x4xf32>, %l: tensor<8xi64>) -> (tensor<f32> {nn.loss}) {
  // expected-error @+1 {{cannot split the batch into micro-batches: a maximum over the batch axis}}
  %m = nn.reduce_max %x : tensor<8x4xf32> -> tensor<1x4xf32>
  %s = nn.sub %x, %m : tensor<8x4xf32>, tensor<1x4xf32> -> tensor<8x4xf32>
  %loss = nn.nll_loss %s, %l : tensor<8x4xf32>, tensor<8xi64>
  return %loss : tensor<f32>
}

// -----


// A mean over the batch used for anything but the loss (here centring the
// batch, as batch statistics would): each micro-batch only has its share.
func.func @batch_mean_in_forward(%x: tensor<8x4xf32>, %l: tensor<8xi64>) -> (tensor<f32> {nn.loss}) {
  %s = nn.reduce_to %x : tensor<8x4xf32> -> tensor<1x4xf32>
  %n = nn.constant dense<8.0> : tensor<f32>
  %m = nn.div %s, %n : tensor<1x4xf32>, tensor<f32> -> tensor<1x4xf32>
  // expected-error @+1 {{cannot split the batch into micro-batches: 'nn.sub' reads a sum or mean over the batch}}
  %c = nn.sub %x, %m : tensor<8x4xf32>, tensor<1x4xf32> -> tensor<8x4xf32>
  %loss = nn.softmax_cross_entropy %c, %l : tensor<8x4xf32>, tensor<8xi64>
  return %loss : tensor<f32>
}

// -----

// A loss that is not linear in the mean over the batch (its square).
func.func @squared_mean(%x: tensor<8x4xf32>) -> (tensor<f32> {nn.loss}) {
  %s = nn.reduce_to %x : tensor<8x4xf32> -> tensor<f32>
  // expected-error @+1 {{cannot split the batch into micro-batches: 'nn.mul' reads a sum or mean over the batch}}
  %q = nn.mul %s, %s : tensor<f32>, tensor<f32> -> tensor<f32>
  return %q : tensor<f32>
}

// -----

// A loss that does not depend on the data at all.
nn.parameter @w : tensor<f32>
func.func @loss_of_params(%x: tensor<8x4xf32>) -> (tensor<f32> {nn.loss}) {
  %w = nn.param @w : tensor<f32>
  // expected-error @+1 {{cannot split the batch into micro-batches: the loss must be a mean or sum over the batch (a softmax cross-entropy or negative log-likelihood, or a ReduceMean/ReduceSum over the batch axis), not 'nn.exp'}}
  %e = nn.exp %w : tensor<f32>
  return %e : tensor<f32>
}

// -----

// A batched product contracting over the batch axis (A's last dim).
func.func @batch_matmul_contract(%x: tensor<8x2x3xf32>, %l: tensor<8xi64>) -> (tensor<f32> {nn.loss}) {
  %c = nn.constant dense<1.0> : tensor<2x8x4xf32>
  %u = nn.transpose %x, [1, 2, 0] : tensor<8x2x3xf32> -> tensor<2x3x8xf32>
  // expected-error @+1 {{cannot split the batch into micro-batches: the batched product contracts over the batch axis}}
  %y = nn.batch_matmul %u, %c : (tensor<2x3x8xf32>, tensor<2x8x4xf32>) -> tensor<2x3x4xf32>
  %r = nn.reduce_to %y : tensor<2x3x4xf32> -> tensor<f32>
  return %r : tensor<f32>
}

// -----

nn.parameter @w : tensor<8x4x5xf32>
// A parameter with the batch size on the batch dim: each micro-batch would
// need all of it.
func.func @batch_matmul_unbroadcast(%x: tensor<8x3x4xf32>, %l: tensor<8xi64>) -> (tensor<f32> {nn.loss}) {
  %w = nn.param @w : tensor<8x4x5xf32>
  // expected-error @+1 {{cannot split the batch into micro-batches: an operand of the batched product that does not depend on the graph inputs has the batch size on the batch axis}}
  %y = nn.batch_matmul %x, %w : (tensor<8x3x4xf32>, tensor<8x4x5xf32>) -> tensor<8x3x5xf32>
  %r = nn.reduce_to %y : tensor<8x3x5xf32> -> tensor<f32>
  return %r : tensor<f32>
}

// -----

// The batch on A's rows and on B's columns: the result would carry it twice.
func.func @batch_matmul_two_axes(%x: tensor<8x3xf32>, %l: tensor<8xi64>) -> (tensor<f32> {nn.loss}) {
  %c = nn.constant dense<1.0> : tensor<2x3x3xf32>
  %xt = nn.transpose %x, [1, 0] : tensor<8x3xf32> -> tensor<3x8xf32>
  %a = nn.batch_matmul %x, %c : (tensor<8x3xf32>, tensor<2x3x3xf32>) -> tensor<2x8x3xf32>
  // expected-error @+1 {{cannot split the batch into micro-batches: the batched product's operands carry the batch on different axes of the result}}
  %y = nn.batch_matmul %a, %xt : (tensor<2x8x3xf32>, tensor<3x8xf32>) -> tensor<2x8x8xf32>
  %r = nn.reduce_to %y : tensor<2x8x8xf32> -> tensor<f32>
  return %r : tensor<f32>
}

// -----

// A layer normalization over the batch axis mixes the micro-batches.
func.func @layer_norm_batch(%x: tensor<8x4xf32>, %s: tensor<8x4xf32>) -> (tensor<f32> {nn.loss}) {
  %c = nn.constant dense<1.0> : tensor<8x4xf32>
  // expected-error @+1 {{cannot split the batch into micro-batches: a layer normalization over the batch axis (the batch must be before the normalized axes)}}
  %y:3 = nn.layer_norm %x, %c {axis = 0 : i64, epsilon = 1.0e-05 : f32} : tensor<8x4xf32>, tensor<8x4xf32> -> tensor<f32>
  %r = nn.reduce_to %y#0 : tensor<8x4xf32> -> tensor<f32>
  return %r : tensor<f32>
}

// -----

// A scale from the data carries the batch (a graph input's first axis): each
// sample would need its own.
func.func @layer_norm_scale_batch(%x: tensor<8x8xf32>, %z: tensor<8xf32>) -> (tensor<f32> {nn.loss}) {
  // expected-error @+1 {{cannot split the batch into micro-batches: a layer normalization whose scale or bias carries the batch}}
  %y:3 = nn.layer_norm %x, %z {axis = 1 : i64, epsilon = 1.0e-05 : f32} : tensor<8x8xf32>, tensor<8xf32> -> tensor<8xf32>
  %r = nn.reduce_to %y#0 : tensor<8x8xf32> -> tensor<f32>
  return %r : tensor<f32>
}

// -----

// A dropout draws by element index in the mini-batch's tensor: the batch
// must be outermost.
func.func @dropout_batch_inner(%x: tensor<8x4xf32>) -> (tensor<f32> {nn.loss}) {
  %t = nn.transpose %x, [1, 0] : tensor<8x4xf32> -> tensor<4x8xf32>
  // expected-error @+1 {{cannot split the batch into micro-batches: a dropout of a tensor whose batch axis is not the first}}
  %d = nn.dropout %t {key = 1 : i64, ratio = 0.5 : f32} : tensor<4x8xf32>
  %s = nn.reduce_to %d : tensor<4x8xf32> -> tensor<f32>
  return %s : tensor<f32>
}

// -----

// A gather from a table whose rows are the batch would read rows of other
// micro-batches.
func.func @gather_batch_rows(%x: tensor<8x4xf32>, %l: tensor<8xi64>) -> (tensor<f32> {nn.loss}) {
  %i = nn.constant dense<[7, 0, 1, 2, 3, 4, 5, 6]> : tensor<8xi64>
  // expected-error @+1 {{cannot split the batch into micro-batches: a gather from a table whose rows are the batch}}
  %g = nn.gather %x, %i : tensor<8x4xf32>, tensor<8xi64> -> tensor<8x4xf32>
  %loss = nn.softmax_cross_entropy %g, %l : tensor<8x4xf32>, tensor<8xi64>
  return %loss : tensor<f32>
}

// -----

// Table and indices both carrying the batch.
func.func @gather_both(%x: tensor<8x4x3xf32>, %ids: tensor<8xi64>, %l: tensor<8xi64>) -> (tensor<f32> {nn.loss}) {
  %t = nn.transpose %x, [1, 0, 2] : tensor<8x4x3xf32> -> tensor<4x8x3xf32>
  // expected-error @+1 {{cannot split the batch into micro-batches: a gather whose table and indices both carry the batch}}
  %g = nn.gather %t, %ids : tensor<4x8x3xf32>, tensor<8xi64> -> tensor<8x8x3xf32>
  %r = nn.reshape %g : tensor<8x8x3xf32> -> tensor<8x24xf32>
  %loss = nn.softmax_cross_entropy %r, %l : tensor<8x24xf32>, tensor<8xi64>
  return %loss : tensor<f32>
}

// -----

// An attention whose keys and values are constants (one set for every
// sample) while the queries carry the batch: each micro-batch would need
// keys of its own batch size.
func.func @attention_constant_keys(%x: tensor<8x4x8xf32>) -> (tensor<f32> {nn.loss}) {
  %k = nn.constant dense<1.0> : tensor<8x4x8xf32>
  // expected-error @+1 {{cannot split the batch into micro-batches: an attention whose q, k and v do not all carry the batch on the same axis}}
  %o:2 = nn.attention %x, %k, %k {scale = 1.0 : f32} : (tensor<8x4x8xf32>, tensor<8x4x8xf32>, tensor<8x4x8xf32>) -> (tensor<8x4x8xf32>, tensor<8x4xf32>)
  %r = nn.reduce_to %o#0 : tensor<8x4x8xf32> -> tensor<f32>
  return %r : tensor<f32>
}

// -----

// An attention along the batch axis (the batch is the sequence: every
// sample would attend to the others, across micro-batches).
func.func @attention_over_batch(%x: tensor<8x4xf32>) -> (tensor<f32> {nn.loss}) {
  %t = nn.reshape %x : tensor<8x4xf32> -> tensor<1x8x4xf32>
  // expected-error @+1 {{cannot split the batch into micro-batches: an attention along the batch axis (the batch must be a leading axis of q, k and v)}}
  %o:2 = nn.attention %t, %t, %t {scale = 1.0 : f32} : (tensor<1x8x4xf32>, tensor<1x8x4xf32>, tensor<1x8x4xf32>) -> (tensor<1x8x4xf32>, tensor<1x8xf32>)
  %r = nn.reduce_to %o#0 : tensor<1x8x4xf32> -> tensor<f32>
  return %r : tensor<f32>
}
