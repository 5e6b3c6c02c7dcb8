// Op interfaces of the nn dialect: cost (for partitioning), differentiation and
// micro-batch splitting.
#ifndef GPIPE_NN_INTERFACES
#define GPIPE_NN_INTERFACES

include "mlir/IR/OpBase.td"

def NN_CostOpInterface : OpInterface<"CostOpInterface"> {
  let description = [{
    A first cost estimate of one op: floating-point operations and bytes of
    memory traffic (every operand read once, every result written once).
  }];
  let cppNamespace = "::gpipe::nn";
  let methods = [
    InterfaceMethod<"Floating-point operations of one execution.",
      "int64_t", "getFlops", (ins), [{}], [{ return 0; }]>,
    InterfaceMethod<"Bytes read and written by one execution.",
      "int64_t", "getBytesAccessed", (ins), [{}], [{
        return ::gpipe::nn::defaultBytesAccessed($_op);
      }]>,
  ];
}

def NN_DifferentiableOpInterface : OpInterface<"DifferentiableOpInterface"> {
  let description = [{
    Reverse-mode gradient rule. Given the gradients of the op's results
    (null where a result does not influence the loss), builds the ops that
    compute the gradients of its operands at the builder's insertion point and
    returns them in `operandGrads` (one entry per operand, null for operands
    that are not differentiable, such as integer labels).
  }];
  let cppNamespace = "::gpipe::nn";
  let methods = [
    InterfaceMethod<"Builds the operand gradients.",
      "::mlir::LogicalResult", "buildGradients",
      (ins "::mlir::OpBuilder &":$builder,
           "::mlir::ArrayRef<::mlir::Value>":$resultGrads,
           "::llvm::SmallVectorImpl<::mlir::Value> &":$operandGrads)>,
  ];
}

def NN_BatchSplittableOpInterface : OpInterface<"BatchSplittableOpInterface"> {
  let description = [{
    How the op carries the batch when `gpipe-microbatch` splits it into M
    micro-batches. Called on an op of a forward graph at least one of whose
    operands carries the batch: `operandAxes` holds, per operand, its batch
    axis (nullopt for operands that do not depend on the graph inputs). The
    rule fills `resultAxes` with one entry per result (nullopt where a result
    does not carry the batch), or fails after emitting an error through
    `emitBatchSplitError` when the batch cannot be split through the op. The
    pass then shrinks every batch axis M-fold. A rule may record M on its op
    (the loss does, to scale its mean). Ops without this interface cannot take
    batch-carrying operands.
  }];
  let cppNamespace = "::gpipe::nn";
  let methods = [
    InterfaceMethod<"Finds the results' batch axes from the operands'.",
      "::mlir::LogicalResult", "splitBatch",
      (ins "::llvm::ArrayRef<std::optional<int64_t>>":$operandAxes,
           "int64_t":$microbatches,
           "::llvm::SmallVectorImpl<std::optional<int64_t>> &":$resultAxes)>,
  ];
}

#endif // GPIPE_NN_INTERFACES
