// Verifier and type-constraint errors of the nn ops, and of the nn
// dialect's discardable attributes (nn.input, nn.output, nn.loss,
// nn.backward): one case per message.
// RUN: gpipe-opt %s --split-input-file --verify-diagnostics

// A parameter is a declared symbol (nn.parameter).
func.func @param_undeclared() {
  // expected-error @+1 {{'nn.param' op parameter @missing is not declared (no nn.parameter @missing in the module)}}
  %p = nn.param @missing : tensor<4xf32>
  return
}

// -----

// nn.param has its declaration's type.
nn.parameter @w : tensor<4xf32>
func.func @param_type_mismatch() {
  // expected-error @+1 {{'nn.param' op has type 'tensor<8xf32>' but parameter @w is declared 'tensor<4xf32>'}}
  %p = nn.param @w : tensor<8xf32>
  return
}

// -----

// Dynamic shapes are rejected (every nn tensor is statically shaped).
nn.parameter @w : tensor<4xf32>
func.func @param_dynamic_shape() {
  // expected-error @+1 {{'nn.param' op result #0 must be statically shaped tensor of 32-bit float values, but got 'tensor<?xf32>'}}
  %p = nn.param @w : tensor<?xf32>
  return
}

// -----

// Parameters are f32.
// expected-error @+1 {{'nn.parameter' op attribute 'type' failed to satisfy constraint: type attribute of statically shaped tensor of 32-bit float values}}
nn.parameter @w : tensor<4xf16>

// -----

// A parameter is declared in the module, not in a function.
func.func @parameter_in_function() {
  // expected-error @+1 {{'nn.parameter' op expects parent op 'builtin.module'}}
  nn.parameter @w : tensor<4xf32>
  return
}

// -----

// Unranked tensors are rejected too.
func.func @add_unranked(%x: tensor<*xf32>) {
  // expected-error @+1 {{'nn.add' op operand #0 must be statically shaped tensor of 32-bit float values, but got 'tensor<*xf32>'}}
  %y = "nn.add"(%x, %x) : (tensor<*xf32>, tensor<*xf32>) -> tensor<*xf32>
  return
}

// -----

// nn.param_grad applies to an nn.param result, not to any value.
func.func @param_grad_not_param(%x: tensor<4xf32>) {
  // expected-error @+1 {{'nn.param_grad' op operand #0 must be the result of an 'nn.param'}}
  nn.param_grad %x, %x : tensor<4xf32>
  return
}

// -----

nn.parameter @w : tensor<4xf32>
// The gradient has the parameter's type.
func.func @param_grad_type_mismatch(%g: tensor<8xf32>) {
  %p = nn.param @w : tensor<4xf32>
  // expected-error @+1 {{'nn.param_grad' op failed to verify that all of {param, grad} have same type}}
  "nn.param_grad"(%p, %g) : (tensor<4xf32>, tensor<8xf32>) -> ()
  return
}

// -----

// A constant's value has the result type.
func.func @constant_type_mismatch() {
  // expected-error @+1 {{'nn.constant' op failed to verify that all of {value, output} have same type}}
  %c = "nn.constant"() {value = dense<1.0> : tensor<f32>} : () -> tensor<2xf32>
  return
}

// -----

// Constants are f32 or i64.
func.func @constant_i32() {
  // expected-error @+1 {{'nn.constant' op result #0 must be statically shaped tensor of 32-bit float or 64-bit signless integer values, but got 'tensor<2xi32>'}}
  %c = nn.constant dense<1> : tensor<2xi32>
  return
}

// -----

// gemm: B must be rank 2.
func.func @gemm_rank(%a: tensor<4x8xf32>, %b: tensor<8xf32>) {
  // expected-error @+1 {{'nn.gemm' op A, B and the result must be rank 2, got ranks 2, 1, 2}}
  %y = nn.gemm %a, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  return
}

// -----

// gemm: the result must be rank 2.
func.func @gemm_result_rank(%a: tensor<4x8xf32>, %b: tensor<8x16xf32>) {
  // expected-error @+1 {{'nn.gemm' op A, B and the result must be rank 2, got ranks 2, 2, 3}}
  %y = nn.gemm %a, %b : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<1x4x16xf32>
  return
}

// -----

// gemm: the inner dimensions of A and B differ (B would need transB).
func.func @gemm_inner_dim(%a: tensor<4x8xf32>, %b: tensor<16x8xf32>) {
  // expected-error @+1 {{'nn.gemm' op inner dimensions differ: op(A) is 4x8, op(B) is 16x8}}
  %y = nn.gemm %a, %b : (tensor<4x8xf32>, tensor<16x8xf32>) -> tensor<4x8xf32>
  return
}

// -----

// gemm: transA is taken into account for the inner dimension.
func.func @gemm_inner_dim_trans_a(%a: tensor<4x8xf32>, %b: tensor<8x16xf32>) {
  // expected-error @+1 {{'nn.gemm' op inner dimensions differ: op(A) is 8x4, op(B) is 8x16}}
  %y = nn.gemm %a, %b {transA = true} : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  return
}

// -----

// gemm: transB is taken into account for the inner dimension.
func.func @gemm_inner_dim_trans_b(%a: tensor<4x8xf32>, %b: tensor<8x16xf32>) {
  // expected-error @+1 {{'nn.gemm' op inner dimensions differ: op(A) is 4x8, op(B) is 16x8}}
  %y = nn.gemm %a, %b {transB = true} : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  return
}

// -----

// gemm: the result is [M, N], not [N, M].
func.func @gemm_result_shape(%a: tensor<4x8xf32>, %b: tensor<8x16xf32>) {
  // expected-error @+1 {{'nn.gemm' op result must be 4x16, got 'tensor<16x4xf32>'}}
  %y = nn.gemm %a, %b : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<16x4xf32>
  return
}

// -----

// gemm: with both transposes the result is [A.dim1, B.dim0].
func.func @gemm_result_shape_trans(%a: tensor<8x4xf32>, %b: tensor<16x8xf32>) {
  // expected-error @+1 {{'nn.gemm' op result must be 4x16, got 'tensor<8x8xf32>'}}
  %y = nn.gemm %a, %b {transA = true, transB = true} : (tensor<8x4xf32>, tensor<16x8xf32>) -> tensor<8x8xf32>
  return
}

// -----

