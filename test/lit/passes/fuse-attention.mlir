// gpipe-fuse-attention: scaled dot-product attention as the importer writes
// it (nn.batch_matmul q, k with transB, nn.div or nn.mul by a splat constant,
// nn.where masking with -inf, nn.softmax along the last axis, nn.batch_matmul
// with v) becomes one nn.attention with the scale and a [Tq, Tk] mask. Only
// that pattern is rewritten: another softmax axis, a scale that is not a
// splat constant, a value read outside the pattern, a mask from the data or
// with an axis of its own, a finite fill, a dropout on the probabilities,
// broadcast keys, ... leave every op as it was.
// RUN: gpipe-opt %s --split-input-file --gpipe-fuse-attention | FileCheck %s

// The attention of GptTiny (test/e2e/models.py) as the importer writes it:
// q @ k^T (transB), / sqrt(dh), masked_fill(causal == 0, -inf) with a
// constant mask [1, 1, T, T], softmax over the last axis, @ v. One
// nn.attention with scale 1/sqrt(dh) and the mask as a [T, T] constant; the
// pattern's constants go too.
// CHECK-LABEL: func.func @causal(
// CHECK-SAME: %[[Q:[^:]+]]: tensor<2x3x4x8xf32>, %[[K:[^:]+]]: tensor<2x3x4x8xf32>, %[[V:[^:]+]]: tensor<2x3x4x8xf32>)
// CHECK-NEXT: %[[M:.+]] = nn.constant dense<{{\[}}[0.000000e+00, 1.000000e+00, 1.000000e+00, 1.000000e+00], [0.000000e+00, 0.000000e+00, 1.000000e+00, 1.000000e+00], [0.000000e+00, 0.000000e+00, 0.000000e+00, 1.000000e+00], [0.000000e+00, 0.000000e+00, 0.000000e+00, 0.000000e+00]]> : tensor<4x4xf32>
// CHECK-NEXT: %[[O:[^,]+]], %{{[^ ]+}} = nn.attention %[[Q]], %[[K]], %[[V]] mask %[[M]] {scale = 0.353553385 : f32} : (tensor<2x3x4x8xf32>, tensor<2x3x4x8xf32>, tensor<2x3x4x8xf32>, tensor<4x4xf32>) -> (tensor<2x3x4x8xf32>, tensor<2x3x4xf32>)
// CHECK-NEXT: return %[[O]] : tensor<2x3x4x8xf32>
// CHECK-NEXT: }
func.func @causal(%q: tensor<2x3x4x8xf32>, %k: tensor<2x3x4x8xf32>, %v: tensor<2x3x4x8xf32>) -> tensor<2x3x4x8xf32> {
  %s = nn.batch_matmul %q, %k {transB = true} : (tensor<2x3x4x8xf32>, tensor<2x3x4x8xf32>) -> tensor<2x3x4x4xf32>
  %c = nn.constant dense<2.82842708> : tensor<f32>
  %d = nn.div %s, %c : tensor<2x3x4x4xf32>, tensor<f32> -> tensor<2x3x4x4xf32>
  %m = nn.constant dense<[[[[0.0, 1.0, 1.0, 1.0], [0.0, 0.0, 1.0, 1.0], [0.0, 0.0, 0.0, 1.0], [0.0, 0.0, 0.0, 0.0]]]]> : tensor<1x1x4x4xf32>
  %ninf = nn.constant dense<0xFF800000> : tensor<f32>
  %w = nn.where %m, %ninf, %d : tensor<1x1x4x4xf32>, tensor<f32>, tensor<2x3x4x4xf32> -> tensor<2x3x4x4xf32>
  %p = nn.softmax %w {axis = 3 : i64} : tensor<2x3x4x4xf32>
  %y = nn.batch_matmul %p, %v : (tensor<2x3x4x4xf32>, tensor<2x3x4x8xf32>) -> tensor<2x3x4x8xf32>
  return %y : tensor<2x3x4x8xf32>
}

// -----

