// gpipe-fuse-layer-norm: the layer normalization torch exports below opset 17,
// as the importer writes it (each ReduceMean an nn.reduce_to over the trailing
// axes, kept as 1s, divided by the count), becomes one nn.layer_norm with the
// same axis, epsilon, scale and bias. Only the exact pattern is rewritten: a
// value computed inside it and read outside it, another exponent, other axes, a
// non-constant epsilon, ... leave every op as it was.
// RUN: gpipe-opt %s --split-input-file --gpipe-fuse-layer-norm | FileCheck %s

// nn.LayerNorm(8) on [2, 4, 8] (torch, opset 13..16): one nn.layer_norm over
// axis 2; the pattern's constants go too.
// CHECK-LABEL: func.func @affine(
// CHECK-SAME: %[[X:[^:]+]]: tensor<2x4x8xf32>, %[[W:[^:]+]]: tensor<8xf32>, %[[B:[^:]+]]: tensor<8xf32>)
// CHECK-NEXT: %[[LN:[^,]+]], %{{[^,]+}}, %{{[^ ]+}} = nn.layer_norm %[[X]], %[[W]], %[[B]] {axis = 2 : i64, epsilon = 9.99999974E-6 : f32} : tensor<2x4x8xf32>, tensor<8xf32> -> tensor<2x4xf32>
// CHECK-NEXT: return %[[LN]] : tensor<2x4x8xf32>
// CHECK-NEXT: }
func.func @affine(%x: tensor<2x4x8xf32>, %w: tensor<8xf32>, %b: tensor<8xf32>) -> tensor<2x4x8xf32> {
  %s0 = nn.reduce_to %x : tensor<2x4x8xf32> -> tensor<2x4x1xf32>
  %n0 = nn.constant dense<8.000000e+00> : tensor<f32>
  %mean = nn.div %s0, %n0 : tensor<2x4x1xf32>, tensor<f32> -> tensor<2x4x1xf32>
  %d = nn.sub %x, %mean : tensor<2x4x8xf32>, tensor<2x4x1xf32> -> tensor<2x4x8xf32>
  %two = nn.constant dense<2.000000e+00> : tensor<f32>
  %sq = nn.pow %d, %two : tensor<2x4x8xf32>, tensor<f32> -> tensor<2x4x8xf32>
  %s1 = nn.reduce_to %sq : tensor<2x4x8xf32> -> tensor<2x4x1xf32>
  %n1 = nn.constant dense<8.000000e+00> : tensor<f32>
  %var = nn.div %s1, %n1 : tensor<2x4x1xf32>, tensor<f32> -> tensor<2x4x1xf32>
  %eps = nn.constant dense<1.000000e-05> : tensor<f32>
  %ve = nn.add %var, %eps : tensor<2x4x1xf32>, tensor<f32> -> tensor<2x4x1xf32>
  %sd = nn.sqrt %ve : tensor<2x4x1xf32>
  %y = nn.div %d, %sd : tensor<2x4x8xf32>, tensor<2x4x1xf32> -> tensor<2x4x8xf32>
  %z = nn.mul %y, %w : tensor<2x4x8xf32>, tensor<8xf32> -> tensor<2x4x8xf32>
  %o = nn.add %z, %b : tensor<2x4x8xf32>, tensor<8xf32> -> tensor<2x4x8xf32>
  return %o : tensor<2x4x8xf32>
}

// -----

// nn.LayerNorm((4, 8), eps=1e-3): both means over the last two axes (count
// 32), scale and bias [4, 8]: axis 1. The result may have several readers.
// CHECK-LABEL: func.func @two_axes(
// CHECK-SAME: %[[X:[^:]+]]: tensor<2x4x8xf32>, %[[W:[^:]+]]: tensor<4x8xf32>, %[[B:[^:]+]]: tensor<4x8xf32>)
// CHECK-NEXT: %[[LN:[^,]+]], %{{[^,]+}}, %{{[^ ]+}} = nn.layer_norm %[[X]], %[[W]], %[[B]] {axis = 1 : i64, epsilon = 1.000000e-03 : f32} : tensor<2x4x8xf32>, tensor<4x8xf32> -> tensor<2xf32>
// CHECK-NEXT: nn.mul %[[LN]], %[[LN]]
// CHECK-NEXT: return
func.func @two_axes(%x: tensor<2x4x8xf32>, %w: tensor<4x8xf32>, %b: tensor<4x8xf32>) -> tensor<2x4x8xf32> {
  %s0 = nn.reduce_to %x : tensor<2x4x8xf32> -> tensor<2x1x1xf32>
  %n0 = nn.constant dense<3.200000e+01> : tensor<f32>
  %mean = nn.div %s0, %n0 : tensor<2x1x1xf32>, tensor<f32> -> tensor<2x1x1xf32>
  %d = nn.sub %x, %mean : tensor<2x4x8xf32>, tensor<2x1x1xf32> -> tensor<2x4x8xf32>
  %two = nn.constant dense<2.000000e+00> : tensor<f32>
  %sq = nn.pow %d, %two : tensor<2x4x8xf32>, tensor<f32> -> tensor<2x4x8xf32>
  %s1 = nn.reduce_to %sq : tensor<2x4x8xf32> -> tensor<2x1x1xf32>
  %n1 = nn.constant dense<3.200000e+01> : tensor<f32>
  %var = nn.div %s1, %n1 : tensor<2x1x1xf32>, tensor<f32> -> tensor<2x1x1xf32>
  %eps = nn.constant dense<1.000000e-03> : tensor<f32>
  %ve = nn.add %var, %eps : tensor<2x1x1xf32>, tensor<f32> -> tensor<2x1x1xf32>
  %sd = nn.sqrt %ve : tensor<2x1x1xf32>
  %y = nn.div %d, %sd : tensor<2x4x8xf32>, tensor<2x1x1xf32> -> tensor<2x4x8xf32>
  %z = nn.mul %y, %w : tensor<2x4x8xf32>, tensor<4x8xf32> -> tensor<2x4x8xf32>
  %o = nn.add %z, %b : tensor<2x4x8xf32>, tensor<4x8xf32> -> tensor<2x4x8xf32>
  %r = nn.mul %o, %o : tensor<2x4x8xf32>, tensor<2x4x8xf32> -> tensor<2x4x8xf32>
  return %r : tensor<2x4x8xf32>
}

