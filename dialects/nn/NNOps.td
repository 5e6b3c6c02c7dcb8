// Ops of the nn dialect.
#ifndef GPIPE_NN_OPS
#define GPIPE_NN_OPS

include "dialects/nn/NNDialect.td"
include "dialects/nn/NNInterfaces.td"
include "mlir/IR/OpBase.td"
include "mlir/IR/BuiltinAttributeInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/IR/OpBase.td"

// Ops with their own FLOP count; ops that move no data (views, values) at all.
def NN_Cost : DeclareOpInterfaceMethods<NN_CostOpInterface, ["getFlops"]>;
def NN_FreeCost : DeclareOpInterfaceMethods<NN_CostOpInterface,
                                            ["getFlops", "getBytesAccessed"]>;

def NN_F32Tensor : StaticShapeTensorOf<[F32]>;
def NN_I64Tensor : StaticShapeTensorOf<[I64]>;
def NN_NumTensor : StaticShapeTensorOf<[F32, I64]>;
def NN_F32Scalar : 0DTensorOf<[F32]> {
  let builderCall = "::mlir::RankedTensorType::get({}, $_builder.getF32Type())";
}

//===----------------------------------------------------------------------===//
// Values: parameters and constants.
//===----------------------------------------------------------------------===//

def NN_ParamOp : NN_Op<"param", [NN_FreeCost]> {
  let summary = "a trainable parameter (an ONNX floating-point initializer)";
  let description = [{
    Reads the current value of the named parameter at the start of a training
    step. The name is the ONNX initializer's name; it is unique per function.
    ```mlir
    %w = nn.param "fc1.weight" : tensor<32x16xf32>
    ```
  }];
  let arguments = (ins StrAttr:$name);
  let results = (outs NN_F32Tensor:$output);
  let assemblyFormat = "$name attr-dict `:` type($output)";
  let hasVerifier = 1;
}

def NN_ConstantOp : NN_Op<"constant", [ConstantLike, Pure,
    AllTypesMatch<["value", "output"]>, NN_FreeCost]> {
  let summary = "a constant tensor (ONNX Constant, integer initializers)";
  let arguments = (ins ElementsAttr:$value);
  let results = (outs NN_NumTensor:$output);
  let assemblyFormat = "attr-dict $value";
  let hasFolder = 1;
}