// gemm: C must broadcast to [M, N] (a [M] vector does not, trailing-aligned).
func.func @gemm_c_broadcast(%a: tensor<4x8xf32>, %b: tensor<8x16xf32>, %c: tensor<4xf32>) {
  // expected-error @+1 {{'nn.gemm' op C of type 'tensor<4xf32>' does not broadcast to 'tensor<4x16xf32>'}}
  %y = nn.gemm %a, %b, %c : (tensor<4x8xf32>, tensor<8x16xf32>, tensor<4xf32>) -> tensor<4x16xf32>
  return
}

// -----

// gemm: C may not have a higher rank than the result.
func.func @gemm_c_rank(%a: tensor<4x8xf32>, %b: tensor<8x16xf32>, %c: tensor<1x4x16xf32>) {
  // expected-error @+1 {{'nn.gemm' op C of type 'tensor<1x4x16xf32>' does not broadcast to 'tensor<4x16xf32>'}}
  %y = nn.gemm %a, %b, %c : (tensor<4x8xf32>, tensor<8x16xf32>, tensor<1x4x16xf32>) -> tensor<4x16xf32>
  return
}

// -----

// gemm: operands are f32.
func.func @gemm_f16(%a: tensor<4x8xf16>, %b: tensor<8x16xf32>) {
  // expected-error @+1 {{'nn.gemm' op operand #0 must be statically shaped tensor of 32-bit float values, but got 'tensor<4x8xf16>'}}
  %y = nn.gemm %a, %b : (tensor<4x8xf16>, tensor<8x16xf32>) -> tensor<4x16xf32>
  return
}

// -----

// Binary ops: the operand shapes must broadcast.
func.func @add_not_broadcastable(%a: tensor<4x8xf32>, %b: tensor<4x3xf32>) {
  // expected-error @+1 {{'nn.add' op operand shapes 'tensor<4x8xf32>' and 'tensor<4x3xf32>' do not broadcast}}
  %y = nn.add %a, %b : tensor<4x8xf32>, tensor<4x3xf32> -> tensor<4x8xf32>
  return
}

// -----

// Binary ops: broadcasting aligns trailing dimensions ([4] vs [4, 8] fails).
func.func @sub_not_broadcastable(%a: tensor<4x8xf32>, %b: tensor<4xf32>) {
  // expected-error @+1 {{'nn.sub' op operand shapes 'tensor<4x8xf32>' and 'tensor<4xf32>' do not broadcast}}
  %y = nn.sub %a, %b : tensor<4x8xf32>, tensor<4xf32> -> tensor<4x8xf32>
  return
}

// -----

// Binary ops: the result has the broadcast shape, not an operand's.
func.func @mul_result_shape(%a: tensor<4x8xf32>, %b: tensor<8xf32>) {
  // expected-error @+1 {{'nn.mul' op result type 'tensor<8xf32>' must have the broadcast shape of 'tensor<4x8xf32>' and 'tensor<8xf32>'}}
  %y = nn.mul %a, %b : tensor<4x8xf32>, tensor<8xf32> -> tensor<8xf32>
  return
}

// -----

// Binary ops: both operands broadcast ([4, 1] and [8] give [4, 8], not [4, 1]).
func.func @div_result_shape(%a: tensor<4x1xf32>, %b: tensor<8xf32>) {
  // expected-error @+1 {{'nn.div' op result type 'tensor<4x1xf32>' must have the broadcast shape of 'tensor<4x1xf32>' and 'tensor<8xf32>'}}
  %y = nn.div %a, %b : tensor<4x1xf32>, tensor<8xf32> -> tensor<4x1xf32>
  return
}

// -----

// Binary ops are f32 only.
func.func @add_i64(%a: tensor<4xi64>) {
  // expected-error @+1 {{'nn.add' op operand #0 must be statically shaped tensor of 32-bit float values, but got 'tensor<4xi64>'}}
  %y = nn.add %a, %a : tensor<4xi64>, tensor<4xi64> -> tensor<4xi64>
  return
}

// -----

// Unary ops keep the type.
func.func @tanh_type(%a: tensor<4x8xf32>) {
  // expected-error @+1 {{'nn.tanh' op requires the same type for all operands and results}}
  %y = "nn.tanh"(%a) : (tensor<4x8xf32>) -> tensor<8x4xf32>
  return
}

// -----

// Unary ops are f32 only.
func.func @relu_i64(%a: tensor<4x8xi64>) {
  // expected-error @+1 {{'nn.relu' op operand #0 must be statically shaped tensor of 32-bit float values, but got 'tensor<4x8xi64>'}}
  %y = nn.relu %a : tensor<4x8xi64>
  return
}

// -----

// Activation gradients: value, gradient and result have one type.
func.func @relu_grad_type(%a: tensor<4x8xf32>, %g: tensor<8x4xf32>) {
  // expected-error @+1 {{'nn.relu_grad' op requires the same type for all operands and results}}
  %y = "nn.relu_grad"(%a, %g) : (tensor<4x8xf32>, tensor<8x4xf32>) -> tensor<4x8xf32>
  return
}

// -----

// reshape keeps the element count.
func.func @reshape_count(%a: tensor<4x8xf32>) {
  // expected-error @+1 {{'nn.reshape' op element count changes from 32 ('tensor<4x8xf32>') to 16 ('tensor<4x4xf32>')}}
  %y = nn.reshape %a : tensor<4x8xf32> -> tensor<4x4xf32>
  return
}

// -----

// reshape keeps the element type.
func.func @reshape_element_type(%a: tensor<4x8xf32>) {
  // expected-error @+1 {{'nn.reshape' op element type changes from 'f32' to 'i64'}}
  %y = nn.reshape %a : tensor<4x8xf32> -> tensor<32xi64>
  return
}

// -----

// reshape: no dynamic result.
func.func @reshape_dynamic(%a: tensor<4x8xf32>) {
  // expected-error @+1 {{'nn.reshape' op result #0 must be statically shaped tensor of 32-bit float or 64-bit signless integer values, but got 'tensor<?xf32>'}}
  %y = nn.reshape %a : tensor<4x8xf32> -> tensor<?xf32>
  return
}

// -----

// concat needs an input.
func.func @concat_empty() {
  // expected-error @+1 {{'nn.concat' op needs at least one input}}
  %y = nn.concat {axis = 0 : i64} : () -> tensor<4xf32>
  return
}

// -----

// concat: the axis is within the rank.
func.func @concat_axis_too_big(%a: tensor<4x8xf32>) {
  // expected-error @+1 {{'nn.concat' op axis 2 is out of range for rank 2}}
  %y = nn.concat %a {axis = 2 : i64} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return
}

// -----