// -----

// elementwise_affine=False: the pattern ends at the division; nn.layer_norm
// gets a constant scale of ones and no bias.
// CHECK-LABEL: func.func @no_affine(
// CHECK-SAME: %[[X:[^:]+]]: tensor<2x4x8xf32>)
// CHECK-NEXT: %[[ONES:.+]] = nn.constant dense<1.000000e+00> : tensor<8xf32>
// CHECK-NEXT: %[[LN:[^,]+]], %{{[^,]+}}, %{{[^ ]+}} = nn.layer_norm %[[X]], %[[ONES]] {axis = 2 : i64, epsilon = 9.99999974E-6 : f32} : tensor<2x4x8xf32>, tensor<8xf32> -> tensor<2x4xf32>
// CHECK-NEXT: return %[[LN]]
// CHECK-NEXT: }
func.func @no_affine(%x: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
  %s0 = nn.reduce_to %x : tensor<2x4x8xf32> -> tensor<2x4x1xf32>
  %n0 = nn.constant dense<8.000000e+00> : tensor<f32>
  %mean = nn.div %s0, %n0 : tensor<2x4x1xf32>, tensor<f32> -> tensor<2x4x1xf32>
  %d = nn.sub %x, %mean : tensor<2x4x8xf32>, tensor<2x4x1xf32> -> tensor<2x4x8xf32>
  %two = nn.constant dense<2.000000e+00> : tensor<f32>
  %sq = nn.pow %d, %two : tensor<2x4x8xf32>, tensor<f32> -> tensor<2x4x8xf32>
  %s1 = nn.reduce_to %sq : tensor<2x4x8xf32> -> tensor<2x4x1xf32>
  %n1 = nn.constant dense<8.000000e+00> : tensor<f32>
  %var = nn.div %s1, %n1 : tensor<2x4x1xf32>, tensor<f32> -> tensor<2x4x1xf32>
  %eps = nn.constant dense<1.000000e-05> : tensor<f32>
  %ve = nn.add %var, %eps : tensor<2x4x1xf32>, tensor<f32> -> tensor<2x4x1xf32>
  %sd = nn.sqrt %ve : tensor<2x4x1xf32>
  %y = nn.div %d, %sd : tensor<2x4x8xf32>, tensor<2x4x1xf32> -> tensor<2x4x8xf32>
  return %y : tensor<2x4x8xf32>
}

// -----

// F.layer_norm(x, (8,), weight) followed by a residual add: the weight is
// the scale; an added tensor of another shape than [8] is no bias.
// CHECK-LABEL: func.func @weight_then_residual(
// CHECK-SAME: %[[X:[^:]+]]: tensor<2x4x8xf32>, %[[W:[^:]+]]: tensor<8xf32>)
// CHECK-NEXT: %[[LN:[^,]+]], %{{[^,]+}}, %{{[^ ]+}} = nn.layer_norm %[[X]], %[[W]] {axis = 2 : i64, epsilon = 9.99999974E-6 : f32} : tensor<2x4x8xf32>, tensor<8xf32> -> tensor<2x4xf32>
// CHECK-NEXT: nn.add %[[LN]], %[[X]]
// CHECK-NEXT: return
func.func @weight_then_residual(%x: tensor<2x4x8xf32>, %w: tensor<8xf32>) -> tensor<2x4x8xf32> {
  %s0 = nn.reduce_to %x : tensor<2x4x8xf32> -> tensor<2x4x1xf32>
  %n0 = nn.constant dense<8.000000e+00> : tensor<f32>
  %mean = nn.div %s0, %n0 : tensor<2x4x1xf32>, tensor<f32> -> tensor<2x4x1xf32>
  %d = nn.sub %x, %mean : tensor<2x4x8xf32>, tensor<2x4x1xf32> -> tensor<2x4x8xf32>
  %two = nn.constant dense<2.000000e+00> : tensor<f32>
  %sq = nn.pow %d, %two : tensor<2x4x8xf32>, tensor<f32> -> tensor<2x4x8xf32>
  %s1 = nn.reduce_to %sq : tensor<2x4x8xf32> -> tensor<2x4x1xf32>
  %n1 = nn.constant dense<8.000000e+00> : tensor<f32>
  %var = nn.div %s1, %n1 : tensor<2x4x1xf32>, tensor<f32> -> tensor<2x4x1xf32>
  %eps = nn.constant dense<1.000000e-05> : tensor<f32>
  %ve = nn.add %var, %eps : tensor<2x4x1xf32>, tensor<f32> -> tensor<2x4x1xf32>
  %sd = nn.sqrt %ve : tensor<2x4x1xf32>
  %y = nn.div %d, %sd : tensor<2x4x8xf32>, tensor<2x4x1xf32> -> tensor<2x4x8xf32>
  %z = nn.mul %y, %w : tensor<2x4x8xf32>, tensor<8xf32> -> tensor<2x4x8xf32>
  %o = nn.add %z, %x : tensor<2x4x8xf32>, tensor<2x4x8xf32> -> tensor<2x4x8xf32>
  return %o : tensor<2x4x8xf32>
}

