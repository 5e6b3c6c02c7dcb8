// Ops of the nn dialect: normalizations (softmax, log-softmax, layer and batch
// normalization, dropout).
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
// Batch normalization (training mode)
//===----------------------------------------------------------------------===//

def NN_BatchNormOp : NN_Op<"batch_norm", [Pure, NN_Cost, NN_Batch,
    AllTypesMatch<["input", "output"]>,
    AllTypesMatch<["scale", "bias", "mean", "var"]>,
    DeclareOpInterfaceMethods<NN_DifferentiableOpInterface>]> {
  let summary = "batch normalization in training mode (batch statistics)";
  let description = [{
    For `x` of shape [N, C, D1, ...] (rank >= 2), per channel c over its
    N * D1 * ... elements: `mean` and `var` (the biased variance), and
    `y = (x - mean) / sqrt(var + epsilon) * scale + bias` (ONNX
    BatchNormalization with training_mode = 1, torch's BatchNorm in train
    mode). `scale`, `bias`, `mean` and `var` have shape [C]. After
    `gpipe-microbatch` the statistics are those of one micro-batch (GPipe's
    semantics): the op is run once per micro-batch. The running statistics are
    updated by `nn.update_running_stats`, which reads `mean` and `var`.
    ```mlir
    %y, %mean, %var = nn.batch_norm %x, %scale, %bias {epsilon = 1.0e-05 : f32}
        : tensor<8x16x4x4xf32>, tensor<16xf32>
    ```
  }];
  let arguments = (ins NN_F32Tensor:$input, NN_F32Tensor:$scale,
                   NN_F32Tensor:$bias, F32Attr:$epsilon);
  let results = (outs NN_F32Tensor:$output, NN_F32Tensor:$mean,
                      NN_F32Tensor:$var);
  let assemblyFormat = [{
    $input `,` $scale `,` $bias attr-dict `:` type($input) `,` type($scale)
  }];
  let hasVerifier = 1;
}

def NN_BatchNormGradOp : NN_Op<"batch_norm_grad", [Pure, NN_Cost,
    AllTypesMatch<["input", "grad", "input_grad"]>,
    AllTypesMatch<["mean", "var", "scale", "scale_grad", "bias_grad"]>]> {
  let summary = "gradients of nn.batch_norm (input, scale and bias)";
  let description = [{
    From the forward input `x`, the saved batch `mean` and `var`, the
    `scale` and `dy`, per channel over its `count` = N * D1 * ... elements,
    with `inv_std = 1 / sqrt(var + epsilon)` and `xhat = (x - mean) *
    inv_std`: `bias_grad = sum(dy)`, `scale_grad = sum(dy * xhat)` and
    `input_grad = scale * inv_std * (dy - bias_grad / count - xhat *
    scale_grad / count)` (torch's formulas; the statistics are constants of
    the batch, so their own dependence on x is in the two sums).
  }];
  let arguments = (ins NN_F32Tensor:$input, NN_F32Tensor:$mean,
                   NN_F32Tensor:$var, NN_F32Tensor:$scale,
                   NN_F32Tensor:$grad, F32Attr:$epsilon);
  let results = (outs NN_F32Tensor:$input_grad, NN_F32Tensor:$scale_grad,
                      NN_F32Tensor:$bias_grad);
  let assemblyFormat = [{
    $input `,` $mean `,` $var `,` $scale `,` $grad attr-dict `:`
    type($input) `,` type($scale)
  }];
  let hasVerifier = 1;
}

def NN_UpdateRunningStatsOp : NN_Op<"update_running_stats", [NN_Cost,
    AllTypesMatch<["running_mean", "running_var", "mean", "var"]>]> {
  let summary = "updates BatchNorm's running statistics in place";
  let description = [{
    `$running_mean` and `$running_var` are `nn.param` results of `state`
    parameters (`nn.parameter ... state`); `$mean` and `$var` are an
    `nn.batch_norm`'s batch statistics, each over `count` elements per
    channel. In ONNX's convention for `momentum` (torch's momentum is
    1 - momentum), with the unbiased variance as torch:
    `running_mean = momentum * running_mean + (1 - momentum) * mean`,
    `running_var = momentum * running_var + (1 - momentum) * var * count /
    (count - 1)`. With `microbatches` = M > 1 (`--batchnorm deferred`) the
    op keeps the statistics of the step's M micro-batches (a state buffer of
    2 * M * C floats) and the last micro-batch applies the update once, with
    the mean and biased variance of all M * count elements (the variance of
    the union: the mean of the variances plus the variance of the means).
    Runs once per micro-batch, in the forward, in micro-batch order; a
    recomputed forward (remat) does not repeat it. The new values are what
    the running statistics read next.
    ```mlir
    nn.update_running_stats %rm, %rv, %mean, %var {count = 128 : i64,
        momentum = 0.9 : f32} : tensor<16xf32>
    ```
  }];
  let arguments = (ins NN_F32Tensor:$running_mean, NN_F32Tensor:$running_var,
                   NN_F32Tensor:$mean, NN_F32Tensor:$var, F32Attr:$momentum,
                   I64Attr:$count,
                   DefaultValuedAttr<I64Attr, "1">:$microbatches);
  let assemblyFormat = [{
    $running_mean `,` $running_var `,` $mean `,` $var attr-dict `:`
    type($mean)
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