// concat: negative axes are not accepted (the importer normalizes them).
func.func @concat_axis_negative(%a: tensor<4x8xf32>) {
  // expected-error @+1 {{'nn.concat' op axis -1 is out of range for rank 2}}
  %y = nn.concat %a {axis = -1 : i64} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return
}

// -----

// concat: every input has the result's element type.
func.func @concat_element_type(%a: tensor<4x8xf32>, %b: tensor<4x8xi64>) {
  // expected-error @+1 {{'nn.concat' op input #1 of type 'tensor<4x8xi64>' does not match the result 'tensor<4x16xf32>'}}
  %y = nn.concat %a, %b {axis = 1 : i64} : (tensor<4x8xf32>, tensor<4x8xi64>) -> tensor<4x16xf32>
  return
}

// -----

// concat: every input has the result's rank.
func.func @concat_rank(%a: tensor<4x8xf32>, %b: tensor<8xf32>) {
  // expected-error @+1 {{'nn.concat' op input #1 of type 'tensor<8xf32>' does not match the result 'tensor<4x16xf32>'}}
  %y = nn.concat %a, %b {axis = 1 : i64} : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x16xf32>
  return
}

// -----

// concat: the dimensions other than the axis match the result's.
func.func @concat_mismatched_dim(%a: tensor<4x8xf32>, %b: tensor<3x8xf32>) {
  // expected-error @+1 {{'nn.concat' op input #1 differs from the result in dimension 0}}
  %y = nn.concat %a, %b {axis = 1 : i64} : (tensor<4x8xf32>, tensor<3x8xf32>) -> tensor<4x16xf32>
  return
}

// -----

// concat: the sizes along the axis add up to the result's.
func.func @concat_sum(%a: tensor<4x8xf32>, %b: tensor<4x8xf32>) {
  // expected-error @+1 {{'nn.concat' op inputs add up to 16 along axis 1, the result has 17}}
  %y = nn.concat %a, %b {axis = 1 : i64} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x17xf32>
  return
}

// -----

// slice: the range ends past the dimension.
func.func @slice_past_end(%a: tensor<4x8xf32>) {
  // expected-error @+1 {{'nn.slice' op range [6, 9) is outside dimension 1 of size 8}}
  %y = nn.slice %a {axis = 1 : i64, start = 6 : i64} : tensor<4x8xf32> -> tensor<4x3xf32>
  return
}

// -----

// slice: the range starts before 0.
func.func @slice_negative_start(%a: tensor<4x8xf32>) {
  // expected-error @+1 {{'nn.slice' op range [-1, 2) is outside dimension 1 of size 8}}
  %y = nn.slice %a {axis = 1 : i64, start = -1 : i64} : tensor<4x8xf32> -> tensor<4x3xf32>
  return
}

// -----

// slice: a start so large that start + size overflows int64 is still out of
// range (it used to wrap around and pass).
func.func @slice_start_overflow(%a: tensor<4x8xf32>) {
  // expected-error @+1 {{'nn.slice' op range [9223372036854775807, 9223372036854775808) is outside dimension 1 of size 8}}
  %y = nn.slice %a {axis = 1 : i64, start = 9223372036854775807 : i64} : tensor<4x8xf32> -> tensor<4x1xf32>
  return
}

// -----

// slice: the result is no larger than the input along the axis.
func.func @slice_too_big(%a: tensor<4x8xf32>) {
  // expected-error @+1 {{'nn.slice' op range [0, 9) is outside dimension 1 of size 8}}
  %y = nn.slice %a {axis = 1 : i64, start = 0 : i64} : tensor<4x8xf32> -> tensor<4x9xf32>
  return
}

// -----

// slice: the axis is within the rank.
func.func @slice_axis(%a: tensor<4x8xf32>) {
  // expected-error @+1 {{'nn.slice' op axis 2 is out of range for rank 2}}
  %y = nn.slice %a {axis = 2 : i64, start = 0 : i64} : tensor<4x8xf32> -> tensor<4x8xf32>
  return
}

// -----

// slice: the result has the input's rank.
func.func @slice_rank(%a: tensor<4x8xf32>) {
  // expected-error @+1 {{'nn.slice' op result 'tensor<32xf32>' must have the rank and element type of the input 'tensor<4x8xf32>'}}
  %y = nn.slice %a {axis = 0 : i64, start = 0 : i64} : tensor<4x8xf32> -> tensor<32xf32>
  return
}

// -----

// slice: the result has the input's element type.
func.func @slice_element_type(%a: tensor<4x8xf32>) {
  // expected-error @+1 {{'nn.slice' op result 'tensor<2x8xi64>' must have the rank and element type of the input 'tensor<4x8xf32>'}}
  %y = nn.slice %a {axis = 0 : i64, start = 0 : i64} : tensor<4x8xf32> -> tensor<2x8xi64>
  return
}

// -----

// slice: only the axis dimension may differ.
func.func @slice_other_dim(%a: tensor<4x8xf32>) {
  // expected-error @+1 {{'nn.slice' op result differs from the input in dimension 1}}
  %y = nn.slice %a {axis = 0 : i64, start = 0 : i64} : tensor<4x8xf32> -> tensor<2x4xf32>
  return
}

// -----

// reduce_to: the result must broadcast to the input (trailing-aligned).
func.func @reduce_to_not_broadcastable(%a: tensor<4x8xf32>) {
  // expected-error @+1 {{'nn.reduce_to' op result 'tensor<4xf32>' does not broadcast to the input 'tensor<4x8xf32>'}}
  %y = nn.reduce_to %a : tensor<4x8xf32> -> tensor<4xf32>
  return
}

// -----

// reduce_to cannot add dimensions.
func.func @reduce_to_higher_rank(%a: tensor<4x8xf32>) {
  // expected-error @+1 {{'nn.reduce_to' op result 'tensor<1x4x8xf32>' does not broadcast to the input 'tensor<4x8xf32>'}}
  %y = nn.reduce_to %a : tensor<4x8xf32> -> tensor<1x4x8xf32>
  return
}

// -----

// softmax_cross_entropy: logits are [N, C].
func.func @xent_logits_rank(%a: tensor<4x8x2xf32>, %l: tensor<4xi64>) {
  // expected-error @+1 {{'nn.softmax_cross_entropy' op logits must be [N, C], got 'tensor<4x8x2xf32>'}}
  %y = nn.softmax_cross_entropy %a, %l : tensor<4x8x2xf32>, tensor<4xi64>
  return
}

// -----