// -----

// Operands of the commutative epsilon add, scale multiply and bias add in
// the other order.
// CHECK-LABEL: func.func @commuted(
// CHECK-SAME: %[[X:[^:]+]]: tensor<2x4x8xf32>, %[[W:[^:]+]]: tensor<8xf32>, %[[B:[^:]+]]: tensor<8xf32>)
// CHECK-NEXT: %[[LN:[^,]+]], %{{[^,]+}}, %{{[^ ]+}} = nn.layer_norm %[[X]], %[[W]], %[[B]] {axis = 2 : i64, epsilon = 9.99999974E-6 : f32}
// CHECK-NEXT: return %[[LN]]
func.func @commuted(%x: tensor<2x4x8xf32>, %w: tensor<8xf32>, %b: tensor<8xf32>) -> tensor<2x4x8xf32> {
  %s0 = nn.reduce_to %x : tensor<2x4x8xf32> -> tensor<2x4x1xf32>
  %n0 = nn.constant dense<8.000000e+00> : tensor<f32>
  %mean = nn.div %s0, %n0 : tensor<2x4x1xf32>, tensor<f32> -> tensor<2x4x1xf32>
  %d = nn.sub %x, %mean : tensor<2x4x8xf32>, tensor<2x4x1xf32> -> tensor<2x4x8xf32>
  %two = nn.constant dense<2.000000e+00> : tensor<f32>
  %sq = nn.pow %d, %two : tensor<2x4x8xf32>, tensor<f32> -> tensor<2x4x8xf32>
  %s1 = nn.reduce_to %sq : tensor<2x4x8xf32> -> tensor<2x4x1xf32>
  %n1 = nn.constant dense<8.000000e+00> : tensor<f32>
  %var = nn.div %s1, %n1 : tensor<2x4x1xf32>, tensor<f32> -> tensor<2x4x1xf32>
  %eps = nn.constant dense<1.000000e-05> : tensor<f32>
  %ve = nn.add %eps, %var : tensor<f32>, tensor<2x4x1xf32> -> tensor<2x4x1xf32>
  %sd = nn.sqrt %ve : tensor<2x4x1xf32>
  %y = nn.div %d, %sd : tensor<2x4x8xf32>, tensor<2x4x1xf32> -> tensor<2x4x8xf32>
  %z = nn.mul %w, %y : tensor<8xf32>, tensor<2x4x8xf32> -> tensor<2x4x8xf32>
  %o = nn.add %b, %z : tensor<8xf32>, tensor<2x4x8xf32> -> tensor<2x4x8xf32>
  return %o : tensor<2x4x8xf32>
}

// -----

// nn.LayerNorm((1, 8)) on [2, 1, 8]: the reduction keeps the 1, the scale
// and bias [1, 8] say the normalization starts at axis 1.
// CHECK-LABEL: func.func @unit_axis(
// CHECK-NEXT: nn.layer_norm %{{.+}}, %{{.+}}, %{{.+}} {axis = 1 : i64, epsilon = 9.99999974E-6 : f32} : tensor<2x1x8xf32>, tensor<1x8xf32> -> tensor<2xf32>
// CHECK-NEXT: return
func.func @unit_axis(%x: tensor<2x1x8xf32>, %w: tensor<1x8xf32>, %b: tensor<1x8xf32>) -> tensor<2x1x8xf32> {
  %s0 = nn.reduce_to %x : tensor<2x1x8xf32> -> tensor<2x1x1xf32>
  %n0 = nn.constant dense<8.000000e+00> : tensor<f32>
  %mean = nn.div %s0, %n0 : tensor<2x1x1xf32>, tensor<f32> -> tensor<2x1x1xf32>
  %d = nn.sub %x, %mean : tensor<2x1x8xf32>, tensor<2x1x1xf32> -> tensor<2x1x8xf32>
  %two = nn.constant dense<2.000000e+00> : tensor<f32>
  %sq = nn.pow %d, %two : tensor<2x1x8xf32>, tensor<f32> -> tensor<2x1x8xf32>
  %s1 = nn.reduce_to %sq : tensor<2x1x8xf32> -> tensor<2x1x1xf32>
  %n1 = nn.constant dense<8.000000e+00> : tensor<f32>
  %var = nn.div %s1, %n1 : tensor<2x1x1xf32>, tensor<f32> -> tensor<2x1x1xf32>
  %eps = nn.constant dense<1.000000e-05> : tensor<f32>
  %ve = nn.add %var, %eps : tensor<2x1x1xf32>, tensor<f32> -> tensor<2x1x1xf32>
  %sd = nn.sqrt %ve : tensor<2x1x1xf32>
  %y = nn.div %d, %sd : tensor<2x1x8xf32>, tensor<2x1x1xf32> -> tensor<2x1x8xf32>
  %z = nn.mul %y, %w : tensor<2x1x8xf32>, tensor<1x8xf32> -> tensor<2x1x8xf32>
  %o = nn.add %z, %b : tensor<2x1x8xf32>, tensor<1x8xf32> -> tensor<2x1x8xf32>
  return %o : tensor<2x1x8xf32>
}

