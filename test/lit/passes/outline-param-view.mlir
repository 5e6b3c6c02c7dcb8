// gpipe-outline-stages: a view (nn.reshape) of the stage's own parameter that
// the backward reads is rebuilt in the backward from the parameter, not
// stashed (a stash entry would alias the parameter: gpipe-plan-memory refuses
// it); the forward keeps only the activations the backward needs.
// RUN: gpipe-opt %s --pass-pipeline='builtin.module(func.func(gpipe-partition{stages=1}, gpipe-autodiff, gpipe-optimizer), gpipe-outline-stages)' | FileCheck %s

nn.parameter @t : tensor<2xf32>
nn.parameter @s : tensor<4xf32>
// The forward returns the two activations (x and x * t), not the view.
// CHECK-LABEL: func.func @stage0_forward(
// CHECK-SAME: -> (tensor<4x8xf32>, tensor<4xi64>, tensor<4x4x2xf32>, tensor<4x4x2xf32>)
// CHECK: %[[S:.+]] = nn.param @s : tensor<4xf32>
// CHECK-NEXT: nn.reshape %[[S]] : tensor<4xf32> -> tensor<4x1xf32>
// CHECK: return %{{[^,]+}}, %{{[^,]+}}, %{{[^,]+}}, %{{[^ ]+}} : tensor<4x8xf32>, tensor<4xi64>, tensor<4x4x2xf32>, tensor<4x4x2xf32>
// The backward reads @s again and rebuilds the view for dh = dm * s.view.
// CHECK-LABEL: func.func @stage0_backward(
// CHECK-SAME: %{{[^:]+}}: tensor<4x8xf32>, %{{[^:]+}}: tensor<4xi64>, %{{[^:]+}}: tensor<4x4x2xf32>, %{{[^:]+}}: tensor<4x4x2xf32>)
// CHECK: %[[S2:.+]] = nn.param @s : tensor<4xf32>
// CHECK-NEXT: %[[V:.+]] = nn.reshape %[[S2]] : tensor<4xf32> -> tensor<4x1xf32>
// CHECK-NEXT: nn.mul %{{.+}}, %[[V]] : tensor<4x4x2xf32>, tensor<4x1xf32>
// CHECK: pipe.accumulate_grad %{{.+}} to @s
// CHECK: pipe.accumulate_grad %{{.+}} to @t
func.func @train_step(%x: tensor<4x4x2xf32> {nn.input = "x"}, %y: tensor<4xi64> {nn.input = "y"}) -> (tensor<f32> {nn.loss, nn.output = "loss"}) {
  %t = nn.param @t : tensor<2xf32>
  %h = nn.mul %x, %t : tensor<4x4x2xf32>, tensor<2xf32> -> tensor<4x4x2xf32>
  %s = nn.param @s : tensor<4xf32>
  %v = nn.reshape %s : tensor<4xf32> -> tensor<4x1xf32>
  %m = nn.mul %h, %v : tensor<4x4x2xf32>, tensor<4x1xf32> -> tensor<4x4x2xf32>
  %f = nn.reshape %m : tensor<4x4x2xf32> -> tensor<4x8xf32>
  %loss = nn.softmax_cross_entropy %f, %y : tensor<4x8xf32>, tensor<4xi64>
  return %loss : tensor<f32>
}