// softmax_cross_entropy: one label per sample.
func.func @xent_labels_size(%a: tensor<4x8xf32>, %l: tensor<3xi64>) {
  // expected-error @+1 {{'nn.softmax_cross_entropy' op labels must be [4], got 'tensor<3xi64>'}}
  %y = nn.softmax_cross_entropy %a, %l : tensor<4x8xf32>, tensor<3xi64>
  return
}

// -----

// softmax_cross_entropy: labels are rank 1.
func.func @xent_labels_rank(%a: tensor<4x8xf32>, %l: tensor<4x1xi64>) {
  // expected-error @+1 {{'nn.softmax_cross_entropy' op labels must be [4], got 'tensor<4x1xi64>'}}
  %y = nn.softmax_cross_entropy %a, %l : tensor<4x8xf32>, tensor<4x1xi64>
  return
}

// -----

// softmax_cross_entropy: labels are int64 class indices.
func.func @xent_labels_f32(%a: tensor<4x8xf32>, %l: tensor<4xf32>) {
  // expected-error @+1 {{'nn.softmax_cross_entropy' op operand #1 must be statically shaped tensor of 64-bit signless integer values, but got 'tensor<4xf32>'}}
  %y = nn.softmax_cross_entropy %a, %l : tensor<4x8xf32>, tensor<4xf32>
  return
}

// -----

// softmax_cross_entropy: the loss is a tensor<f32> scalar.
func.func @xent_result_not_scalar(%a: tensor<4x8xf32>, %l: tensor<4xi64>) {
  // expected-error @+1 {{'nn.softmax_cross_entropy' op result #0 must be 0D tensor of 32-bit float values, but got 'tensor<4xf32>'}}
  %y = "nn.softmax_cross_entropy"(%a, %l) : (tensor<4x8xf32>, tensor<4xi64>) -> tensor<4xf32>
  return
}

// -----

// softmax_cross_entropy_grad: the result has the logits' type (the ODS
// constraint fires before the verifier's own check).
func.func @xent_grad_result_type(%a: tensor<4x8xf32>, %l: tensor<4xi64>, %g: tensor<f32>) {
  // expected-error @+1 {{'nn.softmax_cross_entropy_grad' op failed to verify that all of {logits, output} have same type}}
  %y = "nn.softmax_cross_entropy_grad"(%a, %l, %g) : (tensor<4x8xf32>, tensor<4xi64>, tensor<f32>) -> tensor<8x4xf32>
  return
}

// -----

// softmax_cross_entropy_grad: logits are [N, C].
func.func @xent_grad_logits_rank(%a: tensor<32xf32>, %l: tensor<32xi64>, %g: tensor<f32>) {
  // expected-error @+1 {{'nn.softmax_cross_entropy_grad' op logits must be [N, C], got 'tensor<32xf32>'}}
  %y = nn.softmax_cross_entropy_grad %a, %l, %g : tensor<32xf32>, tensor<32xi64>
  return
}

// -----

// softmax_cross_entropy_grad: one label per sample.
func.func @xent_grad_labels(%a: tensor<4x8xf32>, %l: tensor<8xi64>, %g: tensor<f32>) {
  // expected-error @+1 {{'nn.softmax_cross_entropy_grad' op labels must be [4], got 'tensor<8xi64>'}}
  %y = nn.softmax_cross_entropy_grad %a, %l, %g : tensor<4x8xf32>, tensor<8xi64>
  return
}

// -----

// softmax_cross_entropy_grad: the incoming gradient is the scalar loss's.
func.func @xent_grad_not_scalar(%a: tensor<4x8xf32>, %l: tensor<4xi64>, %g: tensor<1xf32>) {
  // expected-error @+1 {{'nn.softmax_cross_entropy_grad' op operand #2 must be 0D tensor of 32-bit float values, but got 'tensor<1xf32>'}}
  %y = "nn.softmax_cross_entropy_grad"(%a, %l, %g) : (tensor<4x8xf32>, tensor<4xi64>, tensor<1xf32>) -> tensor<4x8xf32>
  return
}

// -----

// nll_loss: log-probabilities are [N, C] (the importer flattens [N, C, d...]).
func.func @nll_loss_rank(%a: tensor<4x8x2xf32>, %l: tensor<4xi64>) -> tensor<f32> {
  // expected-error @+1 {{'nn.nll_loss' op logits must be [N, C], got 'tensor<4x8x2xf32>'}}
  %y = nn.nll_loss %a, %l : tensor<4x8x2xf32>, tensor<4xi64>
  return %y : tensor<f32>
}

// -----

// nll_loss: one label per sample.
func.func @nll_loss_labels(%a: tensor<4x8xf32>, %l: tensor<8xi64>) -> tensor<f32> {
  // expected-error @+1 {{'nn.nll_loss' op labels must be [4], got 'tensor<8xi64>'}}
  %y = nn.nll_loss %a, %l : tensor<4x8xf32>, tensor<8xi64>
  return %y : tensor<f32>
}

// -----

// nll_loss: M >= 1 micro-batches.
func.func @nll_loss_microbatches(%a: tensor<4x8xf32>, %l: tensor<4xi64>) -> tensor<f32> {
  // expected-error @+1 {{'nn.nll_loss' op microbatches must be >= 1}}
  %y = nn.nll_loss %a, %l {microbatches = 0 : i64} : tensor<4x8xf32>, tensor<4xi64>
  return %y : tensor<f32>
}

// -----

// nll_loss_grad: the result has the log-probabilities' type.
func.func @nll_loss_grad_type(%a: tensor<4x8xf32>, %l: tensor<4xi64>, %g: tensor<f32>) -> tensor<8x4xf32> {
  // expected-error @+1 {{'nn.nll_loss_grad' op failed to verify that all of {logits, output} have same type}}
  %y = "nn.nll_loss_grad"(%a, %l, %g) : (tensor<4x8xf32>, tensor<4xi64>, tensor<f32>) -> tensor<8x4xf32>
  return %y : tensor<8x4xf32>
}

// -----

func.func @nll_loss_grad_labels(%a: tensor<4x8xf32>, %l: tensor<4x1xi64>, %g: tensor<f32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{'nn.nll_loss_grad' op labels must be [4], got 'tensor<4x1xi64>'}}
  %y = nn.nll_loss_grad %a, %l, %g : tensor<4x8xf32>, tensor<4x1xi64>
  return %y : tensor<4x8xf32>
}

// -----

