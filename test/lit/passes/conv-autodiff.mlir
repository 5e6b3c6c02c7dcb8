// gpipe-autodiff through nn.conv: the input gradient is the transposed
// convolution (nn.conv_input_grad), the weight gradient nn.conv_weight_grad,
// the bias gradient dY summed over N and the positions (reduce_to [1, F, 1],
// reshaped to [F]); the attributes carry over; the data input gets none.
// RUN: gpipe-opt %s --gpipe-autodiff | FileCheck %s

nn.parameter @c1.weight : tensor<3x2x3xf32>
nn.parameter @c2.weight : tensor<5x3x6xf32>
nn.parameter @c2.bias : tensor<5xf32>
// CHECK-LABEL: func.func @conv1d(
// CHECK-SAME: %[[X:[^:]+]]: tensor<4x2x6xf32>
// CHECK: %[[W1:.+]] = nn.param @c1.weight
// CHECK: %[[W2:.+]] = nn.param @c2.weight
// CHECK: %[[B2:.+]] = nn.param @c2.bias
// CHECK: %[[Y1:.+]] = nn.conv %[[X]], %[[W1]] {dilations = array<i64: 1>, pads = array<i64: 1, 1>, strides = array<i64: 1>}
// CHECK: nn.conv %[[Y1]], %[[W2]], %[[B2]]
// CHECK: %[[DY2:.+]] = nn.reshape %{{.+}} : tensor<4x5xf32> -> tensor<4x5x1xf32>
// CHECK-DAG: %[[DY1:.+]] = nn.conv_input_grad %[[DY2]], %[[W2]] {dilations = array<i64: 1>, pads = array<i64: 0, 0>, strides = array<i64: 1>} : (tensor<4x5x1xf32>, tensor<5x3x6xf32>) -> tensor<4x3x6xf32>
// CHECK-DAG: %[[DW2:.+]] = nn.conv_weight_grad %[[Y1]], %[[DY2]] {dilations = array<i64: 1>, pads = array<i64: 0, 0>, strides = array<i64: 1>} : (tensor<4x3x6xf32>, tensor<4x5x1xf32>) -> tensor<5x3x6xf32>
// CHECK-DAG: %[[SUM:.+]] = nn.reduce_to %[[DY2]] : tensor<4x5x1xf32> -> tensor<1x5x1xf32>
// CHECK-DAG: %[[DB2:.+]] = nn.reshape %[[SUM]] : tensor<1x5x1xf32> -> tensor<5xf32>
// CHECK-NOT: -> tensor<4x2x6xf32>
// CHECK: %[[DW1:.+]] = nn.conv_weight_grad %[[X]], %[[DY1]] {dilations = array<i64: 1>, pads = array<i64: 1, 1>, strides = array<i64: 1>} : (tensor<4x2x6xf32>, tensor<4x3x6xf32>) -> tensor<3x2x3xf32>
// CHECK-NOT: -> tensor<4x2x6xf32>
// CHECK-DAG: nn.param_grad %[[W1]], %[[DW1]] : tensor<3x2x3xf32>
// CHECK-DAG: nn.param_grad %[[W2]], %[[DW2]] : tensor<5x3x6xf32>
// CHECK-DAG: nn.param_grad %[[B2]], %[[DB2]] : tensor<5xf32>
func.func @conv1d(%x: tensor<4x2x6xf32>, %labels: tensor<4xi64>) -> (tensor<f32> {nn.loss}) {
  %w1 = nn.param @c1.weight : tensor<3x2x3xf32>
  %w2 = nn.param @c2.weight : tensor<5x3x6xf32>
  %b2 = nn.param @c2.bias : tensor<5xf32>
  %y1 = nn.conv %x, %w1 {strides = array<i64: 1>, pads = array<i64: 1, 1>, dilations = array<i64: 1>} : (tensor<4x2x6xf32>, tensor<3x2x3xf32>) -> tensor<4x3x6xf32>
  %y2 = nn.conv %y1, %w2, %b2 {strides = array<i64: 1>, pads = array<i64: 0, 0>, dilations = array<i64: 1>} : (tensor<4x3x6xf32>, tensor<5x3x6xf32>, tensor<5xf32>) -> tensor<4x5x1xf32>
  %logits = nn.reshape %y2 : tensor<4x5x1xf32> -> tensor<4x5xf32>
  %loss = nn.softmax_cross_entropy %logits, %labels : tensor<4x5xf32>, tensor<4xi64>
  return %loss : tensor<f32>
}
