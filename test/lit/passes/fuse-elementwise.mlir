// gpipe-fuse-elementwise: runs of elementwise ops with one result shape get
// one pipe.fused = N (numbered per function); parameters and constants do
// not break a run, any other op or a new shape does; ops alone in their group
// get no mark. With target=cuda a relu that is the only reader of the GEMM
// just before it joins that GEMM (the relu epilogue).
// RUN: gpipe-opt %s --split-input-file --gpipe-fuse-elementwise | FileCheck %s
// RUN: gpipe-opt %s --split-input-file --gpipe-fuse-elementwise=target=cuda | FileCheck %s --check-prefix=CUDA
// RUN: not gpipe-opt %s --split-input-file --gpipe-fuse-elementwise=target=tpu 2>&1 | FileCheck %s --check-prefix=BAD
// BAD: error: fusion target must be cpu or cuda, got 'tpu'

// CHECK-LABEL: func.func @chains(
// CHECK: nn.gemm {{.*}}-> tensor<4x8xf32>{{$}}
// CHECK-NEXT: nn.relu %{{.+}} : tensor<4x8xf32>{{$}}
// CHECK-NEXT: nn.gemm
// CHECK-NEXT: nn.tanh %{{.+}} {pipe.fused = 0 : i64}
// CHECK-NEXT: nn.constant
// CHECK-NEXT: nn.mul %{{.+}} {pipe.fused = 0 : i64}
// CHECK-NEXT: nn.sigmoid %{{.+}} {pipe.fused = 0 : i64}
// A new shape starts a new group (of one: no mark).
// CHECK-NEXT: nn.reduce_to
// CHECK-NEXT: nn.neg %{{.+}} : tensor<8xf32>{{$}}
// CHECK-NEXT: nn.gemm
// CHECK-NEXT: nn.add %{{.+}} {pipe.fused = 1 : i64}
// CHECK-NEXT: nn.relu_grad %{{.+}} {pipe.fused = 1 : i64}
// CHECK-NEXT: return
// On CUDA the first relu joins its GEMM (group 0); the rest is numbered on.
// CUDA-LABEL: func.func @chains(
// CUDA: nn.gemm {{.*}} {pipe.fused = 0 : i64}
// CUDA-NEXT: nn.relu %{{.+}} {pipe.fused = 0 : i64}
// CUDA-NEXT: nn.gemm
// CUDA-NEXT: nn.tanh %{{.+}} {pipe.fused = 1 : i64}
// CUDA: nn.add %{{.+}} {pipe.fused = 2 : i64}
func.func @chains(%x: tensor<4x16xf32>, %w: tensor<16x8xf32>, %v: tensor<8x8xf32>) -> tensor<8xf32> {
  %g = nn.gemm %x, %w : (tensor<4x16xf32>, tensor<16x8xf32>) -> tensor<4x8xf32>
  %r = nn.relu %g : tensor<4x8xf32>
  %h = nn.gemm %r, %v : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %t = nn.tanh %h : tensor<4x8xf32>
  %c = nn.constant dense<5.000000e-01> : tensor<f32>
  %m = nn.mul %t, %c : tensor<4x8xf32>, tensor<f32> -> tensor<4x8xf32>
  %s = nn.sigmoid %m : tensor<4x8xf32>
  %red = nn.reduce_to %s : tensor<4x8xf32> -> tensor<8xf32>
  %n = nn.neg %red : tensor<8xf32>
  %k = nn.gemm %s, %v : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %a = nn.add %k, %s : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %dg = nn.relu_grad %a, %k : tensor<4x8xf32>
  return %n : tensor<8xf32>
}

// -----

// On CUDA a relu does not join a GEMM that has another reader.
// CUDA-LABEL: func.func @gemm_read_twice(
// CUDA: nn.gemm {{.*}}-> tensor<4x8xf32>{{$}}
// CUDA-NEXT: nn.relu %{{.+}} : tensor<4x8xf32>{{$}}
func.func @gemm_read_twice(%x: tensor<4x16xf32>, %w: tensor<16x8xf32>) -> tensor<4x8xf32> {
  %g = nn.gemm %x, %w : (tensor<4x16xf32>, tensor<16x8xf32>) -> tensor<4x8xf32>
  %r = nn.relu %g : tensor<4x8xf32>
  return %g : tensor<4x8xf32>
}
