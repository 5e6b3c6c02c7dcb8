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
// ONNX Max and Min (two inputs; the importer folds more), torch.maximum and
// torch.minimum: NaN if either operand is.
def NN_MaxOp : NN_BinaryOp<"max", "maximum (NaN if either operand is NaN)">;
def NN_MinOp : NN_BinaryOp<"min", "minimum (NaN if either operand is NaN)">;

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

def NN_ClipOp : NN_Op<"clip", [Pure,
    SameOperandsAndResultType,
    NN_Cost, NN_Fusible,
    NN_Batch,
    DeclareOpInterfaceMethods<NN_DifferentiableOpInterface>]> {
  let summary = "elementwise clamp to constant bounds";
  let description = [{
    `y = min(max(x, min), max)` with either bound optional (ONNX Clip with
    constant bounds, torch's `clamp`): a NaN stays NaN, and a `min` above
    `max` gives `max` everywhere. The gradient passes where
    `min <= x <= max` (torch's), zero elsewhere.
    ```mlir
    %y = nn.clip %x {max = 1.000000e+00 : f32, min = 0.000000e+00 : f32} : tensor<8x16xf32>
    ```
  }];
  let arguments = (ins NN_F32Tensor:$input, OptionalAttr<F32Attr>:$min,
                   OptionalAttr<F32Attr>:$max);
  let results = (outs NN_F32Tensor:$output);
  let assemblyFormat = "$input attr-dict `:` type($input)";
  let hasVerifier = 1;
  let extraClassDefinition = NN_ElementwiseBatchRule;
}

//===----------------------------------------------------------------------===//
// Masks: comparisons and selection. Booleans are f32 masks (1.0 true, 0.0
// false) in the nn dialect, so they fuse and move like any f32 tensor.
//===----------------------------------------------------------------------===//

def NN_EqualOp : NN_Op<"equal", [Pure,
    NN_Cost, NN_Fusible, NN_Batch,
    DeclareOpInterfaceMethods<NN_DifferentiableOpInterface>]> {
  let summary = "elementwise equality as a mask (1.0 where equal, else 0.0)";
  let description = [{
    ONNX Equal, numpy broadcasting; both operands f32 or both i64. No
    gradient flows through a comparison.
    ```mlir
    %m = nn.equal %ids, %pad : tensor<8x16xi64>, tensor<i64> -> tensor<8x16xf32>
    ```
  }];
  let arguments = (ins NN_NumTensor:$lhs, NN_NumTensor:$rhs);
  let results = (outs NN_F32Tensor:$output);
  let assemblyFormat = [{
    $lhs `,` $rhs attr-dict `:` type($lhs) `,` type($rhs) `->` type($output)
  }];
  let hasVerifier = 1;
  let extraClassDefinition = NN_ElementwiseBatchRule;
}

def NN_NotOp : NN_UnaryOp<"not", "logical not of a mask (1.0 where x == 0, else 0.0)">;

def NN_IntToFloatOp : NN_Op<"int_to_float", [Pure,
    NN_Cost, NN_Fusible, NN_Batch,
    DeclareOpInterfaceMethods<NN_DifferentiableOpInterface>]> {
  let summary = "i64 to f32 conversion (ONNX Cast to FLOAT of an integer)";
  let arguments = (ins NN_I64Tensor:$input);
  let results = (outs NN_F32Tensor:$output);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($output)";
  let hasVerifier = 1;
  let extraClassDefinition = NN_ElementwiseBatchRule;
}

def NN_WhereOp : NN_Op<"where", [Pure,
    NN_Cost, NN_Fusible, NN_Batch,
    DeclareOpInterfaceMethods<NN_DifferentiableOpInterface>]> {
  let summary = "elementwise selection: a where the mask is non-zero, else b";
  let description = [{
    ONNX Where (torch's `masked_fill`, `torch.where`), numpy broadcasting of
    the three operands; the condition is a mask (non-zero is true).
    ```mlir
    %y = nn.where %mask, %ninf, %scores : tensor<1x4x4xf32>, tensor<f32>, tensor<8x4x4xf32> -> tensor<8x4x4xf32>
    ```
  }];
  let arguments = (ins NN_F32Tensor:$condition, NN_F32Tensor:$lhs,
                       NN_F32Tensor:$rhs);
  let results = (outs NN_F32Tensor:$output);
  let assemblyFormat = [{
    $condition `,` $lhs `,` $rhs attr-dict `:` type($condition) `,` type($lhs) `,` type($rhs) `->` type($output)
  }];
  let hasVerifier = 1;
  let extraClassDefinition = NN_ElementwiseBatchRule;
}

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

def NN_ClipGradOp : NN_Op<"clip_grad", [Pure, SameOperandsAndResultType,
    NN_Cost, NN_Fusible]> {
  let summary = "gradient of clip, from its input";
  let description = [{
    `dx = dy` where `min <= x <= max` (each bound only when set), else 0
    (torch's clamp gradient: the bounds themselves pass it, NaN does not).
  }];
  let arguments = (ins NN_F32Tensor:$value, NN_F32Tensor:$grad,
                   OptionalAttr<F32Attr>:$min, OptionalAttr<F32Attr>:$max);
  let results = (outs NN_F32Tensor:$output);
  let assemblyFormat = "$value `,` $grad attr-dict `:` type($value)";
  let hasVerifier = 1;
}

// The gradients of nn.max and nn.min with respect to `lhs` (that of `rhs`
// is the same op with the operands swapped), torch's: dy where lhs is the
// result, dy / 2 where the operands are equal, 0 where the other operand is
// (a NaN operand passes dy to both). Result: the broadcast shape.
class NN_MinMaxGradOp<string mnemonic, string desc> : NN_Op<mnemonic, [Pure,
    NN_Cost, NN_Fusible]> {
  let summary = "gradient of " # desc # " with respect to its first operand";
  let arguments = (ins NN_F32Tensor:$lhs, NN_F32Tensor:$rhs,
                   NN_F32Tensor:$grad);
  let results = (outs NN_F32Tensor:$output);
  let assemblyFormat = [{
    $lhs `,` $rhs `,` $grad attr-dict `:` type($lhs) `,` type($rhs) `,` type($grad) `->` type($output)
  }];
  let hasVerifier = 1;
}

def NN_MaxGradOp : NN_MinMaxGradOp<"max_grad", "max">;
def NN_MinGradOp : NN_MinMaxGradOp<"min_grad", "min">;

#endif // GPIPE_NN_OPS_ELEMENTWISE
