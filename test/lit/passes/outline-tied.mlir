// A weight tied across stages (used by the first GEMM, stage 0, and the last,
// stage 1): gpipe-partition gives the parameter to its first user's stage,
// which owns it (its only nn.param, its update); gpipe-outline-stages sends
// its value to the other stage with each forward (kept there for the
// backward, in the stash), and that stage's backward sends its share of the
// gradient back, where it is added to the owner's before the accumulation.
// RUN: gpipe-opt %s --pass-pipeline='builtin.module(func.func(gpipe-microbatch{microbatches=2}, gpipe-partition{stages=2}, gpipe-autodiff, gpipe-optimizer), cse, gpipe-outline-stages)' | FileCheck %s

// CHECK-LABEL: func.func @stage0_forward(
// CHECK:         %[[W:.+]] = nn.param @tied : tensor<64x64xf32>
// CHECK:         nn.gemm %{{.+}}, %[[W]]
// CHECK:         pipe.send %[[W]] to 1 tag [[WTAG:[0-9]+]] : tensor<64x64xf32>
// CHECK-LABEL: func.func @stage0_backward(
// CHECK:         %[[G1:.+]] = pipe.recv from 1 tag {{[0-9]+}} : tensor<64x64xf32>
// CHECK:         %[[SUM:.+]] = nn.add %[[G1]], %{{.+}}
// CHECK:         pipe.accumulate_grad %[[SUM]] to @tied
// CHECK-LABEL: func.func @stage0_update(
// CHECK:         %[[P:.+]] = nn.param @tied
// CHECK:         pipe.sgd_update %[[P]]
// CHECK-LABEL: func.func @stage1_forward(
// CHECK-NOT:     nn.param
// CHECK:         %[[RW:.+]] = pipe.recv from 0 tag [[WTAG]] : tensor<64x64xf32>
// CHECK:         nn.gemm %{{.+}}, %[[RW]]
// CHECK:         return {{.*}}%[[RW]]
// CHECK-LABEL: func.func @stage1_backward(
// CHECK-NOT:     nn.param
// CHECK:         pipe.send %{{.+}} to 0 tag {{[0-9]+}} : tensor<64x64xf32>
// CHECK-LABEL: func.func @stage1_update(
// CHECK-NOT:     @tied
// CHECK:         return

nn.parameter @tied : tensor<64x64xf32>
func.func @shared_weight(%x: tensor<8x64xf32>, %l: tensor<8xi64>) -> (tensor<f32> {nn.loss}) {
  %w = nn.param @tied : tensor<64x64xf32>
  %h = nn.gemm %x, %w : (tensor<8x64xf32>, tensor<64x64xf32>) -> tensor<8x64xf32>
  %t = nn.tanh %h : tensor<8x64xf32>
  %y = nn.gemm %t, %w : (tensor<8x64xf32>, tensor<64x64xf32>) -> tensor<8x64xf32>
  %loss = nn.softmax_cross_entropy %y, %l : tensor<8x64xf32>, tensor<8xi64>
  return %loss : tensor<f32>
}
