// The nn dialect's ops and interfaces.
#ifndef GPIPE_DIALECTS_NN_NNOPS_H
#define GPIPE_DIALECTS_NN_NNOPS_H

#include "dialects/nn/NNDialect.h"
#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

namespace gpipe::nn {
/// Operand + result bytes: the default memory-traffic estimate of an op.
int64_t defaultBytesAccessed(mlir::Operation *op);

/// Numpy broadcast of two static shapes; failure if incompatible.
mlir::FailureOr<llvm::SmallVector<int64_t>>
broadcastShapes(llvm::ArrayRef<int64_t> a, llvm::ArrayRef<int64_t> b);

/// Reduces `grad` (the gradient of a broadcast result) to `type` by summing
/// the broadcast dimensions; returns `grad` itself when no reduction is needed.
mlir::Value reduceToType(mlir::OpBuilder &b, mlir::Location loc,
                         mlir::Value grad, mlir::RankedTensorType type);

/// The value of an f32 nn.constant with one value in every element (a
/// splat), or nullopt.
std::optional<float> splatValue(mlir::Value v);

/// The "batch axis" BatchSplittableOpInterface rules give a result that sums
/// over the batch (a loss, a ReduceMean over the batch axis): with
/// micro-batches it is each micro-batch's share of the mini-batch's value, so
/// it may only flow into the loss through ops linear in it (gpipe-microbatch
/// checks that). Rules are never called with it as an operand's axis.
constexpr int64_t kBatchSum = -1;

/// Emits "cannot split the batch into micro-batches: WHY" on `op`: the error
/// of a failed BatchSplittableOpInterface rule.
mlir::InFlightDiagnostic emitBatchSplitError(mlir::Operation *op,
                                             const llvm::Twine &why);

/// Where the batch lies after a reshape: `in` carries it on `axis`, in whose
/// dimension it occupies the inner `block` (the batch times the dimensions
/// merged after it; `block` is the whole dimension unless dimensions before
/// the batch were merged into it, as in [T, B] -> [T * B]). Returns the
/// result's (axis, block), or nullopt when the reshape splits the batch's
/// micro-batches apart (they would no longer be one slice of a dimension).
std::optional<std::pair<int64_t, int64_t>>
reshapeBatchAxis(llvm::ArrayRef<int64_t> in, int64_t axis, int64_t block,
                 llvm::ArrayRef<int64_t> out, int64_t microbatches);

/// The batch rule of the elementwise ops (numpy broadcasting): the result
/// carries the batch on the axis its batch-carrying operands agree on; an
/// operand without the batch must broadcast along it.
mlir::LogicalResult splitElementwiseBatch(
    mlir::Operation *op, llvm::ArrayRef<std::optional<int64_t>> operandAxes,
    llvm::SmallVectorImpl<std::optional<int64_t>> &resultAxes);

/// Elementwise ops: code generation computes them one element at a time, so
/// chains of them can share one loop or kernel (ODS: NN_Fusible).
template <typename ConcreteType>
class Fusible : public mlir::OpTrait::TraitBase<ConcreteType, Fusible> {};

/// Checks that `op`'s parameter `name` is declared (an nn.parameter symbol in
/// the enclosing module) with `type`: the verifier of every op that names a
/// parameter (nn.param, pipe.accumulate_grad, pipe.accumulated_grad).
mlir::LogicalResult verifyParameterUse(mlir::Operation *op,
                                       llvm::StringRef name, mlir::Type type,
                                       mlir::SymbolTableCollection &symbols);
} // namespace gpipe::nn

#include "dialects/nn/NNInterfaces.h.inc"

#define GET_OP_CLASSES
#include "dialects/nn/NNOps.h.inc"

#endif