// -----

// A partitioned graph: the ops' common attributes go to the fused op.
// CHECK-LABEL: func.func @same_stage(
// CHECK: nn.layer_norm {{.+}} {axis = 2 : i64, epsilon = 9.99999974E-6 : f32, pipe.stage = 1 : i64}
// CHECK-NEXT: return
func.func @same_stage(%x: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
  %s0 = nn.reduce_to %x {pipe.stage = 1 : i64} : tensor<2x4x8xf32> -> tensor<2x4x1xf32>
  %n0 = nn.constant dense<8.000000e+00> : tensor<f32>
  %mean = nn.div %s0, %n0 {pipe.stage = 1 : i64} : tensor<2x4x1xf32>, tensor<f32> -> tensor<2x4x1xf32>
  %d = nn.sub %x, %mean {pipe.stage = 1 : i64} : tensor<2x4x8xf32>, tensor<2x4x1xf32> -> tensor<2x4x8xf32>
  %two = nn.constant dense<2.000000e+00> : tensor<f32>
  %sq = nn.pow %d, %two {pipe.stage = 1 : i64} : tensor<2x4x8xf32>, tensor<f32> -> tensor<2x4x8xf32>
  %s1 = nn.reduce_to %sq {pipe.stage = 1 : i64} : tensor<2x4x8xf32> -> tensor<2x4x1xf32>
  %n1 = nn.constant dense<8.000000e+00> : tensor<f32>
  %var = nn.div %s1, %n1 {pipe.stage = 1 : i64} : tensor<2x4x1xf32>, tensor<f32> -> tensor<2x4x1xf32>
  %eps = nn.constant dense<1.000000e-05> : tensor<f32>
  %ve = nn.add %var, %eps {pipe.stage = 1 : i64} : tensor<2x4x1xf32>, tensor<f32> -> tensor<2x4x1xf32>
  %sd = nn.sqrt %ve {pipe.stage = 1 : i64} : tensor<2x4x1xf32>
  %y = nn.div %d, %sd {pipe.stage = 1 : i64} : tensor<2x4x8xf32>, tensor<2x4x1xf32> -> tensor<2x4x8xf32>
  return %y : tensor<2x4x8xf32>
}

// -----

// The normalized value has a reader besides the scale's multiply: the
// pattern ends at the division (scale of ones), the multiply stays.
// CHECK-LABEL: func.func @normalized_read_twice(
// CHECK-SAME: %[[X:[^:]+]]: tensor<2x4x8xf32>, %[[W:[^:]+]]: tensor<8xf32>)
// CHECK-NEXT: %[[ONES:.+]] = nn.constant dense<1.000000e+00> : tensor<8xf32>
// CHECK-NEXT: %[[LN:[^,]+]], %{{[^,]+}}, %{{[^ ]+}} = nn.layer_norm %[[X]], %[[ONES]] {axis = 2
// CHECK-NEXT: %[[Z:.+]] = nn.mul %[[LN]], %[[W]]
// CHECK-NEXT: nn.add %[[Z]], %[[LN]]
// CHECK-NEXT: return
func.func @normalized_read_twice(%x: tensor<2x4x8xf32>, %w: tensor<8xf32>) -> tensor<2x4x8xf32> {
  %s0 = nn.reduce_to %x : tensor<2x4x8xf32> -> tensor<2x4x1xf32>
  %n0 = nn.constant dense<8.000000e+00> : tensor<f32>
  %mean = nn.div %s0, %n0 : tensor<2x4x1xf32>, tensor<f32> -> tensor<2x4x1xf32>
  %d = nn.sub %x, %mean : tensor<2x4x8xf32>, tensor<2x4x1xf32> -> tensor<2x4x8xf32>
  %two = nn.constant dense<2.000000e+00> : tensor<f32>
  %sq = nn.pow %d, %two : tensor<2x4x8xf32>, tensor<f32> -> tensor<2x4x8xf32>
  %s1 = nn.reduce_to %sq : tensor<2x4x8xf32> -> tensor<2x4x1xf32>
  %n1 = nn.constant dense<8.000000e+00> : tensor<f32>
  %var = nn.div %s1, %n1 : tensor<2x4x1xf32>, tensor<f32> -> tensor<2x4x1xf32>
  %eps = nn.constant dense<1.000000e-05> : tensor<f32>
  %ve = nn.add %var, %eps : tensor<2x4x1xf32>, tensor<f32> -> tensor<2x4x1xf32>
  %sd = nn.sqrt %ve : tensor<2x4x1xf32>
  %y = nn.div %d, %sd : tensor<2x4x8xf32>, tensor<2x4x1xf32> -> tensor<2x4x8xf32>
  %z = nn.mul %y, %w : tensor<2x4x8xf32>, tensor<8xf32> -> tensor<2x4x8xf32>
  %o = nn.add %z, %y : tensor<2x4x8xf32>, tensor<2x4x8xf32> -> tensor<2x4x8xf32>
  return %o : tensor<2x4x8xf32>
}

