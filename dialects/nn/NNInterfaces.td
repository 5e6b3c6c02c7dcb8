// Op interfaces of the nn dialect: cost (for partitioning) and differentiation.
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

#endif // GPIPE_NN_INTERFACES
