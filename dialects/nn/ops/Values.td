// Ops of the nn dialect: values (parameters, constants, parameter gradients).
#ifndef GPIPE_NN_OPS_VALUES
#define GPIPE_NN_OPS_VALUES

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

#endif // GPIPE_NN_OPS_VALUES