// -----

// Not rewritten: the mean has another reader (MlpNormOps' mu.expand_as).
// CHECK-LABEL: func.func @mean_read_twice(
// CHECK-NOT: nn.layer_norm
// CHECK: nn.sqrt
// CHECK-NOT: nn.layer_norm
// CHECK: return
func.func @mean_read_twice(%x: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
  %s0 = nn.reduce_to %x : tensor<2x4x8xf32> -> tensor<2x4x1xf32>
  %n0 = nn.constant dense<8.000000e+00> : tensor<f32>
  %mean = nn.div %s0, %n0 : tensor<2x4x1xf32>, tensor<f32> -> tensor<2x4x1xf32>
  %d = nn.sub %x, %mean : tensor<2x4x8xf32>, tensor<2x4x1xf32> -> tensor<2x4x8xf32>
  %two = nn.constant dense<2.000000e+00> : tensor<f32>
  %sq = nn.pow %d, %two : tensor<2x4x8xf32>, tensor<f32> -> tensor<2x4x8xf32>
  %s1 = nn.reduce_to %sq : tensor<2x4x8xf32> -> tensor<2x4x1xf32>
  %n1 = nn.constant dense<8.000000e+00> : tensor<f32>
  %var = nn.div %s1, %n1 : tensor<2x4x1xf32>, tensor<f32> -> tensor<2x4x1xf32>
  %eps = nn.constant dense<1.000000e-05> : tensor<f32>
  %ve = nn.add %var, %eps : tensor<2x4x1xf32>, tensor<f32> -> tensor<2x4x1xf32>
  %sd = nn.sqrt %ve : tensor<2x4x1xf32>
  %y = nn.div %d, %sd : tensor<2x4x8xf32>, tensor<2x4x1xf32> -> tensor<2x4x8xf32>
  %o = nn.add %y, %mean : tensor<2x4x8xf32>, tensor<2x4x1xf32> -> tensor<2x4x8xf32>
  return %o : tensor<2x4x8xf32>
}

// -----

// Not rewritten: x - mean has a third reader.
// CHECK-LABEL: func.func @centered_read_thrice(
// CHECK-NOT: nn.layer_norm
// CHECK: nn.sqrt
// CHECK-NOT: nn.layer_norm
// CHECK: return
func.func @centered_read_thrice(%x: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
  %s0 = nn.reduce_to %x : tensor<2x4x8xf32> -> tensor<2x4x1xf32>
  %n0 = nn.constant dense<8.000000e+00> : tensor<f32>
  %mean = nn.div %s0, %n0 : tensor<2x4x1xf32>, tensor<f32> -> tensor<2x4x1xf32>
  %d = nn.sub %x, %mean : tensor<2x4x8xf32>, tensor<2x4x1xf32> -> tensor<2x4x8xf32>
  %two = nn.constant dense<2.000000e+00> : tensor<f32>
  %sq = nn.pow %d, %two : tensor<2x4x8xf32>, tensor<f32> -> tensor<2x4x8xf32>
  %s1 = nn.reduce_to %sq : tensor<2x4x8xf32> -> tensor<2x4x1xf32>
  %n1 = nn.constant dense<8.000000e+00> : tensor<f32>
  %var = nn.div %s1, %n1 : tensor<2x4x1xf32>, tensor<f32> -> tensor<2x4x1xf32>
  %eps = nn.constant dense<1.000000e-05> : tensor<f32>
  %ve = nn.add %var, %eps : tensor<2x4x1xf32>, tensor<f32> -> tensor<2x4x1xf32>
  %sd = nn.sqrt %ve : tensor<2x4x1xf32>
  %y = nn.div %d, %sd : tensor<2x4x8xf32>, tensor<2x4x1xf32> -> tensor<2x4x8xf32>
  %o = nn.add %y, %d : tensor<2x4x8xf32>, tensor<2x4x8xf32> -> tensor<2x4x8xf32>
  return %o : tensor<2x4x8xf32>
}

// -----

// Not rewritten: the same, the third reader before the square.
// CHECK-LABEL: func.func @centered_read_first(
// CHECK-NOT: nn.layer_norm
// CHECK: nn.sqrt
// CHECK-NOT: nn.layer_norm
// CHECK: return
func.func @centered_read_first(%x: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
  %s0 = nn.reduce_to %x : tensor<2x4x8xf32> -> tensor<2x4x1xf32>
  %n0 = nn.constant dense<8.000000e+00> : tensor<f32>
  %mean = nn.div %s0, %n0 : tensor<2x4x1xf32>, tensor<f32> -> tensor<2x4x1xf32>
  %d = nn.sub %x, %mean : tensor<2x4x8xf32>, tensor<2x4x1xf32> -> tensor<2x4x8xf32>
  %e = nn.neg %d : tensor<2x4x8xf32>
  %two = nn.constant dense<2.000000e+00> : tensor<f32>
  %sq = nn.pow %d, %two : tensor<2x4x8xf32>, tensor<f32> -> tensor<2x4x8xf32>
  %s1 = nn.reduce_to %sq : tensor<2x4x8xf32> -> tensor<2x4x1xf32>
  %n1 = nn.constant dense<8.000000e+00> : tensor<f32>
  %var = nn.div %s1, %n1 : tensor<2x4x1xf32>, tensor<f32> -> tensor<2x4x1xf32>
  %eps = nn.constant dense<1.000000e-05> : tensor<f32>
  %ve = nn.add %var, %eps : tensor<2x4x1xf32>, tensor<f32> -> tensor<2x4x1xf32>
  %sd = nn.sqrt %ve : tensor<2x4x1xf32>
  %y = nn.div %d, %sd : tensor<2x4x8xf32>, tensor<2x4x1xf32> -> tensor<2x4x8xf32>
  %o = nn.add %y, %e : tensor<2x4x8xf32>, tensor<2x4x8xf32> -> tensor<2x4x8xf32>
  return %o : tensor<2x4x8xf32>
}