def NN_ParamGradOp : NN_Op<"param_grad", [AllTypesMatch<["param", "grad"]>]> {
  let summary = "marks the gradient of the loss with respect to a parameter";
  let description = [{
    Produced by `gpipe-autodiff`, consumed by `gpipe-optimizer`. `$param` must
    be the result of an `nn.param`; `$grad` has its type.
  }];
  let arguments = (ins NN_F32Tensor:$param, NN_F32Tensor:$grad);
  let assemblyFormat = "$param `,` $grad attr-dict `:` type($param)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Compute.
//===----------------------------------------------------------------------===//

def NN_GemmOp : NN_Op<"gemm", [Pure,
    NN_Cost,
    DeclareOpInterfaceMethods<NN_DifferentiableOpInterface>]> {
  let summary = "general matrix multiply: alpha * op(A) * op(B) + beta * C";
  let description = [{
    ONNX Gemm (and 2-D MatMul). A and B are rank 2; op() transposes when
    transA / transB is set; the optional C broadcasts (numpy rules) to [M, N].
  }];
  let arguments = (ins NN_F32Tensor:$a, NN_F32Tensor:$b, Optional<NN_F32Tensor>:$c,
                   DefaultValuedAttr<BoolAttr, "false">:$transA,
                   DefaultValuedAttr<BoolAttr, "false">:$transB,
                   DefaultValuedAttr<F32Attr, "1.0f">:$alpha,
                   DefaultValuedAttr<F32Attr, "1.0f">:$beta);
  let results = (outs NN_F32Tensor:$output);
  let assemblyFormat = [{
    $a `,` $b (`,` $c^)? attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

class NN_BinaryOp<string mnemonic, string desc> : NN_Op<mnemonic, [Pure,
    NN_Cost,
    DeclareOpInterfaceMethods<NN_DifferentiableOpInterface>]> {
  let summary = "elementwise " # desc # " with numpy broadcasting";
  let arguments = (ins NN_F32Tensor:$lhs, NN_F32Tensor:$rhs);
  let results = (outs NN_F32Tensor:$output);
  let assemblyFormat = [{
    $lhs `,` $rhs attr-dict `:` type($lhs) `,` type($rhs) `->` type($output)
  }];
  let hasVerifier = 1;
}

def NN_AddOp : NN_BinaryOp<"add", "addition">;
def NN_SubOp : NN_BinaryOp<"sub", "subtraction">;
def NN_MulOp : NN_BinaryOp<"mul", "multiplication">;
def NN_DivOp : NN_BinaryOp<"div", "division">;

class NN_UnaryOp<string mnemonic, string desc> : NN_Op<mnemonic, [Pure,
    SameOperandsAndResultType,
    NN_Cost,
    DeclareOpInterfaceMethods<NN_DifferentiableOpInterface>]> {
  let summary = "elementwise " # desc;
  let arguments = (ins NN_F32Tensor:$input);
  let results = (outs NN_F32Tensor:$output);
  let assemblyFormat = "$input attr-dict `:` type($input)";
}

def NN_NegOp : NN_UnaryOp<"neg", "negation">;
def NN_ReluOp : NN_UnaryOp<"relu", "max(x, 0)">;
def NN_TanhOp : NN_UnaryOp<"tanh", "hyperbolic tangent">;
def NN_SigmoidOp : NN_UnaryOp<"sigmoid", "logistic sigmoid">;
def NN_ErfOp : NN_UnaryOp<"erf", "error function">;

// Gradient ops of the activations: fused `dy * f'(...)`.
class NN_ActGradOp<string mnemonic, string desc, string from> : NN_Op<mnemonic,
    [Pure, SameOperandsAndResultType,
     NN_Cost]> {
  let summary = "gradient of " # desc # ", computed from its " # from;
  let arguments = (ins NN_F32Tensor:$value, NN_F32Tensor:$grad);
  let results = (outs NN_F32Tensor:$output);
  let assemblyFormat = "$value `,` $grad attr-dict `:` type($value)";
}

def NN_ReluGradOp : NN_ActGradOp<"relu_grad", "relu", "output">;
def NN_TanhGradOp : NN_ActGradOp<"tanh_grad", "tanh", "output">;
def NN_SigmoidGradOp : NN_ActGradOp<"sigmoid_grad", "sigmoid", "output">;
def NN_ErfGradOp : NN_ActGradOp<"erf_grad", "erf", "input">;

//===----------------------------------------------------------------------===//
// Data movement.
//===----------------------------------------------------------------------===//

def NN_ReshapeOp : NN_Op<"reshape", [Pure, NN_FreeCost,
    DeclareOpInterfaceMethods<NN_DifferentiableOpInterface>]> {
  let summary = "reinterprets the shape (ONNX Reshape, Flatten, Squeeze, Unsqueeze)";
  let arguments = (ins NN_NumTensor:$input);
  let results = (outs NN_NumTensor:$output);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($output)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

def NN_TransposeOp : NN_Op<"transpose", [Pure, NN_Cost,
    DeclareOpInterfaceMethods<NN_DifferentiableOpInterface>]> {
  let summary = "permutes the dimensions (ONNX Transpose)";
  let description = [{
    Result dimension i is input dimension `permutation[i]`; `permutation` is a
    permutation of [0, rank).
  }];
  let arguments = (ins NN_NumTensor:$input, DenseI64ArrayAttr:$permutation);
  let results = (outs NN_NumTensor:$output);
  let assemblyFormat = [{
    $input `,` $permutation attr-dict `:` type($input) `->` type($output)
  }];
  let hasVerifier = 1;
}

def NN_ConcatOp : NN_Op<"concat", [Pure,
    NN_Cost,
    DeclareOpInterfaceMethods<NN_DifferentiableOpInterface>]> {
  let summary = "concatenation along one axis";
  let arguments = (ins Variadic<NN_NumTensor>:$inputs, I64Attr:$axis);
  let results = (outs NN_NumTensor:$output);
  let assemblyFormat = [{
    $inputs attr-dict `:` functional-type($inputs, results)
  }];
  let hasVerifier = 1;
}

def NN_SliceOp : NN_Op<"slice", [Pure,
    NN_Cost]> {
  let summary = "a contiguous range [start, start + size) along one axis";
  let description = [{ The size along `axis` is the result's. }];
  let arguments = (ins NN_NumTensor:$input, I64Attr:$axis, I64Attr:$start);
  let results = (outs NN_NumTensor:$output);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($output)";
  let hasVerifier = 1;
}

def NN_ReduceToOp : NN_Op<"reduce_to", [Pure,
    NN_Cost]> {
  let summary = "sums the dimensions that broadcasting the result would add";
  let description = [{
    The reverse of numpy broadcasting: the result's shape must broadcast to
    the input's; the input is summed over every broadcast dimension. Used for
    the gradients of broadcasting ops.
  }];
  let arguments = (ins NN_F32Tensor:$input);
  let results = (outs NN_F32Tensor:$output);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($output)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Loss.
//===----------------------------------------------------------------------===//

def NN_SoftmaxCrossEntropyOp : NN_Op<"softmax_cross_entropy", [Pure,
    NN_Cost,
    DeclareOpInterfaceMethods<NN_DifferentiableOpInterface>]> {
  let summary = "mean softmax cross-entropy over a mini-batch (ONNX SoftmaxCrossEntropyLoss)";
  let description = [{
    logits [N, C], int64 labels [N]. The mean is over the samples whose label
    is not `ignore_index` (when set); it is NaN when every label is ignored.
    With `microbatches = M` (set by `gpipe-microbatch`) the op sees one of M
    micro-batches of a mini-batch, and its result is that micro-batch's share
    of the mini-batch mean: the sum over its samples divided by the
    mini-batch's count of non-ignored labels (N * M without ignore_index).
  }];
  let arguments = (ins NN_F32Tensor:$logits, NN_I64Tensor:$labels,
                   OptionalAttr<I64Attr>:$ignore_index,
                   OptionalAttr<I64Attr>:$microbatches);
  let results = (outs NN_F32Scalar:$loss);
  let assemblyFormat = [{
    $logits `,` $labels attr-dict `:` type($logits) `,` type($labels)
  }];
  let hasVerifier = 1;
}

def NN_SoftmaxCrossEntropyGradOp : NN_Op<"softmax_cross_entropy_grad", [Pure,
    AllTypesMatch<["logits", "output"]>,
    NN_Cost]> {
  let summary = "gradient of nn.softmax_cross_entropy with respect to the logits";
  let arguments = (ins NN_F32Tensor:$logits, NN_I64Tensor:$labels, NN_F32Scalar:$grad,
                   OptionalAttr<I64Attr>:$ignore_index,
                   OptionalAttr<I64Attr>:$microbatches);
  let results = (outs NN_F32Tensor:$output);
  let assemblyFormat = [{
    $logits `,` $labels `,` $grad attr-dict `:` type($logits) `,` type($labels)
  }];
  let hasVerifier = 1;
}

#endif // GPIPE_NN_OPS
