// gpipe-remat with `stages`: only the named pieces rematerialize. On
// remat.mlir's first module with stages=0: stage 0's backward recomputes its
// stash in a pipe.remat region, while stage 2 keeps its stash (its forward
// still returns the loss input and the others, and its backward has no
// pipe.remat). A piece out of range is an error naming it and the pieces
// there are.
// RUN: gpipe-opt %S/remat.mlir --split-input-file --gpipe-remat="mode=stage stages=0" | FileCheck %s
// RUN: not gpipe-opt %S/remat.mlir --split-input-file --gpipe-remat="mode=stage stages=3" 2>&1 | FileCheck %s --check-prefix=RANGE
// CHECK-LABEL: module attributes {pipe.batch_size = 16 : i64, pipe.microbatches = 2 : i64, pipe.remat = "stage", pipe.stages = 3 : i64}
// CHECK-LABEL: func.func @stage0_backward(
// CHECK-NEXT: pipe.remat
// CHECK-LABEL: func.func @stage2_forward(
// CHECK-SAME: -> (tensor<8x4xf32>, tensor<8xi64>, tensor<8x48xf32>, tensor<8x1xf32>)
// CHECK-LABEL: func.func @stage2_backward(
// CHECK-NOT: pipe.remat
// CHECK-LABEL: func.func @stage2_update()
// RANGE: error: remat stage 3 is out of range: the model has 3 piece(s)
