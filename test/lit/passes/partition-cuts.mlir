// gpipe-partition with `cuts`: split points by hand, found by the ops' ONNX
// node names (their NameLoc), or by a module path (its first node under
// "/path/"). Errors name the split point.
// RUN: gpipe-opt %s --split-input-file --gpipe-partition="stages=3 cuts=/b/Tanh,c" | FileCheck %s
// RUN: not gpipe-opt %s --split-input-file --gpipe-partition="stages=3 cuts=c,/b/Tanh" 2>&1 | FileCheck %s --check-prefix=ORDER
// RUN: not gpipe-opt %s --split-input-file --gpipe-partition="stages=2 cuts=d" 2>&1 | FileCheck %s --check-prefix=NONE
// RUN: not gpipe-opt %s --split-input-file --gpipe-partition="stages=3 cuts=c" 2>&1 | FileCheck %s --check-prefix=COUNT
// RUN: not gpipe-opt %s --split-input-file --gpipe-partition="stages=2 cuts=/v" 2>&1 | FileCheck %s --check-prefix=VIEW

// CHECK-LABEL: func.func @chain(
// CHECK: nn.tanh {{.+}} {pipe.stage = 0 : i64}
// CHECK-NEXT: nn.reshape {{.+}} {pipe.stage = 0 : i64}
// CHECK-NEXT: nn.tanh {{.+}} {pipe.stage = 1 : i64}
// CHECK-NEXT: nn.tanh {{.+}} {pipe.stage = 2 : i64}
// CHECK-NEXT: nn.softmax_cross_entropy {{.+}} {pipe.stage = 2 : i64}
// ORDER: error: {{.*}}split point '/b/Tanh' is not after split point 'c': split points go in program order, and every stage needs at least one op
// NONE: error: split point 'd': no node of that name, and none under '/d/'
// COUNT: error: the split points name 1 node(s), but 3 stages need 2
// VIEW: error: {{.*}}split point '/v' computes nothing (a view goes with the op before it): split at a node that computes
func.func @chain(%x: tensor<8x8xf32>, %labels: tensor<8xi64>) -> (tensor<f32> {nn.loss}) {
  %a = nn.tanh %x : tensor<8x8xf32> loc("/a/Tanh")
  %r = nn.reshape %a : tensor<8x8xf32> -> tensor<8x8xf32> loc("/v")
  %b = nn.tanh %r : tensor<8x8xf32> loc("/b/Tanh")
  %c = nn.tanh %b : tensor<8x8xf32> loc("/c/Tanh")
  %loss = nn.softmax_cross_entropy %c, %labels : tensor<8x8xf32>, tensor<8xi64> loc("/Loss")
  return %loss : tensor<f32>
}