// A scale by multiplication (c * s, the constant on either side), no mask,
// Tq != Tk and d != dv (cross-attention shapes), rank 3.
// CHECK-LABEL: func.func @mul_no_mask(
// CHECK-SAME: %[[Q:[^:]+]]: tensor<2x4x8xf32>, %[[K:[^:]+]]: tensor<2x6x8xf32>, %[[V:[^:]+]]: tensor<2x6x5xf32>)
// CHECK-NEXT: %[[O:[^,]+]], %{{[^ ]+}} = nn.attention %[[Q]], %[[K]], %[[V]] {scale = 0.353553385 : f32} : (tensor<2x4x8xf32>, tensor<2x6x8xf32>, tensor<2x6x5xf32>) -> (tensor<2x4x5xf32>, tensor<2x4xf32>)
// CHECK-NEXT: return %[[O]] : tensor<2x4x5xf32>
func.func @mul_no_mask(%q: tensor<2x4x8xf32>, %k: tensor<2x6x8xf32>, %v: tensor<2x6x5xf32>) -> tensor<2x4x5xf32> {
  %s = nn.batch_matmul %q, %k {transB = true} : (tensor<2x4x8xf32>, tensor<2x6x8xf32>) -> tensor<2x4x6xf32>
  %c = nn.constant dense<0.353553385> : tensor<f32>
  %d = nn.mul %c, %s : tensor<f32>, tensor<2x4x6xf32> -> tensor<2x4x6xf32>
  %p = nn.softmax %d {axis = 2 : i64} : tensor<2x4x6xf32>
  %y = nn.batch_matmul %p, %v : (tensor<2x4x6xf32>, tensor<2x6x5xf32>) -> tensor<2x4x5xf32>
  return %y : tensor<2x4x5xf32>
}

// -----

