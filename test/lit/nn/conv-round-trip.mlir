// The convolution family in its custom form (nn.conv with and without bias,
// 1-D and 2-D, grouped; its input and weight gradients): parsed, printed,
// re-parsed and printed again; then through the generic form.
// RUN: gpipe-opt %s | gpipe-opt | FileCheck %s
// RUN: gpipe-opt %s --mlir-print-op-generic | gpipe-opt | FileCheck %s

nn.parameter @w2 : tensor<4x3x3x3xf32>
nn.parameter @b2 : tensor<4xf32>
nn.parameter @w1 : tensor<6x1x5xf32>

// A padded 2-D conv with bias; its gradients carry the same attributes.
// CHECK-LABEL: func.func @conv2d(
// CHECK: %[[Y:.+]] = nn.conv %{{.+}}, %{{.+}}, %{{.+}} {dilations = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>} : (tensor<8x3x6x6xf32>, tensor<4x3x3x3xf32>, tensor<4xf32>) -> tensor<8x4x6x6xf32>
// CHECK: nn.conv_input_grad %[[Y]], %{{.+}} {dilations = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>} : (tensor<8x4x6x6xf32>, tensor<4x3x3x3xf32>) -> tensor<8x3x6x6xf32>
// CHECK: nn.conv_weight_grad %{{.+}}, %[[Y]] {dilations = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>} : (tensor<8x3x6x6xf32>, tensor<8x4x6x6xf32>) -> tensor<4x3x3x3xf32>
func.func @conv2d(%x: tensor<8x3x6x6xf32>) -> (tensor<8x3x6x6xf32>, tensor<4x3x3x3xf32>) {
  %w = nn.param @w2 : tensor<4x3x3x3xf32>
  %b = nn.param @b2 : tensor<4xf32>
  %y = nn.conv %x, %w, %b {strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>} : (tensor<8x3x6x6xf32>, tensor<4x3x3x3xf32>, tensor<4xf32>) -> tensor<8x4x6x6xf32>
  %dx = nn.conv_input_grad %y, %w {strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>} : (tensor<8x4x6x6xf32>, tensor<4x3x3x3xf32>) -> tensor<8x3x6x6xf32>
  %dw = nn.conv_weight_grad %x, %y {strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>} : (tensor<8x3x6x6xf32>, tensor<8x4x6x6xf32>) -> tensor<4x3x3x3xf32>
  return %dx, %dw : tensor<8x3x6x6xf32>, tensor<4x3x3x3xf32>
}

// A depthwise 1-D conv without bias (group = channels), strided, dilated and
// asymmetrically padded: (10 + 2 + 1 - 2 * 4 - 1) / 2 + 1 = 3.
// CHECK-LABEL: func.func @conv1d_depthwise(
// CHECK: nn.conv %{{[^,]+}}, %{{[^ ]+}} {dilations = array<i64: 2>, group = 6 : i64, pads = array<i64: 2, 1>, strides = array<i64: 2>} : (tensor<2x6x10xf32>, tensor<6x1x5xf32>) -> tensor<2x6x3xf32>
func.func @conv1d_depthwise(%x: tensor<2x6x10xf32>) -> tensor<2x6x3xf32> {
  %w = nn.param @w1 : tensor<6x1x5xf32>
  %y = nn.conv %x, %w {strides = array<i64: 2>, pads = array<i64: 2, 1>, dilations = array<i64: 2>, group = 6 : i64} : (tensor<2x6x10xf32>, tensor<6x1x5xf32>) -> tensor<2x6x3xf32>
  return %y : tensor<2x6x3xf32>
}