// transpose: one permutation entry per input dimension.
func.func @transpose_perm_size(%a: tensor<2x3xf32>) {
  // expected-error @+1 {{'nn.transpose' op permutation has 3 entries for a rank-2 input}}
  %y = nn.transpose %a, [0, 1, 2] : tensor<2x3xf32> -> tensor<3x2xf32>
  return
}

// -----

// transpose: the permutation must not repeat a dimension.
func.func @transpose_not_perm(%a: tensor<2x3xf32>) {
  // expected-error @+1 {{'nn.transpose' op permutation is not a permutation of [0, 2)}}
  %y = nn.transpose %a, [1, 1] : tensor<2x3xf32> -> tensor<3x3xf32>
  return
}

// -----

// transpose: the result's dimensions are the permuted input dimensions.
func.func @transpose_result(%a: tensor<2x3x4xf32>) {
  // expected-error @+1 {{'nn.transpose' op result dimension 1 is 3, expected 2 (input dimension 0)}}
  %y = nn.transpose %a, [2, 0, 1] : tensor<2x3x4xf32> -> tensor<4x3x2xf32>
  return
}

// -----

// The nn dialect's discardable attributes: nn.backward is a unit attribute
// on an op.
func.func @backward_not_unit(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'nn.relu' op attribute 'nn.backward' must be a unit attribute, got true}}
  %y = nn.relu %x {nn.backward = true} : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

// nn.input names a graph input: it belongs on a function argument.
func.func @input_on_op(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'nn.relu' op attribute 'nn.input' belongs on a function argument}}
  %y = nn.relu %x {nn.input = "x"} : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

// nn.loss marks a result, not the function.
// expected-error @+1 {{'func.func' op attribute 'nn.loss' belongs on a function result}}
func.func @loss_on_function(%x: tensor<f32>) -> tensor<f32> attributes {nn.loss} {
  return %x : tensor<f32>
}

// -----

// An attribute in the nn namespace that the dialect does not declare.
func.func @unknown(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'nn.relu' op has 'nn.stage', which is not an attribute of the nn dialect}}
  %y = nn.relu %x {nn.stage = 0 : i64} : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

// nn.input is the ONNX input's name: a string.
// expected-error @+1 {{'func.func' op argument #0: attribute 'nn.input' must be a string (the ONNX input name), got 0 : i64}}
func.func @input_not_string(%x: tensor<4xf32> {nn.input = 0 : i64}) {
  return
}

// -----

// nn.loss marks a result, not an argument.
// expected-error @+1 {{'func.func' op argument #0 has 'nn.loss', which is not an attribute of arguments}}
func.func @loss_on_argument(%x: tensor<f32> {nn.loss}) {
  return
}

// -----

// nn.output is the ONNX output's name: a string.
// expected-error @+1 {{'func.func' op result #0: attribute 'nn.output' must be a string (the ONNX output name), got 1 : i64}}
func.func @output_not_string(%x: tensor<f32>) -> (tensor<f32> {nn.output = 1 : i64}) {
  return %x : tensor<f32>
}

// -----

// nn.loss is a unit attribute.
// expected-error @+1 {{'func.func' op result #0: attribute 'nn.loss' must be a unit attribute, got "yes"}}
func.func @loss_not_unit(%x: tensor<f32>) -> (tensor<f32> {nn.loss = "yes"}) {
  return %x : tensor<f32>
}

// -----

// nn.input names an argument, not a result.
// expected-error @+1 {{'func.func' op result #0 has 'nn.input', which is not an attribute of results}}
func.func @input_on_result(%x: tensor<f32>) -> (tensor<f32> {nn.input = "x"}) {
  return %x : tensor<f32>
}

// -----

// nn.softmax: the axis is one of the input's.
func.func @softmax_axis(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  // expected-error @+1 {{'nn.softmax' op axis 2 is out of range for rank 2}}
  %y = nn.softmax %x {axis = 2 : i64} : tensor<2x3xf32>
  return %y : tensor<2x3xf32>
}

// -----

func.func @softmax_grad_axis(%y: tensor<2x3xf32>, %g: tensor<2x3xf32>) -> tensor<2x3xf32> {
  // expected-error @+1 {{'nn.softmax_grad' op axis -1 is out of range for rank 2}}
  %d = nn.softmax_grad %y, %g {axis = -1 : i64} : tensor<2x3xf32>
  return %d : tensor<2x3xf32>
}

// -----

// nn.log_softmax: the axis is one of the input's.
func.func @log_softmax_axis(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  // expected-error @+1 {{'nn.log_softmax' op axis 2 is out of range for rank 2}}
  %y = nn.log_softmax %x {axis = 2 : i64} : tensor<2x3xf32>
  return %y : tensor<2x3xf32>
}

// -----

func.func @log_softmax_grad_axis(%y: tensor<2x3xf32>, %g: tensor<2x3xf32>) -> tensor<2x3xf32> {
  // expected-error @+1 {{'nn.log_softmax_grad' op axis -1 is out of range for rank 2}}
  %d = nn.log_softmax_grad %y, %g {axis = -1 : i64} : tensor<2x3xf32>
  return %d : tensor<2x3xf32>
}

// -----

// nn.log_softmax_grad: the value, the gradient and the result have one type.
func.func @log_softmax_grad_types(%y: tensor<2x3xf32>, %g: tensor<3x2xf32>) -> tensor<2x3xf32> {
  // expected-error @+1 {{'nn.log_softmax_grad' op requires the same type for all operands and results}}
  %d = "nn.log_softmax_grad"(%y, %g) {axis = 1 : i64} : (tensor<2x3xf32>, tensor<3x2xf32>) -> tensor<2x3xf32>
  return %d : tensor<2x3xf32>
}

// -----

// nn.reduce_max: the result must broadcast to the input, as nn.reduce_to's.
func.func @reduce_max_not_broadcastable(%a: tensor<4x8xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'nn.reduce_max' op result 'tensor<4xf32>' does not broadcast to the input 'tensor<4x8xf32>'}}
  %y = nn.reduce_max %a : tensor<4x8xf32> -> tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

// nn.clip needs a bound.
func.func @clip_no_bound(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'nn.clip' op needs a min or a max bound}}
  %y = nn.clip %x : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

// nn.clip: a NaN bound is no bound.
func.func @clip_nan(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'nn.clip' op max must not be NaN}}
  %y = nn.clip %x {min = 0.0 : f32, max = 0x7FC00000 : f32} : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

// nn.clip_grad has clip's bounds.
func.func @clip_grad_no_bound(%x: tensor<4xf32>, %g: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'nn.clip_grad' op needs a min or a max bound}}
  %y = nn.clip_grad %x, %g : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