nn.parameter @causal : tensor<1x1x4x4xf32>
// The mask computed from a parameter (torch's registered buffer) and
// constants carries no batch: it becomes an nn.reshape to [T, T]. Several
// attentions fuse, each with its own mask.
// CHECK-LABEL: func.func @mask_from_parameter(
// CHECK-SAME: %[[Q:[^:]+]]: tensor<2x4x8xf32>, %[[K:[^:]+]]: tensor<2x4x8xf32>, %[[V:[^:]+]]: tensor<2x4x8xf32>)
// CHECK:      %[[MM:.+]] = nn.reshape %{{.+}} : tensor<1x1x4x4xf32> -> tensor<1x4x4xf32>
// CHECK-NEXT: %[[M2:.+]] = nn.reshape %[[MM]] : tensor<1x4x4xf32> -> tensor<4x4xf32>
// CHECK-NEXT: %[[M1:.+]] = nn.reshape %[[MM]] : tensor<1x4x4xf32> -> tensor<4x4xf32>
// CHECK-NEXT: %[[O:[^,]+]], %{{[^ ]+}} = nn.attention %[[Q]], %[[K]], %[[V]] mask %[[M1]] {scale = 0.353553385 : f32}
// CHECK-NEXT: %[[O2:[^,]+]], %{{[^ ]+}} = nn.attention %[[O]], %[[K]], %[[V]] mask %[[M2]] {scale = 1.000000e+00 : f32}
// CHECK-NEXT: return %[[O2]]
// CHECK-NOT: nn.softmax
func.func @mask_from_parameter(%q: tensor<2x4x8xf32>, %k: tensor<2x4x8xf32>, %v: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
  %b = nn.param @causal : tensor<1x1x4x4xf32>
  %zero = nn.constant dense<0.0> : tensor<f32>
  %m = nn.equal %b, %zero : tensor<1x1x4x4xf32>, tensor<f32> -> tensor<1x1x4x4xf32>
  %mm = nn.reshape %m : tensor<1x1x4x4xf32> -> tensor<1x4x4xf32>
  %s = nn.batch_matmul %q, %k {transB = true} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x4xf32>
  %c = nn.constant dense<2.82842708> : tensor<f32>
  %d = nn.div %s, %c : tensor<2x4x4xf32>, tensor<f32> -> tensor<2x4x4xf32>
  %ninf = nn.constant dense<0xFF800000> : tensor<f32>
  %w = nn.where %mm, %ninf, %d : tensor<1x4x4xf32>, tensor<f32>, tensor<2x4x4xf32> -> tensor<2x4x4xf32>
  %p = nn.softmax %w {axis = 2 : i64} : tensor<2x4x4xf32>
  %y = nn.batch_matmul %p, %v : (tensor<2x4x4xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  %s2 = nn.batch_matmul %y, %k {transB = true} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x4xf32>
  %w2 = nn.where %mm, %ninf, %s2 : tensor<1x4x4xf32>, tensor<f32>, tensor<2x4x4xf32> -> tensor<2x4x4xf32>
  %p2 = nn.softmax %w2 {axis = 2 : i64} : tensor<2x4x4xf32>
  %y2 = nn.batch_matmul %p2, %v : (tensor<2x4x4xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  return %y2 : tensor<2x4x8xf32>
}

// -----

// GptTiny as torch exports it: `k.transpose(1, 2)` then `.transpose(-2, -1)`
// compose into one Transpose [0, 2, 3, 1], which the importer does not fold
// into transB. The fused op reads k as [B, H, T, dh]: one transpose
// [0, 2, 1, 3] of the same input (as q's and v's), the old one erased.
// CHECK-LABEL: func.func @transposed_keys(
// CHECK-SAME: %[[Q:[^:]+]]: tensor<2x3x4x8xf32>, %[[X:[^:]+]]: tensor<2x4x3x8xf32>, %[[V:[^:]+]]: tensor<2x3x4x8xf32>)
// CHECK-NEXT: %[[K:.+]] = nn.transpose %[[X]], [0, 2, 1, 3] : tensor<2x4x3x8xf32> -> tensor<2x3x4x8xf32>
// CHECK-NEXT: %[[O:[^,]+]], %{{[^ ]+}} = nn.attention %[[Q]], %[[K]], %[[V]] {scale = 0.353553385 : f32}
// CHECK-NEXT: return %[[O]]
func.func @transposed_keys(%q: tensor<2x3x4x8xf32>, %x: tensor<2x4x3x8xf32>, %v: tensor<2x3x4x8xf32>) -> tensor<2x3x4x8xf32> {
  %kt = nn.transpose %x, [0, 2, 3, 1] : tensor<2x4x3x8xf32> -> tensor<2x3x8x4xf32>
  %s = nn.batch_matmul %q, %kt : (tensor<2x3x4x8xf32>, tensor<2x3x8x4xf32>) -> tensor<2x3x4x4xf32>
  %c = nn.constant dense<2.82842708> : tensor<f32>
  %d = nn.div %s, %c : tensor<2x3x4x4xf32>, tensor<f32> -> tensor<2x3x4x4xf32>
  %p = nn.softmax %d {axis = 3 : i64} : tensor<2x3x4x4xf32>
  %y = nn.batch_matmul %p, %v : (tensor<2x3x4x4xf32>, tensor<2x3x4x8xf32>) -> tensor<2x3x4x8xf32>
  return %y : tensor<2x3x4x8xf32>
}

// -----

// k^T as a transpose of k's last two axes that is read elsewhere too: k is
// that transpose's input (the two cancel), and the transpose stays for its
// other reader. No scale: 1.
// CHECK-LABEL: func.func @cancelling_transpose(
// CHECK-SAME: %[[Q:[^:]+]]: tensor<2x4x8xf32>, %[[K:[^:]+]]: tensor<2x4x8xf32>, %[[V:[^:]+]]: tensor<2x4x8xf32>)
// CHECK-NEXT: %[[KT:.+]] = nn.transpose %[[K]], [0, 2, 1]
// CHECK-NEXT: %[[O:[^,]+]], %{{[^ ]+}} = nn.attention %[[Q]], %[[K]], %[[V]] {scale = 1.000000e+00 : f32}
// CHECK-NEXT: return %[[O]], %[[KT]]
func.func @cancelling_transpose(%q: tensor<2x4x8xf32>, %k: tensor<2x4x8xf32>, %v: tensor<2x4x8xf32>) -> (tensor<2x4x8xf32>, tensor<2x8x4xf32>) {
  %kt = nn.transpose %k, [0, 2, 1] : tensor<2x4x8xf32> -> tensor<2x8x4xf32>
  %s = nn.batch_matmul %q, %kt : (tensor<2x4x8xf32>, tensor<2x8x4xf32>) -> tensor<2x4x4xf32>
  %p = nn.softmax %s {axis = 2 : i64} : tensor<2x4x4xf32>
  %y = nn.batch_matmul %p, %v : (tensor<2x4x4xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  return %y, %kt : tensor<2x4x8xf32>, tensor<2x8x4xf32>
}

// -----

// Left alone: the softmax is not along the keys' axis.
// CHECK-LABEL: func.func @softmax_axis(
// CHECK-NOT: nn.attention
// CHECK: %1 = nn.softmax %0 {axis = 1 : i64}
// CHECK: return
func.func @softmax_axis(%q: tensor<2x4x8xf32>, %k: tensor<2x4x8xf32>, %v: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
  %s = nn.batch_matmul %q, %k {transB = true} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x4xf32>
  %p = nn.softmax %s {axis = 1 : i64} : tensor<2x4x4xf32>
  %y = nn.batch_matmul %p, %v : (tensor<2x4x4xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  return %y : tensor<2x4x8xf32>
}

// -----

// Left alone: the scale is not a splat constant (one per key).
// CHECK-LABEL: func.func @scale_not_splat(
// CHECK-NOT: nn.attention
// CHECK: nn.div %0, %1 : tensor<2x4x4xf32>, tensor<4xf32>
// CHECK: return
func.func @scale_not_splat(%q: tensor<2x4x8xf32>, %k: tensor<2x4x8xf32>, %v: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
  %s = nn.batch_matmul %q, %k {transB = true} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x4xf32>
  %c = nn.constant dense<[1.0, 2.0, 3.0, 4.0]> : tensor<4xf32>
  %d = nn.div %s, %c : tensor<2x4x4xf32>, tensor<4xf32> -> tensor<2x4x4xf32>
  %p = nn.softmax %d {axis = 2 : i64} : tensor<2x4x4xf32>
  %y = nn.batch_matmul %p, %v : (tensor<2x4x4xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  return %y : tensor<2x4x8xf32>
}

// -----

// Left alone: the scale is a value of the graph, not a constant.
// CHECK-LABEL: func.func @scale_not_constant(
// CHECK-NOT: nn.attention
// CHECK: nn.mul %0, %arg3
// CHECK: return
func.func @scale_not_constant(%q: tensor<2x4x8xf32>, %k: tensor<2x4x8xf32>, %v: tensor<2x4x8xf32>, %c: tensor<f32>) -> tensor<2x4x8xf32> {
  %s = nn.batch_matmul %q, %k {transB = true} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x4xf32>
  %d = nn.mul %s, %c : tensor<2x4x4xf32>, tensor<f32> -> tensor<2x4x4xf32>
  %p = nn.softmax %d {axis = 2 : i64} : tensor<2x4x4xf32>
  %y = nn.batch_matmul %p, %v : (tensor<2x4x4xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  return %y : tensor<2x4x8xf32>
}

// -----

// Left alone: the scores are read outside the pattern (returned).
// CHECK-LABEL: func.func @scores_used_elsewhere(
// CHECK-NOT: nn.attention
// CHECK: nn.softmax %2
// CHECK: return %4, %2
func.func @scores_used_elsewhere(%q: tensor<2x4x8xf32>, %k: tensor<2x4x8xf32>, %v: tensor<2x4x8xf32>) -> (tensor<2x4x8xf32>, tensor<2x4x4xf32>) {
  %s = nn.batch_matmul %q, %k {transB = true} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x4xf32>
  %c = nn.constant dense<2.82842708> : tensor<f32>
  %d = nn.div %s, %c : tensor<2x4x4xf32>, tensor<f32> -> tensor<2x4x4xf32>
  %p = nn.softmax %d {axis = 2 : i64} : tensor<2x4x4xf32>
  %y = nn.batch_matmul %p, %v : (tensor<2x4x4xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  return %y, %d : tensor<2x4x8xf32>, tensor<2x4x4xf32>
}

// -----

// Left alone: the probabilities are read outside the pattern.
// CHECK-LABEL: func.func @probs_used_elsewhere(
// CHECK-NOT: nn.attention
// CHECK: nn.softmax %0
// CHECK: return %2, %1
func.func @probs_used_elsewhere(%q: tensor<2x4x8xf32>, %k: tensor<2x4x8xf32>, %v: tensor<2x4x8xf32>) -> (tensor<2x4x8xf32>, tensor<2x4x4xf32>) {
  %s = nn.batch_matmul %q, %k {transB = true} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x4xf32>
  %p = nn.softmax %s {axis = 2 : i64} : tensor<2x4x4xf32>
  %y = nn.batch_matmul %p, %v : (tensor<2x4x4xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  return %y, %p : tensor<2x4x8xf32>, tensor<2x4x4xf32>
}

// -----

// Left alone: the mask comes from the data (a padding mask: it carries the
// batch).
// CHECK-LABEL: func.func @mask_from_data(
// CHECK-NOT: nn.attention
// CHECK: nn.where %arg3, %1, %0
// CHECK: return
func.func @mask_from_data(%q: tensor<2x4x8xf32>, %k: tensor<2x4x8xf32>, %v: tensor<2x4x8xf32>, %m: tensor<2x1x4xf32>) -> tensor<2x4x8xf32> {
  %s = nn.batch_matmul %q, %k {transB = true} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x4xf32>
  %ninf = nn.constant dense<0xFF800000> : tensor<f32>
  %w = nn.where %m, %ninf, %s : tensor<2x1x4xf32>, tensor<f32>, tensor<2x4x4xf32> -> tensor<2x4x4xf32>
  %p = nn.softmax %w {axis = 2 : i64} : tensor<2x4x4xf32>
  %y = nn.batch_matmul %p, %v : (tensor<2x4x4xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  return %y : tensor<2x4x8xf32>
}

// -----

// Left alone: a constant mask with a batch axis of its own ([2, T, T]).
// CHECK-LABEL: func.func @mask_batch_axis(
// CHECK-NOT: nn.attention
// CHECK: nn.where %1, %2, %0 : tensor<2x4x4xf32>
// CHECK: return
func.func @mask_batch_axis(%q: tensor<2x4x8xf32>, %k: tensor<2x4x8xf32>, %v: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
  %s = nn.batch_matmul %q, %k {transB = true} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x4xf32>
  %m = nn.constant dense<0.0> : tensor<2x4x4xf32>
  %ninf = nn.constant dense<0xFF800000> : tensor<f32>
  %w = nn.where %m, %ninf, %s : tensor<2x4x4xf32>, tensor<f32>, tensor<2x4x4xf32> -> tensor<2x4x4xf32>
  %p = nn.softmax %w {axis = 2 : i64} : tensor<2x4x4xf32>
  %y = nn.batch_matmul %p, %v : (tensor<2x4x4xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  return %y : tensor<2x4x8xf32>
}

// -----

// Left alone: the masked positions get a finite value, not -inf.
// CHECK-LABEL: func.func @fill_not_ninf(
// CHECK-NOT: nn.attention
// CHECK: nn.where %1, %2, %0 : tensor<4x4xf32>
// CHECK: return
func.func @fill_not_ninf(%q: tensor<2x4x8xf32>, %k: tensor<2x4x8xf32>, %v: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
  %s = nn.batch_matmul %q, %k {transB = true} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x4xf32>
  %m = nn.constant dense<0.0> : tensor<4x4xf32>
  %fill = nn.constant dense<-1.0e+04> : tensor<f32>
  %w = nn.where %m, %fill, %s : tensor<4x4xf32>, tensor<f32>, tensor<2x4x4xf32> -> tensor<2x4x4xf32>
  %p = nn.softmax %w {axis = 2 : i64} : tensor<2x4x4xf32>
  %y = nn.batch_matmul %p, %v : (tensor<2x4x4xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  return %y : tensor<2x4x8xf32>
}

// -----

// Left alone: a dropout on the probabilities (torch's attention dropout)
// between the softmax and the second product.
// CHECK-LABEL: func.func @dropout(
// CHECK-NOT: nn.attention
// CHECK: nn.dropout %1
// CHECK: return
func.func @dropout(%q: tensor<2x4x8xf32>, %k: tensor<2x4x8xf32>, %v: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
  %s = nn.batch_matmul %q, %k {transB = true} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x4xf32>
  %p = nn.softmax %s {axis = 2 : i64} : tensor<2x4x4xf32>
  %r = nn.dropout %p {key = 7 : i64, ratio = 1.000000e-01 : f32} : tensor<2x4x4xf32>
  %y = nn.batch_matmul %r, %v : (tensor<2x4x4xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  return %y : tensor<2x4x8xf32>
}

// -----

// Left alone: k broadcasts along the batch (one set of keys for every
// sample), which nn.attention does not do.
// CHECK-LABEL: func.func @broadcast_keys(
// CHECK-NOT: nn.attention
// CHECK: nn.softmax %0 {axis = 2 : i64}
// CHECK: return
func.func @broadcast_keys(%q: tensor<2x4x8xf32>, %k: tensor<1x4x8xf32>, %v: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
  %s = nn.batch_matmul %q, %k {transB = true} : (tensor<2x4x8xf32>, tensor<1x4x8xf32>) -> tensor<2x4x4xf32>
  %p = nn.softmax %s {axis = 2 : i64} : tensor<2x4x4xf32>
  %y = nn.batch_matmul %p, %v : (tensor<2x4x4xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  return %y : tensor<2x4x8xf32>
}

// -----

// torch's nn.MultiheadAttention (TorchEncoderLm) as the importer writes it:
// q divided by sqrt(dh) before the product, k^T from a transpose of the
// [T, B*H, dh] keys, then baddbmm's `scores * 1 + mask * 1` with an
// additive float mask of 0s and -infs. The scales multiply (1/sqrt(dh)); the
// additive mask becomes a 0/1 [T, T] constant (1 where it was -inf).
// CHECK-LABEL: func.func @additive_mask(
// CHECK-SAME: %[[Q:[^:]+]]: tensor<2x3x8xf32>, %[[X:[^:]+]]: tensor<3x2x8xf32>, %[[V:[^:]+]]: tensor<2x3x8xf32>)
// CHECK-NEXT: %[[M:.+]] = nn.constant dense<{{\[}}[0.000000e+00, 1.000000e+00, 1.000000e+00], [0.000000e+00, 0.000000e+00, 1.000000e+00], [0.000000e+00, 0.000000e+00, 0.000000e+00]]> : tensor<3x3xf32>
// CHECK-NEXT: %[[K:.+]] = nn.transpose %[[X]], [1, 0, 2] : tensor<3x2x8xf32> -> tensor<2x3x8xf32>
// CHECK-NEXT: %[[O:[^,]+]], %{{[^ ]+}} = nn.attention %[[Q]], %[[K]], %[[V]] mask %[[M]] {scale = 0.353553385 : f32}
// CHECK-NEXT: return %[[O]]
func.func @additive_mask(%q: tensor<2x3x8xf32>, %x: tensor<3x2x8xf32>, %v: tensor<2x3x8xf32>) -> tensor<2x3x8xf32> {
  %c = nn.constant dense<2.82842708> : tensor<f32>
  %qs = nn.div %q, %c : tensor<2x3x8xf32>, tensor<f32> -> tensor<2x3x8xf32>
  %kt = nn.transpose %x, [1, 2, 0] : tensor<3x2x8xf32> -> tensor<2x8x3xf32>
  %s = nn.batch_matmul %qs, %kt : (tensor<2x3x8xf32>, tensor<2x8x3xf32>) -> tensor<2x3x3xf32>
  %one = nn.constant dense<1.0> : tensor<f32>
  %s1 = nn.mul %s, %one : tensor<2x3x3xf32>, tensor<f32> -> tensor<2x3x3xf32>
  %m = nn.constant dense<[[[0.0, 0xFF800000, 0xFF800000], [0.0, 0.0, 0xFF800000], [0.0, 0.0, 0.0]]]> : tensor<1x3x3xf32>
  %one2 = nn.constant dense<1.0> : tensor<f32>
  %m1 = nn.mul %m, %one2 : tensor<1x3x3xf32>, tensor<f32> -> tensor<1x3x3xf32>
  %a = nn.add %s1, %m1 : tensor<2x3x3xf32>, tensor<1x3x3xf32> -> tensor<2x3x3xf32>
  %p = nn.softmax %a {axis = 2 : i64} : tensor<2x3x3xf32>
  %y = nn.batch_matmul %p, %v : (tensor<2x3x3xf32>, tensor<2x3x8xf32>) -> tensor<2x3x8xf32>
  return %y : tensor<2x3x8xf32>
}

// -----

// Left alone: an additive mask with finite entries (a bias such as ALiBi,
// not a mask).
// CHECK-LABEL: func.func @additive_bias(
// CHECK-NOT: nn.attention
// CHECK: nn.add %0, %1
// CHECK: return
func.func @additive_bias(%q: tensor<2x3x8xf32>, %k: tensor<2x3x8xf32>, %v: tensor<2x3x8xf32>) -> tensor<2x3x8xf32> {
  %s = nn.batch_matmul %q, %k {transB = true} : (tensor<2x3x8xf32>, tensor<2x3x8xf32>) -> tensor<2x3x3xf32>
  %m = nn.constant dense<[[0.0, -1.0, -2.0], [0.0, 0.0, -1.0], [0.0, 0.0, 0.0]]> : tensor<3x3xf32>
  %a = nn.add %s, %m : tensor<2x3x3xf32>, tensor<3x3xf32> -> tensor<2x3x3xf32>
  %p = nn.softmax %a {axis = 2 : i64} : tensor<2x3x3xf32>
  %y = nn.batch_matmul %p, %v : (tensor<2x3x3xf32>, tensor<2x3x8xf32>) -> tensor<2x3x8xf32>
  return %y : tensor<2x3x8xf32>
}

// -----

// Left alone: an additive mask from the data (a padding mask, BertTiny's
// `src_key_padding_mask`: it carries the batch).
// CHECK-LABEL: func.func @additive_from_data(
// CHECK-NOT: nn.attention
// CHECK: nn.add %0, %arg3
// CHECK: return
func.func @additive_from_data(%q: tensor<2x3x8xf32>, %k: tensor<2x3x8xf32>, %v: tensor<2x3x8xf32>, %m: tensor<2x1x3xf32>) -> tensor<2x3x8xf32> {
  %s = nn.batch_matmul %q, %k {transB = true} : (tensor<2x3x8xf32>, tensor<2x3x8xf32>) -> tensor<2x3x3xf32>
  %a = nn.add %s, %m : tensor<2x3x3xf32>, tensor<2x1x3xf32> -> tensor<2x3x3xf32>
  %p = nn.softmax %a {axis = 2 : i64} : tensor<2x3x3xf32>
  %y = nn.batch_matmul %p, %v : (tensor<2x3x3xf32>, tensor<2x3x8xf32>) -> tensor<2x3x8xf32>
  return %y : tensor<2x3x8xf32>
}
