// gpipe-bf16-shadows: with bf16 GEMMs, a parameter a GEMM reads keeps a bf16
// copy; every nn.param of it in its stage is marked, so the update refreshes
// the copy. A parameter no GEMM reads is not marked.
// RUN: gpipe-opt %s --split-input-file --gpipe-bf16-shadows | FileCheck %s

// Stage 0: w is read by a GEMM through a view, b only by an add.
// CHECK-LABEL: func.func @f0(
// CHECK: nn.param @w {pipe.bf16_shadow}
// CHECK: nn.param @b :
// CHECK-LABEL: func.func @u0(
// CHECK: nn.param @w {pipe.bf16_shadow}
// CHECK: nn.param @b :
// Stage 1 has its own parameter v, which its backward's GEMM reads.
// CHECK-LABEL: func.func @f1(
// CHECK: nn.param @v {pipe.bf16_shadow}
// CHECK-LABEL: func.func @u1(
// CHECK: nn.param @v {pipe.bf16_shadow}
module attributes {pipe.stages = 2 : i64} {
  nn.parameter @w : tensor<9xf32>
  nn.parameter @b : tensor<2x3xf32>
  nn.parameter @v : tensor<3x3xf32>
  func.func @f0(%x: tensor<2x3xf32>) attributes {pipe.phase = "forward", pipe.stage = 0 : i64} {
    %w = nn.param @w : tensor<9xf32>
    %w2 = nn.reshape %w : tensor<9xf32> -> tensor<3x3xf32>
    %b = nn.param @b : tensor<2x3xf32>
    %h = nn.gemm %x, %w2 : (tensor<2x3xf32>, tensor<3x3xf32>) -> tensor<2x3xf32>
    %y = nn.add %h, %b : tensor<2x3xf32>, tensor<2x3xf32> -> tensor<2x3xf32>
    pipe.send %y to 1 tag 0 : tensor<2x3xf32>
    return
  }
  func.func @b0() attributes {pipe.phase = "backward", pipe.stage = 0 : i64} {
    return
  }
  func.func @u0() attributes {pipe.phase = "update", pipe.stage = 0 : i64} {
    %w = nn.param @w : tensor<9xf32>
    %b = nn.param @b : tensor<2x3xf32>
    return
  }
  func.func @f1() attributes {pipe.phase = "forward", pipe.stage = 1 : i64} {
    %v = nn.param @v : tensor<3x3xf32>
    return
  }
  func.func @b1(%g: tensor<2x3xf32>) attributes {pipe.phase = "backward", pipe.stage = 1 : i64} {
    %v = nn.param @v : tensor<3x3xf32>
    %d = nn.gemm %g, %v : (tensor<2x3xf32>, tensor<3x3xf32>) -> tensor<2x3xf32>
    pipe.send %d to 0 tag 1 : tensor<2x3xf32>
    return
  }
  func.func @u1() attributes {pipe.phase = "update", pipe.stage = 1 : i64} {
    %v = nn.param @v : tensor<3x3xf32>
    return
  }
  pipe.schedule stage 0 forward @f0 backward @b0 update @u0 actions [#pipe.action<forward, mb = 0>, #pipe.action<backward, mb = 0>, #pipe.action<update>]
  pipe.schedule stage 1 forward @f1 backward @b1 update @u1 actions [#pipe.action<forward, mb = 0>, #pipe.action<backward, mb = 0>, #pipe.action<update>]
}
