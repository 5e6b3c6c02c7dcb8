// Ops of the nn dialect: normalizations (softmax, log-softmax, layer
// normalization).
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

def NN_LogSoftmaxOp : NN_Op<"log_softmax", [Pure, SameOperandsAndResultType,
    NN_Cost, NN_Batch,
    DeclareOpInterfaceMethods<NN_DifferentiableOpInterface>]> {
  let summary = "logarithm of the softmax along one axis";
  let description = [{
    `y = x - (max(x) + log(sum(exp(x - max(x)))))` along `axis` (0 <= axis <
    rank), for every index of the other axes, in one numerically stable pass
    (ONNX LogSoftmax, opset 13 semantics).
    ```mlir
    %y = nn.log_softmax %x {axis = 1 : i64} : tensor<8x10xf32>
    ```
  }];
  let arguments = (ins NN_F32Tensor:$input, I64Attr:$axis);
  let results = (outs NN_F32Tensor:$output);
  let assemblyFormat = "$input attr-dict `:` type($input)";
  let hasVerifier = 1;
}

def NN_LogSoftmaxGradOp : NN_Op<"log_softmax_grad", [Pure,
    SameOperandsAndResultType, NN_Cost]> {
  let summary = "gradient of log_softmax, from its output";
  let description = [{
    `dx = dy - exp(y) * sum(dy)`, the sum along `axis`, from the
    log-softmax's output `y` and the incoming gradient `dy` (torch's formula).
  }];
  let arguments = (ins NN_F32Tensor:$value, NN_F32Tensor:$grad, I64Attr:$axis);
  let results = (outs NN_F32Tensor:$output);
  let assemblyFormat = "$value `,` $grad attr-dict `:` type($value)";
  let hasVerifier = 1;
}

def NN_LayerNormOp : NN_Op<"layer_norm", [Pure, NN_Cost, NN_Batch,
    AllTypesMatch<["input", "output"]>,
    AllTypesMatch<["mean", "inv_std_dev"]>,
    OptionalTypesMatchWith<"bias has the scale's type", "scale", "bias",
                           "$_self">,
    DeclareOpInterfaceMethods<NN_DifferentiableOpInterface>]> {
  let summary = "layer normalization over the trailing axes [axis, rank)";
  let description = [{
    For every index of the leading axes [0, axis) (a row), over the
    normalized axes [axis, rank) (its `n` elements):
    `y = (x - mean) * inv_std_dev * scale + bias` with `mean` the row's mean
    and `inv_std_dev = 1 / sqrt(var + epsilon)` (the biased variance), as
    ONNX LayerNormalization (opset 17, stash_type float32). `scale` and the
    optional `bias` have the normalized shape `x.shape[axis:]`. The results
    `mean` and `inv_std_dev` have the leading shape `x.shape[:axis]` (rank
    `axis`, no trailing 1s: ONNX's optional outputs Mean and InvStdDev are
    their reshape to [.., 1, 1]); the gradient reads them.
    ```mlir
    %y, %m, %r = nn.layer_norm %x, %s, %b {axis = 1 : i64, epsilon = 1.0e-05 : f32}
        : tensor<8x32xf32>, tensor<32xf32> -> tensor<8xf32>
    ```
  }];
  let arguments = (ins NN_F32Tensor:$input, NN_F32Tensor:$scale,
                   Optional<NN_F32Tensor>:$bias, I64Attr:$axis,
                   F32Attr:$epsilon);
  let results = (outs NN_F32Tensor:$output, NN_F32Tensor:$mean,
                      NN_F32Tensor:$inv_std_dev);
  let assemblyFormat = [{
    $input `,` $scale (`,` $bias^)? attr-dict `:` type($input) `,`
    type($scale) `->` type($mean)
  }];
  let hasVerifier = 1;
}