// -----

// Not rewritten: the standard deviation has another reader.
// CHECK-LABEL: func.func @stddev_read_twice(
// CHECK-NOT: nn.layer_norm
// CHECK: nn.sqrt
// CHECK-NOT: nn.layer_norm
// CHECK: return
func.func @stddev_read_twice(%x: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
  %s0 = nn.reduce_to %x : tensor<2x4x8xf32> -> tensor<2x4x1xf32>
  %n0 = nn.constant dense<8.000000e+00> : tensor<f32>
  %mean = nn.div %s0, %n0 : tensor<2x4x1xf32>, tensor<f32> -> tensor<2x4x1xf32>
  %d = nn.sub %x, %mean : tensor<2x4x8xf32>, tensor<2x4x1xf32> -> tensor<2x4x8xf32>
  %two = nn.constant dense<2.000000e+00> : tensor<f32>
  %sq = nn.pow %d, %two : tensor<2x4x8xf32>, tensor<f32> -> tensor<2x4x8xf32>
  %s1 = nn.reduce_to %sq : tensor<2x4x8xf32> -> tensor<2x4x1xf32>
  %n1 = nn.constant dense<8.000000e+00> : tensor<f32>
  %var = nn.div %s1, %n1 : tensor<2x4x1xf32>, tensor<f32> -> tensor<2x4x1xf32>
  %eps = nn.constant dense<1.000000e-05> : tensor<f32>
  %ve = nn.add %var, %eps : tensor<2x4x1xf32>, tensor<f32> -> tensor<2x4x1xf32>
  %sd = nn.sqrt %ve : tensor<2x4x1xf32>
  %y = nn.div %d, %sd : tensor<2x4x8xf32>, tensor<2x4x1xf32> -> tensor<2x4x8xf32>
  %o = nn.add %y, %sd : tensor<2x4x8xf32>, tensor<2x4x1xf32> -> tensor<2x4x8xf32>
  return %o : tensor<2x4x8xf32>
}

// -----

// Not rewritten: the exponent is 3, not 2.
// CHECK-LABEL: func.func @cube(
// CHECK-NOT: nn.layer_norm
// CHECK: nn.sqrt
// CHECK-NOT: nn.layer_norm
// CHECK: return
func.func @cube(%x: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
  %s0 = nn.reduce_to %x : tensor<2x4x8xf32> -> tensor<2x4x1xf32>
  %n0 = nn.constant dense<8.000000e+00> : tensor<f32>
  %mean = nn.div %s0, %n0 : tensor<2x4x1xf32>, tensor<f32> -> tensor<2x4x1xf32>
  %d = nn.sub %x, %mean : tensor<2x4x8xf32>, tensor<2x4x1xf32> -> tensor<2x4x8xf32>
  %two = nn.constant dense<3.000000e+00> : tensor<f32>
  %sq = nn.pow %d, %two : tensor<2x4x8xf32>, tensor<f32> -> tensor<2x4x8xf32>
  %s1 = nn.reduce_to %sq : tensor<2x4x8xf32> -> tensor<2x4x1xf32>
  %n1 = nn.constant dense<8.000000e+00> : tensor<f32>
  %var = nn.div %s1, %n1 : tensor<2x4x1xf32>, tensor<f32> -> tensor<2x4x1xf32>
  %eps = nn.constant dense<1.000000e-05> : tensor<f32>
  %ve = nn.add %var, %eps : tensor<2x4x1xf32>, tensor<f32> -> tensor<2x4x1xf32>
  %sd = nn.sqrt %ve : tensor<2x4x1xf32>
  %y = nn.div %d, %sd : tensor<2x4x8xf32>, tensor<2x4x1xf32> -> tensor<2x4x8xf32>
  return %y : tensor<2x4x8xf32>
}

// -----

