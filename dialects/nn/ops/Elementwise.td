// Ops of the nn dialect: elementwise ops and the gradients of the activations.
#ifndef GPIPE_NN_OPS_ELEMENTWISE
#define GPIPE_NN_OPS_ELEMENTWISE

// The batch rule every elementwise op shares (splitElementwiseBatch, in
// ops/Elementwise.cpp).
defvar NN_ElementwiseBatchRule = [{
  ::mlir::LogicalResult $cppClass::splitBatch(
      ::llvm::ArrayRef<std::optional<int64_t>> operandAxes, int64_t,
      ::llvm::SmallVectorImpl<std::optional<int64_t>> &resultAxes) {
    return splitElementwiseBatch(*this, operandAxes, resultAxes);
  }
}];

class NN_BinaryOp<string mnemonic, string desc> : NN_Op<mnemonic, [Pure,
    NN_Cost, NN_Fusible,
    NN_Batch,
    DeclareOpInterfaceMethods<NN_DifferentiableOpInterface>]> {
  let summary = "elementwise " # desc # " with numpy broadcasting";
  let arguments = (ins NN_F32Tensor:$lhs, NN_F32Tensor:$rhs);
  let results = (outs NN_F32Tensor:$output);
  let assemblyFormat = [{
    $lhs `,` $rhs attr-dict `:` type($lhs) `,` type($rhs) `->` type($output)
  }];
  let hasVerifier = 1;
  let extraClassDefinition = NN_ElementwiseBatchRule;
}

def NN_AddOp : NN_BinaryOp<"add", "addition">;
def NN_SubOp : NN_BinaryOp<"sub", "subtraction">;
def NN_MulOp : NN_BinaryOp<"mul", "multiplication">;
def NN_DivOp : NN_BinaryOp<"div", "division">;
def NN_PowOp : NN_BinaryOp<"pow", "power (lhs raised to rhs)">;

class NN_UnaryOp<string mnemonic, string desc> : NN_Op<mnemonic, [Pure,
    SameOperandsAndResultType,
    NN_Cost, NN_Fusible,
    NN_Batch,
    DeclareOpInterfaceMethods<NN_DifferentiableOpInterface>]> {
  let summary = "elementwise " # desc;
  let arguments = (ins NN_F32Tensor:$input);
  let results = (outs NN_F32Tensor:$output);
  let assemblyFormat = "$input attr-dict `:` type($input)";
  let extraClassDefinition = NN_ElementwiseBatchRule;
}

def NN_NegOp : NN_UnaryOp<"neg", "negation">;
def NN_ReluOp : NN_UnaryOp<"relu", "max(x, 0)">;
def NN_TanhOp : NN_UnaryOp<"tanh", "hyperbolic tangent">;
def NN_SigmoidOp : NN_UnaryOp<"sigmoid", "logistic sigmoid">;
def NN_ErfOp : NN_UnaryOp<"erf", "error function">;
def NN_ExpOp : NN_UnaryOp<"exp", "exponential">;
def NN_LogOp : NN_UnaryOp<"log", "natural logarithm">;
def NN_SqrtOp : NN_UnaryOp<"sqrt", "square root">;
def NN_ReciprocalOp : NN_UnaryOp<"reciprocal", "reciprocal 1 / x">;
def NN_AbsOp : NN_UnaryOp<"abs", "absolute value">;

// Gradient ops of the activations: fused `dy * f'(...)`.
class NN_ActGradOp<string mnemonic, string desc, string from> : NN_Op<mnemonic,
    [Pure, SameOperandsAndResultType,
     NN_Cost, NN_Fusible]> {
  let summary = "gradient of " # desc # ", computed from its " # from;
  let arguments = (ins NN_F32Tensor:$value, NN_F32Tensor:$grad);
  let results = (outs NN_F32Tensor:$output);
  let assemblyFormat = "$value `,` $grad attr-dict `:` type($value)";
}

def NN_ReluGradOp : NN_ActGradOp<"relu_grad", "relu", "output">;
def NN_TanhGradOp : NN_ActGradOp<"tanh_grad", "tanh", "output">;
def NN_SigmoidGradOp : NN_ActGradOp<"sigmoid_grad", "sigmoid", "output">;
def NN_ErfGradOp : NN_ActGradOp<"erf_grad", "erf", "input">;
def NN_SqrtGradOp : NN_ActGradOp<"sqrt_grad", "sqrt", "output">;
def NN_ReciprocalGradOp : NN_ActGradOp<"reciprocal_grad", "reciprocal", "output">;
def NN_AbsGradOp : NN_ActGradOp<"abs_grad", "abs", "input">;

#endif // GPIPE_NN_OPS_ELEMENTWISE
