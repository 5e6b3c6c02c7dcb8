// Ops of the nn dialect.
#ifndef GPIPE_NN_OPS
#define GPIPE_NN_OPS

include "dialects/nn/NNDialect.td"
include "dialects/nn/NNInterfaces.td"
include "mlir/IR/BuiltinAttributeInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/IR/OpBase.td"
include "mlir/IR/SymbolInterfaces.td"

// Ops with their own FLOP count; ops that move no data (views, values) at all.
def NN_Cost : DeclareOpInterfaceMethods<NN_CostOpInterface, ["getFlops"]>;
def NN_FreeCost : DeclareOpInterfaceMethods<NN_CostOpInterface,
                                            ["getFlops", "getBytesAccessed"]>;

// Ops through which gpipe-microbatch can split the batch (their rule, splitBatch,
// is in their family's ops/*.cpp).
def NN_Batch : DeclareOpInterfaceMethods<NN_BatchSplittableOpInterface>;

// Elementwise ops: one scalar expression per element, so that code generation
// can fuse chains of them into one loop or kernel (gpipe-fuse-elementwise).
def NN_Fusible : NativeOpTrait<"Fusible"> {
  let cppNamespace = "::gpipe::nn";
}

def NN_F32Tensor : StaticShapeTensorOf<[F32]>;
def NN_I64Tensor : StaticShapeTensorOf<[I64]>;
def NN_NumTensor : StaticShapeTensorOf<[F32, I64]>;
def NN_F32Scalar : 0DTensorOf<[F32]> {
  let builderCall = "::mlir::RankedTensorType::get({}, $_builder.getF32Type())";
}

// One file per op family: its ops here, their verifiers, cost, gradient and
// micro-batch rules in the .cpp of the same name.
include "dialects/nn/ops/Values.td"
include "dialects/nn/ops/Gemm.td"
include "dialects/nn/ops/Elementwise.td"
include "dialects/nn/ops/DataMovement.td"
include "dialects/nn/ops/Loss.td"
include "dialects/nn/ops/Normalization.td"
include "dialects/nn/ops/Attention.td"
include "dialects/nn/ops/Pool.td"
include "dialects/nn/ops/Conv.td"

#endif // GPIPE_NN_OPS