// Not rewritten: the means reduce axis 1 of [2, 4, 8], not the trailing axes.
// CHECK-LABEL: func.func @not_trailing(
// CHECK-NOT: nn.layer_norm
// CHECK: nn.sqrt
// CHECK-NOT: nn.layer_norm
// CHECK: return
func.func @not_trailing(%x: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
  %s0 = nn.reduce_to %x : tensor<2x4x8xf32> -> tensor<2x1x8xf32>
  %n0 = nn.constant dense<4.000000e+00> : tensor<f32>
  %mean = nn.div %s0, %n0 : tensor<2x1x8xf32>, tensor<f32> -> tensor<2x1x8xf32>
  %d = nn.sub %x, %mean : tensor<2x4x8xf32>, tensor<2x1x8xf32> -> tensor<2x4x8xf32>
  %two = nn.constant dense<2.000000e+00> : tensor<f32>
  %sq = nn.pow %d, %two : tensor<2x4x8xf32>, tensor<f32> -> tensor<2x4x8xf32>
  %s1 = nn.reduce_to %sq : tensor<2x4x8xf32> -> tensor<2x1x8xf32>
  %n1 = nn.constant dense<4.000000e+00> : tensor<f32>
  %var = nn.div %s1, %n1 : tensor<2x1x8xf32>, tensor<f32> -> tensor<2x1x8xf32>
  %eps = nn.constant dense<1.000000e-05> : tensor<f32>
  %ve = nn.add %var, %eps : tensor<2x1x8xf32>, tensor<f32> -> tensor<2x1x8xf32>
  %sd = nn.sqrt %ve : tensor<2x1x8xf32>
  %y = nn.div %d, %sd : tensor<2x4x8xf32>, tensor<2x1x8xf32> -> tensor<2x4x8xf32>
  return %y : tensor<2x4x8xf32>
}

// -----

// Not rewritten: the mean is over the last axis, the variance over the last two.
// CHECK-LABEL: func.func @axes_differ(
// CHECK-NOT: nn.layer_norm
// CHECK: nn.sqrt
// CHECK-NOT: nn.layer_norm
// CHECK: return
func.func @axes_differ(%x: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
  %s0 = nn.reduce_to %x : tensor<2x4x8xf32> -> tensor<2x4x1xf32>
  %n0 = nn.constant dense<8.000000e+00> : tensor<f32>
  %mean = nn.div %s0, %n0 : tensor<2x4x1xf32>, tensor<f32> -> tensor<2x4x1xf32>
  %d = nn.sub %x, %mean : tensor<2x4x8xf32>, tensor<2x4x1xf32> -> tensor<2x4x8xf32>
  %two = nn.constant dense<2.000000e+00> : tensor<f32>
  %sq = nn.pow %d, %two : tensor<2x4x8xf32>, tensor<f32> -> tensor<2x4x8xf32>
  %s1 = nn.reduce_to %sq : tensor<2x4x8xf32> -> tensor<2x1x1xf32>
  %n1 = nn.constant dense<3.200000e+01> : tensor<f32>
  %var = nn.div %s1, %n1 : tensor<2x1x1xf32>, tensor<f32> -> tensor<2x1x1xf32>
  %eps = nn.constant dense<1.000000e-05> : tensor<f32>
  %ve = nn.add %var, %eps : tensor<2x1x1xf32>, tensor<f32> -> tensor<2x1x1xf32>
  %sd = nn.sqrt %ve : tensor<2x1x1xf32>
  %y = nn.div %d, %sd : tensor<2x4x8xf32>, tensor<2x1x1xf32> -> tensor<2x4x8xf32>
  return %y : tensor<2x4x8xf32>
}

// -----

// Not rewritten: the variance's sum is divided by 7, not by its count 8.
// CHECK-LABEL: func.func @wrong_count(
// CHECK-NOT: nn.layer_norm
// CHECK: nn.sqrt
// CHECK-NOT: nn.layer_norm
// CHECK: return
func.func @wrong_count(%x: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
  %s0 = nn.reduce_to %x : tensor<2x4x8xf32> -> tensor<2x4x1xf32>
  %n0 = nn.constant dense<8.000000e+00> : tensor<f32>
  %mean = nn.div %s0, %n0 : tensor<2x4x1xf32>, tensor<f32> -> tensor<2x4x1xf32>
  %d = nn.sub %x, %mean : tensor<2x4x8xf32>, tensor<2x4x1xf32> -> tensor<2x4x8xf32>
  %two = nn.constant dense<2.000000e+00> : tensor<f32>
  %sq = nn.pow %d, %two : tensor<2x4x8xf32>, tensor<f32> -> tensor<2x4x8xf32>
  %s1 = nn.reduce_to %sq : tensor<2x4x8xf32> -> tensor<2x4x1xf32>
  %n1 = nn.constant dense<7.000000e+00> : tensor<f32>
  %var = nn.div %s1, %n1 : tensor<2x4x1xf32>, tensor<f32> -> tensor<2x4x1xf32>
  %eps = nn.constant dense<1.000000e-05> : tensor<f32>
  %ve = nn.add %var, %eps : tensor<2x4x1xf32>, tensor<f32> -> tensor<2x4x1xf32>
  %sd = nn.sqrt %ve : tensor<2x4x1xf32>
  %y = nn.div %d, %sd : tensor<2x4x8xf32>, tensor<2x4x1xf32> -> tensor<2x4x8xf32>
  return %y : tensor<2x4x8xf32>
}

// -----

