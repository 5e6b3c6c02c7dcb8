// Ops of the nn dialect: convolutions (1-D and 2-D) and their gradients.
#ifndef GPIPE_NN_OPS_CONV
#define GPIPE_NN_OPS_CONV

// The attributes every op of the family carries, with one entry per spatial
// dim (S = rank - 2, 1 or 2); `pads` holds the S begins, then the S ends
// (ONNX's order).
defvar NN_ConvAttrs = (ins DenseI64ArrayAttr:$strides,
    DenseI64ArrayAttr:$pads, DenseI64ArrayAttr:$dilations,
    DefaultValuedAttr<I64Attr, "1">:$group);

def NN_ConvOp : NN_Op<"conv", [Pure, NN_Cost, NN_Batch,
    DeclareOpInterfaceMethods<NN_DifferentiableOpInterface>]> {
  let summary = "grouped, strided, padded, dilated convolution (ONNX Conv)";
  let description = [{
    x [N, C, spatial...] convolved with w [F, C/group, k...] plus the optional
    bias [F], 1 or 2 spatial dims. Output spatial dim i is
    `(in_i + pad_begin_i + pad_end_i - dilation_i * (k_i - 1) - 1) / stride_i
    + 1` (rounded down). Input channels and filters are split into `group`
    groups; group g of the filters sees group g of the channels.
    ```mlir
    %y = nn.conv %x, %w, %b {strides = array<i64: 1, 1>,
        pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>}
        : (tensor<8x3x6x6xf32>, tensor<4x3x3x3xf32>, tensor<4xf32>)
        -> tensor<8x4x6x6xf32>
    ```
  }];
  let arguments = !con((ins NN_F32Tensor:$input, NN_F32Tensor:$weight,
                            Optional<NN_F32Tensor>:$bias),
                       NN_ConvAttrs);
  let results = (outs NN_F32Tensor:$output);
  let assemblyFormat = [{
    $input `,` $weight (`,` $bias^)? attr-dict `:`
    functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def NN_ConvInputGradOp : NN_Op<"conv_input_grad", [Pure, NN_Cost]> {
  let summary = "gradient of nn.conv with respect to its input";
  let description = [{
    dx [N, C, spatial...] (the result type gives the input's shape) from the
    output gradient dy [N, F, out...] and the weight w [F, C/group, k...]:
    the transposed convolution, with the attributes of the forward conv.
  }];
  let arguments = !con((ins NN_F32Tensor:$grad, NN_F32Tensor:$weight),
                       NN_ConvAttrs);
  let results = (outs NN_F32Tensor:$output);
  let assemblyFormat = [{
    $grad `,` $weight attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def NN_ConvWeightGradOp : NN_Op<"conv_weight_grad", [Pure, NN_Cost]> {
  let summary = "gradient of nn.conv with respect to its weight";
  let description = [{
    dw [F, C/group, k...] (the result type gives the weight's shape) from the
    forward input x [N, C, spatial...] and the output gradient dy [N, F,
    out...], summed over N and the output positions.
  }];
  let arguments = !con((ins NN_F32Tensor:$input, NN_F32Tensor:$grad),
                       NN_ConvAttrs);
  let results = (outs NN_F32Tensor:$output);
  let assemblyFormat = [{
    $input `,` $grad attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

#endif // GPIPE_NN_OPS_CONV