// nn.max: the result has the operands' broadcast shape.
func.func @max_result(%a: tensor<4x8xf32>, %b: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error @+1 {{'nn.max' op result type 'tensor<8xf32>' must have the broadcast shape of 'tensor<4x8xf32>' and 'tensor<8xf32>'}}
  %y = nn.max %a, %b : tensor<4x8xf32>, tensor<8xf32> -> tensor<8xf32>
  return %y : tensor<8xf32>
}

// -----

// nn.min: the operands broadcast.
func.func @min_shapes(%a: tensor<4x8xf32>, %b: tensor<4xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{'nn.min' op operand shapes 'tensor<4x8xf32>' and 'tensor<4xf32>' do not broadcast}}
  %y = nn.min %a, %b : tensor<4x8xf32>, tensor<4xf32> -> tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

// -----

// nn.max_grad: the gradient has the broadcast shape of the operands.
func.func @max_grad_result(%a: tensor<4x8xf32>, %b: tensor<8xf32>, %g: tensor<4x8xf32>) -> tensor<8xf32> {
  // expected-error @+1 {{'nn.max_grad' op result type 'tensor<8xf32>' must have the broadcast shape of the operands}}
  %y = nn.max_grad %a, %b, %g : tensor<4x8xf32>, tensor<8xf32>, tensor<4x8xf32> -> tensor<8xf32>
  return %y : tensor<8xf32>
}

// -----

func.func @min_grad_shapes(%a: tensor<4x8xf32>, %b: tensor<8xf32>, %g: tensor<3x8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{'nn.min_grad' op operand shapes 'tensor<4x8xf32>', 'tensor<8xf32>' and 'tensor<3x8xf32>' do not broadcast}}
  %y = nn.min_grad %a, %b, %g : tensor<4x8xf32>, tensor<8xf32>, tensor<3x8xf32> -> tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

// -----

// nn.broadcast_to: numpy broadcasting only (a size-1 or missing dimension
// grows, nothing shrinks).
func.func @broadcast_to_shrinks(%x: tensor<4x3xf32>) -> tensor<4x1xf32> {
  // expected-error @+1 {{'nn.broadcast_to' op input 'tensor<4x3xf32>' does not broadcast to 'tensor<4x1xf32>'}}
  %y = nn.broadcast_to %x : tensor<4x3xf32> -> tensor<4x1xf32>
  return %y : tensor<4x1xf32>
}

// -----

func.func @pow_shapes(%x: tensor<4x3xf32>, %e: tensor<2xf32>) -> tensor<4x3xf32> {
  // expected-error @+1 {{'nn.pow' op operand shapes 'tensor<4x3xf32>' and 'tensor<2xf32>' do not broadcast}}
  %y = nn.pow %x, %e : tensor<4x3xf32>, tensor<2xf32> -> tensor<4x3xf32>
  return %y : tensor<4x3xf32>
}

// -----

// nn.batch_matmul: operands of rank >= 2, one of them batched.
func.func @batch_matmul_rank1(%a: tensor<4xf32>, %b: tensor<2x4x3xf32>) -> tensor<2x3xf32> {
  // expected-error @+1 {{'nn.batch_matmul' op A and B must have rank >= 2, got ranks 1 and 3}}
  %y = nn.batch_matmul %a, %b : (tensor<4xf32>, tensor<2x4x3xf32>) -> tensor<2x3xf32>
  return %y : tensor<2x3xf32>
}

// -----

func.func @batch_matmul_rank2(%a: tensor<2x4xf32>, %b: tensor<4x3xf32>) -> tensor<2x3xf32> {
  // expected-error @+1 {{'nn.batch_matmul' op A or B must have rank >= 3 (a rank-2 product is nn.gemm)}}
  %y = nn.batch_matmul %a, %b : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
  return %y : tensor<2x3xf32>
}

// -----

func.func @batch_matmul_result_rank(%a: tensor<5x2x4xf32>, %b: tensor<5x4x3xf32>) -> tensor<2x3xf32> {
  // expected-error @+1 {{'nn.batch_matmul' op result must have rank 3, got 2}}
  %y = nn.batch_matmul %a, %b : (tensor<5x2x4xf32>, tensor<5x4x3xf32>) -> tensor<2x3xf32>
  return %y : tensor<2x3xf32>
}

// -----

func.func @batch_matmul_inner(%a: tensor<5x2x4xf32>, %b: tensor<5x4x3xf32>) -> tensor<5x2x4xf32> {
  // expected-error @+1 {{'nn.batch_matmul' op inner dimensions differ: op(A) is 2x4, op(B) is 3x4}}
  %y = nn.batch_matmul %a, %b {transB = true} : (tensor<5x2x4xf32>, tensor<5x4x3xf32>) -> tensor<5x2x4xf32>
  return %y : tensor<5x2x4xf32>
}

// -----

func.func @batch_matmul_broadcast(%a: tensor<5x2x4xf32>, %b: tensor<6x4x3xf32>) -> tensor<5x2x3xf32> {
  // expected-error @+1 {{'nn.batch_matmul' op batch dimensions of 'tensor<5x2x4xf32>' and 'tensor<6x4x3xf32>' do not broadcast}}
  %y = nn.batch_matmul %a, %b : (tensor<5x2x4xf32>, tensor<6x4x3xf32>) -> tensor<5x2x3xf32>
  return %y : tensor<5x2x3xf32>
}

// -----

func.func @batch_matmul_result(%a: tensor<1x2x4xf32>, %b: tensor<5x4x3xf32>) -> tensor<1x2x3xf32> {
  // expected-error @+1 {{'nn.batch_matmul' op result must be 'tensor<5x2x3xf32>', got 'tensor<1x2x3xf32>'}}
  %y = nn.batch_matmul %a, %b : (tensor<1x2x4xf32>, tensor<5x4x3xf32>) -> tensor<1x2x3xf32>
  return %y : tensor<1x2x3xf32>
}

// -----

func.func @equal_types(%a: tensor<4xi64>, %b: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'nn.equal' op operands must have one element type, got 'tensor<4xi64>' and 'tensor<4xf32>'}}
  %y = nn.equal %a, %b : tensor<4xi64>, tensor<4xf32> -> tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

func.func @where_shapes(%c: tensor<3xf32>, %a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'nn.where' op operand shapes 'tensor<3xf32>', 'tensor<4xf32>' and 'tensor<4xf32>' do not broadcast}}
  %y = nn.where %c, %a, %b : tensor<3xf32>, tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