// Not rewritten: epsilon is not a constant.
// CHECK-LABEL: func.func @eps_argument(
// CHECK-NOT: nn.layer_norm
// CHECK: nn.sqrt
// CHECK-NOT: nn.layer_norm
// CHECK: return
func.func @eps_argument(%x: tensor<2x4x8xf32>, %e: tensor<f32>) -> tensor<2x4x8xf32> {
  %s0 = nn.reduce_to %x : tensor<2x4x8xf32> -> tensor<2x4x1xf32>
  %n0 = nn.constant dense<8.000000e+00> : tensor<f32>
  %mean = nn.div %s0, %n0 : tensor<2x4x1xf32>, tensor<f32> -> tensor<2x4x1xf32>
  %d = nn.sub %x, %mean : tensor<2x4x8xf32>, tensor<2x4x1xf32> -> tensor<2x4x8xf32>
  %two = nn.constant dense<2.000000e+00> : tensor<f32>
  %sq = nn.pow %d, %two : tensor<2x4x8xf32>, tensor<f32> -> tensor<2x4x8xf32>
  %s1 = nn.reduce_to %sq : tensor<2x4x8xf32> -> tensor<2x4x1xf32>
  %n1 = nn.constant dense<8.000000e+00> : tensor<f32>
  %var = nn.div %s1, %n1 : tensor<2x4x1xf32>, tensor<f32> -> tensor<2x4x1xf32>
  %ve = nn.add %var, %e : tensor<2x4x1xf32>, tensor<f32> -> tensor<2x4x1xf32>
  %sd = nn.sqrt %ve : tensor<2x4x1xf32>
  %y = nn.div %d, %sd : tensor<2x4x8xf32>, tensor<2x4x1xf32> -> tensor<2x4x8xf32>
  return %y : tensor<2x4x8xf32>
}

// -----

// Not rewritten: mean - x is centered the other way.
// CHECK-LABEL: func.func @mean_minus_x(
// CHECK-NOT: nn.layer_norm
// CHECK: nn.sqrt
// CHECK-NOT: nn.layer_norm
// CHECK: return
func.func @mean_minus_x(%x: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
  %s0 = nn.reduce_to %x : tensor<2x4x8xf32> -> tensor<2x4x1xf32>
  %n0 = nn.constant dense<8.000000e+00> : tensor<f32>
  %mean = nn.div %s0, %n0 : tensor<2x4x1xf32>, tensor<f32> -> tensor<2x4x1xf32>
  %d = nn.sub %mean, %x : tensor<2x4x1xf32>, tensor<2x4x8xf32> -> tensor<2x4x8xf32>
  %two = nn.constant dense<2.000000e+00> : tensor<f32>
  %sq = nn.pow %d, %two : tensor<2x4x8xf32>, tensor<f32> -> tensor<2x4x8xf32>
  %s1 = nn.reduce_to %sq : tensor<2x4x8xf32> -> tensor<2x4x1xf32>
  %n1 = nn.constant dense<8.000000e+00> : tensor<f32>
  %var = nn.div %s1, %n1 : tensor<2x4x1xf32>, tensor<f32> -> tensor<2x4x1xf32>
  %eps = nn.constant dense<1.000000e-05> : tensor<f32>
  %ve = nn.add %var, %eps : tensor<2x4x1xf32>, tensor<f32> -> tensor<2x4x1xf32>
  %sd = nn.sqrt %ve : tensor<2x4x1xf32>
  %y = nn.div %d, %sd : tensor<2x4x8xf32>, tensor<2x4x1xf32> -> tensor<2x4x8xf32>
  return %y : tensor<2x4x8xf32>
}

// -----

// Not rewritten: the ops are on different stages.
// CHECK-LABEL: func.func @stages_differ(
// CHECK-NOT: nn.layer_norm
// CHECK: nn.sqrt
// CHECK-NOT: nn.layer_norm
// CHECK: return
func.func @stages_differ(%x: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
  %s0 = nn.reduce_to %x {pipe.stage = 0 : i64} : tensor<2x4x8xf32> -> tensor<2x4x1xf32>
  %n0 = nn.constant dense<8.000000e+00> : tensor<f32>
  %mean = nn.div %s0, %n0 {pipe.stage = 0 : i64} : tensor<2x4x1xf32>, tensor<f32> -> tensor<2x4x1xf32>
  %d = nn.sub %x, %mean {pipe.stage = 0 : i64} : tensor<2x4x8xf32>, tensor<2x4x1xf32> -> tensor<2x4x8xf32>
  %two = nn.constant dense<2.000000e+00> : tensor<f32>
  %sq = nn.pow %d, %two {pipe.stage = 0 : i64} : tensor<2x4x8xf32>, tensor<f32> -> tensor<2x4x8xf32>
  %s1 = nn.reduce_to %sq {pipe.stage = 0 : i64} : tensor<2x4x8xf32> -> tensor<2x4x1xf32>
  %n1 = nn.constant dense<8.000000e+00> : tensor<f32>
  %var = nn.div %s1, %n1 {pipe.stage = 0 : i64} : tensor<2x4x1xf32>, tensor<f32> -> tensor<2x4x1xf32>
  %eps = nn.constant dense<1.000000e-05> : tensor<f32>
  %ve = nn.add %var, %eps {pipe.stage = 0 : i64} : tensor<2x4x1xf32>, tensor<f32> -> tensor<2x4x1xf32>
  %sd = nn.sqrt %ve {pipe.stage = 1 : i64} : tensor<2x4x1xf32>
  %y = nn.div %d, %sd {pipe.stage = 0 : i64} : tensor<2x4x8xf32>, tensor<2x4x1xf32> -> tensor<2x4x8xf32>
  return %y : tensor<2x4x8xf32>
}
