// Ops of the nn dialect: values (parameter declarations and values,
// constants, parameter gradients).
#ifndef GPIPE_NN_OPS_VALUES
#define GPIPE_NN_OPS_VALUES

//===----------------------------------------------------------------------===//
// Values: parameters and constants.
//===----------------------------------------------------------------------===//

def NN_ParameterOp : NN_Op<"parameter", [Symbol, HasParent<"::mlir::ModuleOp">]> {
  let summary = "declares a parameter (an ONNX floating-point initializer)";
  let description = [{
    A module-level symbol, one per parameter, named by its ONNX initializer
    (`@"fc1.weight"`), with its type. Everything that refers to a parameter
    names this symbol: `nn.param` (its value), `pipe.accumulate_grad` and
    `pipe.accumulated_grad` (its gradient accumulator); their verifiers check
    that it exists and that the types agree. Its initial value is the
    model's initializer, written by gpipe-compile to `weights/`.

    With `state`, the tensor is model state that the forward updates and the
    optimizer never touches (torch's buffers: BatchNorm's running mean and
    variance, written by `nn.update_running_stats`): no gradient is taken
    with respect to it. It is stored, loaded and saved (`--save-onnx`) like
    a parameter. With `frozen` (`gpipe-compile --freeze`), a parameter the
    model reads but that is not trained (torch's `requires_grad = False`):
    no gradient, no optimizer state, saved unchanged. Not both.
    ```mlir
    nn.parameter @"fc1.weight" : tensor<32x16xf32>
    nn.parameter @"bn1.running_mean" state : tensor<32xf32>
    nn.parameter @"embed.weight" frozen : tensor<100x16xf32>
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name,
                       TypeAttrOf<NN_F32Tensor>:$type, UnitAttr:$state,
                       UnitAttr:$frozen);
  let assemblyFormat =
      "$sym_name (`state` $state^)? (`frozen` $frozen^)? attr-dict `:` $type";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    ::mlir::RankedTensorType getTensorType() {
      return ::llvm::cast<::mlir::RankedTensorType>(getType());
    }
  }];
}

def NN_ParamOp : NN_Op<"param", [NN_FreeCost,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "the value of a trainable parameter";
  let description = [{
    Reads the current value of the parameter `nn.parameter` `$name` declares
    at the start of a training step; its type is the declaration's.
    ```mlir
    %w = nn.param @"fc1.weight" : tensor<32x16xf32>
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$name);
  let results = (outs NN_F32Tensor:$output);
  let assemblyFormat = "$name attr-dict `:` type($output)";
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