func.func @where_result(%c: tensor<1x4xf32>, %a: tensor<f32>, %b: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'nn.where' op result type 'tensor<4xf32>' must have the broadcast shape of the operands}}
  %y = nn.where %c, %a, %b : tensor<1x4xf32>, tensor<f32>, tensor<4xf32> -> tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

func.func @int_to_float_shape(%a: tensor<4xi64>) -> tensor<2x2xf32> {
  // expected-error @+1 {{'nn.int_to_float' op result 'tensor<2x2xf32>' must have the shape of the input 'tensor<4xi64>'}}
  %y = nn.int_to_float %a : tensor<4xi64> -> tensor<2x2xf32>
  return %y : tensor<2x2xf32>
}

// -----

// nn.layer_norm: the axis is one of the input's (the normalized axes are
// never empty).
func.func @layer_norm_axis(%x: tensor<2x3xf32>, %s: tensor<3xf32>) -> tensor<2x3xf32> {
  // expected-error @+1 {{'nn.layer_norm' op axis 2 is out of range for rank 2}}
  %y:3 = nn.layer_norm %x, %s {axis = 2 : i64, epsilon = 1.0e-05 : f32} : tensor<2x3xf32>, tensor<3xf32> -> tensor<2xf32>
  return %y#0 : tensor<2x3xf32>
}

// -----

// The scale has the normalized shape x.shape[axis:].
func.func @layer_norm_scale(%x: tensor<2x3x4xf32>, %s: tensor<4xf32>) -> tensor<2x3x4xf32> {
  // expected-error @+1 {{'nn.layer_norm' op scale and bias must have the normalized shape 'tensor<3x4xf32>', got 'tensor<4xf32>'}}
  %y:3 = nn.layer_norm %x, %s {axis = 1 : i64, epsilon = 1.0e-05 : f32} : tensor<2x3x4xf32>, tensor<4xf32> -> tensor<2xf32>
  return %y#0 : tensor<2x3x4xf32>
}

// -----

// The bias has the scale's type.
// expected-note @+1 {{prior use here}}
func.func @layer_norm_bias(%x: tensor<2x3xf32>, %s: tensor<3xf32>, %b: tensor<2xf32>) -> tensor<2x3xf32> {
  // expected-error @+1 {{use of value '%b' expects different type than prior uses: 'tensor<3xf32>' vs 'tensor<2xf32>'}}
  %y:3 = nn.layer_norm %x, %s, %b {axis = 1 : i64, epsilon = 1.0e-05 : f32} : tensor<2x3xf32>, tensor<3xf32> -> tensor<2xf32>
  return %y#0 : tensor<2x3xf32>
}

// -----

// The statistics have the leading shape x.shape[:axis].
func.func @layer_norm_stats(%x: tensor<2x3x4xf32>, %s: tensor<4xf32>) -> tensor<2x3x4xf32> {
  // expected-error @+1 {{'nn.layer_norm' op mean and inv_std_dev must have the leading shape 'tensor<2x3xf32>', got 'tensor<2x3x1xf32>'}}
  %y:3 = nn.layer_norm %x, %s {axis = 2 : i64, epsilon = 1.0e-05 : f32} : tensor<2x3x4xf32>, tensor<4xf32> -> tensor<2x3x1xf32>
  return %y#0 : tensor<2x3x4xf32>
}

// -----

func.func @layer_norm_grad_scale(%x: tensor<2x3xf32>, %m: tensor<2xf32>, %s: tensor<2xf32>, %g: tensor<2x3xf32>) -> tensor<2x3xf32> {
  // expected-error @+1 {{'nn.layer_norm_grad' op scale and bias must have the normalized shape 'tensor<3xf32>', got 'tensor<2xf32>'}}
  %d = nn.layer_norm_grad %x, %m, %m, %s, %g {axis = 1 : i64} : tensor<2x3xf32>, tensor<2xf32>, tensor<2xf32>
  return %d : tensor<2x3xf32>
}

// -----

func.func @layer_norm_scale_grad_axis(%x: tensor<2x3xf32>, %m: tensor<2xf32>, %g: tensor<2x3xf32>) -> tensor<3xf32> {
  // expected-error @+1 {{'nn.layer_norm_scale_grad' op axis -1 is out of range for rank 2}}
  %d = nn.layer_norm_scale_grad %x, %m, %m, %g {axis = -1 : i64} : tensor<2x3xf32>, tensor<2xf32> -> tensor<3xf32>
  return %d : tensor<3xf32>
}

// -----

func.func @dropout_ratio(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'nn.dropout' op ratio must be in [0, 1), got 1.000000e+00}}
  %y = nn.dropout %x {key = 1 : i64, ratio = 1.0 : f32} : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

// gather: the result is the indices' shape followed by the table's rows.
func.func @gather_shape(%t: tensor<50x16xf32>, %i: tensor<4x8xi64>) {
  // expected-error @+1 {{'nn.gather' op the result 'tensor<4x16xf32>' must have the indices' shape followed by the table's dimensions after the first: expected 'tensor<4x8x16xf32>'}}
  %y = nn.gather %t, %i : tensor<50x16xf32>, tensor<4x8xi64> -> tensor<4x16xf32>
  return
}

// -----

// gather: a scalar table has no rows.
func.func @gather_rank(%t: tensor<f32>, %i: tensor<4xi64>) {
  // expected-error @+1 {{'nn.gather' op the table must have rank >= 1, got 'tensor<f32>'}}
  %y = nn.gather %t, %i : tensor<f32>, tensor<4xi64> -> tensor<4xf32>
  return
}

// -----

// gather: the indices are int64.
func.func @gather_float_indices(%t: tensor<50x16xf32>, %i: tensor<4xf32>) {
  // expected-error @+1 {{'nn.gather' op operand #1 must be statically shaped tensor of 64-bit signless integer values}}
  %y = nn.gather %t, %i : tensor<50x16xf32>, tensor<4xf32> -> tensor<4x16xf32>
  return
}

// -----

// scatter_add: the gradient has the gathered rows' shape.
func.func @scatter_add_shape(%g: tensor<4x8x15xf32>, %i: tensor<4x8xi64>) {
  // expected-error @+1 {{'nn.scatter_add' op the gradient 'tensor<4x8x15xf32>' must have the indices' shape followed by the table's dimensions after the first: expected 'tensor<4x8x16xf32>'}}
  %y = nn.scatter_add %g, %i : tensor<4x8x15xf32>, tensor<4x8xi64> -> tensor<50x16xf32>
  return
}

