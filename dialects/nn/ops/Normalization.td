// Ops of the nn dialect: normalizations (softmax).
#ifndef GPIPE_NN_OPS_NORMALIZATION
#define GPIPE_NN_OPS_NORMALIZATION

def NN_SoftmaxOp : NN_Op<"softmax", [Pure, SameOperandsAndResultType,
    NN_Cost, NN_Batch,
    DeclareOpInterfaceMethods<NN_DifferentiableOpInterface>]> {
  let summary = "softmax along one axis";
  let description = [{
    `y = exp(x - max(x)) / sum(exp(x - max(x)))` along `axis` (0 <= axis <
    rank), for every index of the other axes (ONNX Softmax, opset 13 and
    later; the importer reshapes the older flattening form into this one).
    ```mlir
    %y = nn.softmax %x {axis = 1 : i64} : tensor<8x10xf32>
    ```
  }];
  let arguments = (ins NN_F32Tensor:$input, I64Attr:$axis);
  let results = (outs NN_F32Tensor:$output);
  let assemblyFormat = "$input attr-dict `:` type($input)";
  let hasVerifier = 1;
}

def NN_SoftmaxGradOp : NN_Op<"softmax_grad", [Pure, SameOperandsAndResultType,
    NN_Cost]> {
  let summary = "gradient of softmax, from its output";
  let description = [{
    `dx = y * (dy - sum(dy * y))`, the sum along `axis`, from the softmax's
    output `y` and the incoming gradient `dy` (torch's formula).
  }];
  let arguments = (ins NN_F32Tensor:$value, NN_F32Tensor:$grad, I64Attr:$axis);
  let results = (outs NN_F32Tensor:$output);
  let assemblyFormat = "$value `,` $grad attr-dict `:` type($value)";
  let hasVerifier = 1;
}

#endif // GPIPE_NN_OPS_NORMALIZATION
