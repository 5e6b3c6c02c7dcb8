// Ops of the nn dialect: pooling over the spatial axes of [N, C, spatial..]
// (1-D and 2-D windows) and constant padding.
#ifndef GPIPE_NN_OPS_POOL
#define GPIPE_NN_OPS_POOL

// The window of a pooling op: per spatial axis its size, stride, dilation,
// and the padding before (pads[0..S)) and after (pads[S..2S)) the axis; the
// output's spatial size follows from them (floor, or ceil with `ceil_mode`,
// the last window starting inside the input or its leading padding, as
// torch and ONNX).
defvar NN_PoolWindowArgs = (ins DenseI64ArrayAttr:$kernel_shape,
    DenseI64ArrayAttr:$strides, DenseI64ArrayAttr:$pads,
    DenseI64ArrayAttr:$dilations, UnitAttr:$ceil_mode);

def NN_MaxPoolOp : NN_Op<"max_pool", [Pure, NN_Cost, NN_Batch,
    DeclareOpInterfaceMethods<NN_DifferentiableOpInterface>]> {
  let summary = "maximum over a window, with the position of the maximum";
  let description = [{
    For every output position of every [n, c] plane of `input` (rank 3: 1-D,
    rank 4: 2-D windows), the maximum of the window's input elements
    (padding never wins) and, in `indices`, the flat index of the first
    maximum in the window's scan order inside the input plane (h * W + w),
    as torch's max_pool returns it; NaN is the maximum. The gradient scatters
    into those positions.
    ```mlir
    %y, %i = nn.max_pool %x {kernel_shape = array<i64: 2, 2>,
        strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>,
        dilations = array<i64: 1, 1>} : tensor<4x2x8x8xf32>
        -> tensor<4x2x4x4xf32>, tensor<4x2x4x4xi64>
    ```
  }];
  let arguments = !con((ins NN_F32Tensor:$input), NN_PoolWindowArgs);
  let results = (outs NN_F32Tensor:$output, NN_I64Tensor:$indices);
  let assemblyFormat = [{
    $input attr-dict `:` type($input) `->` type($output) `,` type($indices)
  }];
  let hasVerifier = 1;
  let builders = [
    OpBuilder<(ins "::mlir::Value":$input, "::mlir::RankedTensorType":$outType,
      "::llvm::ArrayRef<int64_t>":$kernel_shape,
      "::llvm::ArrayRef<int64_t>":$strides, "::llvm::ArrayRef<int64_t>":$pads,
      "::llvm::ArrayRef<int64_t>":$dilations, "bool":$ceil_mode), [{
      build($_builder, $_state, outType,
            ::mlir::RankedTensorType::get(outType.getShape(),
                                          $_builder.getI64Type()),
            input, kernel_shape, strides, pads, dilations, ceil_mode);
    }]>];
}

def NN_MaxPoolGradOp : NN_Op<"max_pool_grad", [Pure, NN_Cost]> {
  let summary = "gradient of nn.max_pool: dy added at the recorded maxima";
  let description = [{
    `dx` (the pool's input shape) is zero except where `indices` points:
    there it is the sum of the `grad` elements whose maximum it was
    (overlapping windows accumulate).
  }];
  let arguments = (ins NN_I64Tensor:$indices, NN_F32Tensor:$grad);
  let results = (outs NN_F32Tensor:$output);
  let assemblyFormat = [{
    $indices `,` $grad attr-dict `:` type($indices) `,` type($grad) `->`
    type($output)
  }];
  let hasVerifier = 1;
}

def NN_AvgPoolOp : NN_Op<"avg_pool", [Pure, NN_Cost, NN_Batch,
    DeclareOpInterfaceMethods<NN_DifferentiableOpInterface>]> {
  let summary = "mean over a window";
  let description = [{
    The mean of every window of every [n, c] plane (rank 3: 1-D, rank 4:
    2-D). The divisor counts the window's input elements, or with
    `count_include_pad` also its padding, the window clipped to the padded
    input's end (torch's avg_pool; `dilations` must be 1).
    ```mlir
    %y = nn.avg_pool %x {kernel_shape = array<i64: 3, 3>,
        strides = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 1>,
        dilations = array<i64: 1, 1>, ceil_mode} : tensor<4x2x4x4xf32> -> tensor<4x2x3x3xf32>
    ```
  }];
  let arguments = !con((ins NN_F32Tensor:$input), NN_PoolWindowArgs,
                       (ins UnitAttr:$count_include_pad));
  let results = (outs NN_F32Tensor:$output);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($output)";
  let hasVerifier = 1;
}

def NN_AvgPoolGradOp : NN_Op<"avg_pool_grad", [Pure, NN_Cost]> {
  let summary = "gradient of nn.avg_pool";
  let description = [{
    Every `grad` element divided by its window's divisor, added to each input
    element of its window; the attributes are the forward's, the result has
    its input's shape.
  }];
  let arguments = !con((ins NN_F32Tensor:$grad), NN_PoolWindowArgs,
                       (ins UnitAttr:$count_include_pad));
  let results = (outs NN_F32Tensor:$output);
  let assemblyFormat = "$grad attr-dict `:` type($grad) `->` type($output)";
  let hasVerifier = 1;
}

def NN_PadOp : NN_Op<"pad", [Pure, NN_Cost, NN_Batch,
    DeclareOpInterfaceMethods<NN_DifferentiableOpInterface>]> {
  let summary = "constant padding";
  let description = [{
    `pads` holds the elements added before every axis, then those after
    (ONNX Pad's layout, all >= 0); they hold `value` (ONNX Pad, mode
    constant). The gradient slices.
    ```mlir
    %y = nn.pad %x {pads = array<i64: 0, 0, 1, 0, 0, 0, 0, 1>, value = 5.0e-01 : f32}
        : tensor<4x2x3x3xf32> -> tensor<4x2x4x4xf32>
    ```
  }];
  let arguments = (ins NN_F32Tensor:$input, DenseI64ArrayAttr:$pads,
                   F32Attr:$value);
  let results = (outs NN_F32Tensor:$output);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($output)";
  let hasVerifier = 1;
}

#endif // GPIPE_NN_OPS_POOL