// -----

// nn.attention: q, k and v are [*, T, d] (rank >= 3).
func.func @attention_rank(%q: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{'nn.attention' op q must have rank >= 3 ([*, Tq, d]), got 'tensor<4x8xf32>'}}
  %o:2 = nn.attention %q, %q, %q {scale = 1.0 : f32} : (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4xf32>)
  return %o#0 : tensor<4x8xf32>
}

// -----

// q, k and v share their leading (batch, head) axes: no broadcasting.
func.func @attention_leading(%q: tensor<2x4x8xf32>, %k: tensor<1x4x8xf32>) -> tensor<2x4x8xf32> {
  // expected-error @+1 {{'nn.attention' op q, k and v must have the same leading shape, got 'tensor<2x4x8xf32>', 'tensor<1x4x8xf32>' and 'tensor<1x4x8xf32>'}}
  %o:2 = nn.attention %q, %k, %k {scale = 1.0 : f32} : (tensor<2x4x8xf32>, tensor<1x4x8xf32>, tensor<1x4x8xf32>) -> (tensor<2x4x8xf32>, tensor<2x4xf32>)
  return %o#0 : tensor<2x4x8xf32>
}

// -----

// The keys have the queries' width d.
func.func @attention_width(%q: tensor<2x4x8xf32>, %k: tensor<2x4x6xf32>) -> tensor<2x4x6xf32> {
  // expected-error @+1 {{'nn.attention' op k must have q's last dimension 8, got 'tensor<2x4x6xf32>'}}
  %o:2 = nn.attention %q, %k, %k {scale = 1.0 : f32} : (tensor<2x4x8xf32>, tensor<2x4x6xf32>, tensor<2x4x6xf32>) -> (tensor<2x4x6xf32>, tensor<2x4xf32>)
  return %o#0 : tensor<2x4x6xf32>
}

// -----

// The values have the keys' sequence length.
func.func @attention_values(%q: tensor<2x4x8xf32>, %v: tensor<2x3x8xf32>) -> tensor<2x4x8xf32> {
  // expected-error @+1 {{'nn.attention' op v must have k's sequence length 4, got 'tensor<2x3x8xf32>'}}
  %o:2 = nn.attention %q, %q, %v {scale = 1.0 : f32} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x3x8xf32>) -> (tensor<2x4x8xf32>, tensor<2x4xf32>)
  return %o#0 : tensor<2x4x8xf32>
}

// -----

// The mask is [Tq, Tk], shared by every (batch, head) block.
func.func @attention_mask(%q: tensor<2x4x8xf32>, %m: tensor<1x4x4xf32>) -> tensor<2x4x8xf32> {
  // expected-error @+1 {{'nn.attention' op mask must be 'tensor<4x4xf32>' ([Tq, Tk], no batch axis), got 'tensor<1x4x4xf32>'}}
  %o:2 = nn.attention %q, %q, %q mask %m {scale = 1.0 : f32} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<1x4x4xf32>) -> (tensor<2x4x8xf32>, tensor<2x4xf32>)
  return %o#0 : tensor<2x4x8xf32>
}

// -----

// The output is [*, Tq, dv].
func.func @attention_output(%q: tensor<2x4x8xf32>, %v: tensor<2x4x6xf32>) -> tensor<2x4x8xf32> {
  // expected-error @+1 {{'nn.attention' op output must be 'tensor<2x4x6xf32>', got 'tensor<2x4x8xf32>'}}
  %o:2 = nn.attention %q, %q, %v {scale = 1.0 : f32} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x6xf32>) -> (tensor<2x4x8xf32>, tensor<2x4xf32>)
  return %o#0 : tensor<2x4x8xf32>
}

// -----

// The log-sum-exp has one entry per query row, [*, Tq].
func.func @attention_lse(%q: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
  // expected-error @+1 {{'nn.attention' op lse must be 'tensor<2x4xf32>' (one log-sum-exp per query row), got 'tensor<2x4x1xf32>'}}
  %o:2 = nn.attention %q, %q, %q {scale = 1.0 : f32} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> (tensor<2x4x8xf32>, tensor<2x4x1xf32>)
  return %o#0 : tensor<2x4x8xf32>
}

// -----

// f32 only.
func.func @attention_type(%q: tensor<2x4x8xi64>) -> tensor<2x4x8xi64> {
  // expected-error @+1 {{'nn.attention' op operand #0 must be statically shaped tensor of 32-bit float values, but got 'tensor<2x4x8xi64>'}}
  %o:2 = nn.attention %q, %q, %q {scale = 1.0 : f32} : (tensor<2x4x8xi64>, tensor<2x4x8xi64>, tensor<2x4x8xi64>) -> (tensor<2x4x8xi64>, tensor<2x4xf32>)
  return %o#0 : tensor<2x4x8xi64>
}

// -----

// nn.attention_grad: the gradients have their operands' types.
func.func @attention_grad_types(%q: tensor<2x4x8xf32>, %l: tensor<2x4xf32>) -> tensor<2x4x8xf32> {
  // expected-error @+1 {{'nn.attention_grad' op failed to verify that all of {k, dk} have same type}}
  %d:3 = nn.attention_grad %q, %q, %q, %q, %l, %q {scale = 1.0 : f32} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4xf32>, tensor<2x4x8xf32>) -> (tensor<2x4x8xf32>, tensor<2x4x4xf32>, tensor<2x4x8xf32>)
  return %d#0 : tensor<2x4x8xf32>
}

// -----

// nn.attention_grad checks the forward's shapes too (here the mask).
func.func @attention_grad_mask(%q: tensor<2x4x8xf32>, %m: tensor<4x3xf32>, %l: tensor<2x4xf32>) -> tensor<2x4x8xf32> {
  // expected-error @+1 {{'nn.attention_grad' op mask must be 'tensor<4x4xf32>' ([Tq, Tk], no batch axis), got 'tensor<4x3xf32>'}}
  %d:3 = nn.attention_grad %q, %q, %q mask %m, %q, %l, %q {scale = 1.0 : f32} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<4x3xf32>, tensor<2x4x8xf32>, tensor<2x4xf32>, tensor<2x4x8xf32>) -> (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>)
  return %d#0 : tensor<2x4x8xf32>
}

// -----

// A parameter is state (updated by the forward) or frozen (never updated),
// not both.
// expected-error @+1 {{'nn.parameter' op @w cannot be both state (updated by the forward) and frozen (never updated)}}
nn.parameter @w state frozen : tensor<4xf32>
