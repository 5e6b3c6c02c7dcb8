// gpipe-partition with `costs`: a measured cost table (JSON lines, as
// gpipe-run --profile writes) replaces the analytic model. The four ops of
// @chain cost the same by FLOPs, so the analytic cut is 2 + 2 (ANALYTIC);
// the table says /a/Tanh takes 20 ms a step and /b/Tanh, /c/Tanh 1 and 2 ms,
// so /a/Tanh gets a stage of its own (the loss, not in the table, costs its
// analytic estimate on the table's scale). /d/Tanh has /b/Tanh's signature
// but no entry of its own: it costs the mean of the table's nodes of that
// signature. A table measured at another micro-batch size (costs-chain-half:
// the same nodes on 4 rows, not 8) still names the nodes: each costs its
// measured time scaled by the analytic estimates (x2 here), the same cut.
// A table that cannot be read names the file (and the line).
// RUN: gpipe-opt %s --split-input-file --gpipe-partition="stages=2" | FileCheck %s --check-prefix=ANALYTIC
// RUN: gpipe-opt %s --split-input-file --gpipe-partition="stages=2 costs=%S/../Inputs/costs-chain.jsonl" | FileCheck %s
// RUN: gpipe-opt %s --split-input-file --gpipe-partition="stages=2 costs=%S/../Inputs/costs-chain-half.jsonl" | FileCheck %s
// RUN: not gpipe-opt %s --split-input-file --gpipe-partition="stages=2 costs=%t.missing" 2>&1 | FileCheck %s --check-prefix=MISSING
// RUN: printf '{"gpipe_profile": 1, "stage": 0, "steps": 2}\n{"stage": 0, "function": "sideways", "calls": 1, "seconds": 1, "ops": []}\n' > %t.bad
// RUN: not gpipe-opt %s --split-input-file --gpipe-partition="stages=2 costs=%t.bad" 2>&1 | FileCheck %s --check-prefix=BAD
// RUN: printf 'not json\n' > %t.nojson
// RUN: not gpipe-opt %s --split-input-file --gpipe-partition="stages=2 costs=%t.nojson" 2>&1 | FileCheck %s --check-prefix=NOJSON

// ANALYTIC-LABEL: func.func @chain(
// ANALYTIC: nn.tanh {{.+}} {pipe.stage = 0 : i64}
// ANALYTIC-NEXT: nn.tanh {{.+}} {pipe.stage = 0 : i64}
// ANALYTIC-NEXT: nn.tanh {{.+}} {pipe.stage = 1 : i64}
// ANALYTIC-NEXT: nn.tanh {{.+}} {pipe.stage = 1 : i64}
// CHECK-LABEL: func.func @chain(
// CHECK: nn.tanh {{.+}} {pipe.stage = 0 : i64}
// CHECK-NEXT: nn.tanh {{.+}} {pipe.stage = 1 : i64}
// CHECK-NEXT: nn.tanh {{.+}} {pipe.stage = 1 : i64}
// CHECK-NEXT: nn.tanh {{.+}} {pipe.stage = 1 : i64}
// CHECK-NEXT: nn.softmax_cross_entropy {{.+}} {pipe.stage = 1 : i64}
// MISSING: error: cost table: cannot read cost table {{.*}}.missing: {{.*}}
// BAD: error: cost table: {{.*}}.bad:2: unknown function 'sideways'
// NOJSON: error: cost table: {{.*}}.nojson:1: not JSON: {{.*}}
func.func @chain(%x: tensor<8x8xf32>, %labels: tensor<8xi64>) -> (tensor<f32> {nn.loss}) {
  %a = nn.tanh %x : tensor<8x8xf32> loc("/a/Tanh")
  %b = nn.tanh %a : tensor<8x8xf32> loc("/b/Tanh")
  %c = nn.tanh %b : tensor<8x8xf32> loc("/c/Tanh")
  %d = nn.tanh %c : tensor<8x8xf32> loc("/d/Tanh")
  %loss = nn.softmax_cross_entropy %d, %labels : tensor<8x8xf32>, tensor<8xi64> loc("/Loss")
  return %loss : tensor<f32>
}