def NN_LayerNormGradOp : NN_Op<"layer_norm_grad", [Pure, NN_Cost,
    AllTypesMatch<["input", "grad", "output"]>,
    AllTypesMatch<["mean", "inv_std_dev"]>]> {
  let summary = "gradient of nn.layer_norm with respect to its input";
  let description = [{
    `dx = inv_std_dev * (g - mean(g) - xhat * mean(g * xhat))` per row, with
    `g = dy * scale` and `xhat = (x - mean) * inv_std_dev` (torch's formula),
    from the forward input `x`, the saved `mean` and `inv_std_dev` (shape
    `x.shape[:axis]`), the `scale` (shape `x.shape[axis:]`) and `dy`.
  }];
  let arguments = (ins NN_F32Tensor:$input, NN_F32Tensor:$mean,
                   NN_F32Tensor:$inv_std_dev, NN_F32Tensor:$scale,
                   NN_F32Tensor:$grad, I64Attr:$axis);
  let results = (outs NN_F32Tensor:$output);
  let assemblyFormat = [{
    $input `,` $mean `,` $inv_std_dev `,` $scale `,` $grad attr-dict `:`
    type($input) `,` type($mean) `,` type($scale)
  }];
  let hasVerifier = 1;
}

def NN_LayerNormScaleGradOp : NN_Op<"layer_norm_scale_grad", [Pure, NN_Cost,
    AllTypesMatch<["input", "grad"]>,
    AllTypesMatch<["mean", "inv_std_dev"]>]> {
  let summary = "gradient of nn.layer_norm with respect to its scale";
  let description = [{
    `dscale = sum over the rows of dy * xhat`, `xhat = (x - mean) *
    inv_std_dev`; the result has the normalized shape `x.shape[axis:]`. (The
    bias's gradient, the sum of `dy` over the rows, is an `nn.reduce_to`.)
  }];
  let arguments = (ins NN_F32Tensor:$input, NN_F32Tensor:$mean,
                   NN_F32Tensor:$inv_std_dev, NN_F32Tensor:$grad,
                   I64Attr:$axis);
  let results = (outs NN_F32Tensor:$output);
  let assemblyFormat = [{
    $input `,` $mean `,` $inv_std_dev `,` $grad attr-dict `:` type($input)
    `,` type($mean) `->` type($output)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Dropout
//===----------------------------------------------------------------------===//

def NN_DropoutOp : NN_Op<"dropout", [Pure, SameOperandsAndResultType,
    NN_Cost, NN_Batch,
    DeclareOpInterfaceMethods<NN_DifferentiableOpInterface>]> {
  let summary = "inverted dropout with a counter-based mask";
  let description = [{
    `y = keep ? x / (1 - ratio) : 0`, where `keep` is decided per element by
    a counter-based hash of (`key`, the optimizer step, the element's index in
    the mini-batch's tensor): the same element of the same step always draws
    the same bit, so a recomputed forward (remat) and the gradient
    (nn.dropout_grad, which redraws the mask instead of storing it) see the
    first forward's mask, and no stage count or micro-batch split changes it.
    `key` mixes the `--seed` and the ONNX node's name.
    ```mlir
    %y = nn.dropout %x {key = 42 : i64, ratio = 1.000000e-01 : f32} : tensor<8x16xf32>
    ```
  }];
  let arguments = (ins NN_F32Tensor:$input, F32Attr:$ratio, I64Attr:$key);
  let results = (outs NN_F32Tensor:$output);
  let assemblyFormat = "$input attr-dict `:` type($input)";
  let hasVerifier = 1;
}

def NN_DropoutGradOp : NN_Op<"dropout_grad", [Pure, SameOperandsAndResultType,
    NN_Cost]> {
  let summary = "gradient of nn.dropout: dy through the same mask, scaled";
  let arguments = (ins NN_F32Tensor:$grad, F32Attr:$ratio, I64Attr:$key);
  let results = (outs NN_F32Tensor:$output);
  let assemblyFormat = "$grad attr-dict `:` type($grad)";
  let hasVerifier = 1;
}

#endif // GPIPE_NN_OPS_NORMALIZATION
