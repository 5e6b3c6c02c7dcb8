// nn.transpose round-trips (f32 and i64).
// RUN: gpipe-opt %s | gpipe-opt | FileCheck %s

// CHECK-LABEL: func.func @transpose
// CHECK: nn.transpose %{{.+}}, [2, 0, 1] : tensor<2x3x4xf32> -> tensor<4x2x3xf32>
// CHECK: nn.transpose %{{.+}}, [1, 0] : tensor<2x5xi64> -> tensor<5x2xi64>
func.func @transpose(%a: tensor<2x3x4xf32>, %b: tensor<2x5xi64>) -> (tensor<4x2x3xf32>, tensor<5x2xi64>) {
  %0 = nn.transpose %a, [2, 0, 1] : tensor<2x3x4xf32> -> tensor<4x2x3xf32>
  %1 = nn.transpose %b, [1, 0] : tensor<2x5xi64> -> tensor<5x2xi64>
  return %0, %1 : tensor<4x2x3xf32>, tensor<5x2xi64>
}
