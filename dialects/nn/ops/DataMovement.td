// Ops of the nn dialect: data movement (reshape, transpose, concat, slice,
// reduce_to, reduce_max, broadcast_to, gather, scatter_add).
#ifndef GPIPE_NN_OPS_DATA_MOVEMENT
#define GPIPE_NN_OPS_DATA_MOVEMENT

//===----------------------------------------------------------------------===//
// Data movement.
//===----------------------------------------------------------------------===//

// No BatchSplittableOpInterface: gpipe-microbatch applies the reshape rule
// itself (nn::reshapeBatchAxis), since it also tracks batch blocks smaller
// than their axis, which the interface cannot express.
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
    NN_Batch,
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
    NN_Batch,
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
    NN_Cost, NN_Batch,
    DeclareOpInterfaceMethods<NN_DifferentiableOpInterface>]> {
  let summary = "a contiguous range [start, start + size) along one axis";
  let description = [{
    The size along `axis` is the result's (ONNX Slice with step 1, one op per
    sliced axis; the gradient of nn.concat).
  }];
  let arguments = (ins NN_NumTensor:$input, I64Attr:$axis, I64Attr:$start);
  let results = (outs NN_NumTensor:$output);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($output)";
  let hasVerifier = 1;
}

def NN_ReduceToOp : NN_Op<"reduce_to", [Pure,
    NN_Cost, NN_Batch,
    DeclareOpInterfaceMethods<NN_DifferentiableOpInterface>]> {
  let summary = "sums the dimensions that broadcasting the result would add";
  let description = [{
    The reverse of numpy broadcasting: the result's shape must broadcast to
    the input's; the input is summed over every broadcast dimension. Used for
    the gradients of broadcasting ops, and for ONNX ReduceSum and ReduceMean
    (with the reduced dimensions kept as 1; the importer reshapes them away
    when `keepdims = 0`).
    ```mlir
    %s = nn.reduce_to %x : tensor<8x4x5xf32> -> tensor<8x1x5xf32>
    ```
  }];
  let arguments = (ins NN_F32Tensor:$input);
  let results = (outs NN_F32Tensor:$output);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($output)";
  let hasVerifier = 1;
}

def NN_ReduceMaxOp : NN_Op<"reduce_max", [Pure,
    NN_Cost, NN_Batch,
    DeclareOpInterfaceMethods<NN_DifferentiableOpInterface>]> {
  let summary = "the maximum over the dimensions that broadcasting the result would add";
  let description = [{
    The shapes of nn.reduce_to (the result's shape broadcasts to the
    input's), the maximum instead of the sum: ONNX ReduceMax (torch's
    `amax`) with the reduced dimensions kept as 1. A NaN in the reduced
    elements gives NaN. The gradient is spread evenly over the elements that
    equal the maximum (torch's `amax` gradient).
    ```mlir
    %m = nn.reduce_max %x : tensor<8x4x5xf32> -> tensor<8x1x5xf32>
    ```
  }];
  let arguments = (ins NN_F32Tensor:$input);
  let results = (outs NN_F32Tensor:$output);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($output)";
  let hasVerifier = 1;
}

def NN_BroadcastToOp : NN_Op<"broadcast_to", [Pure,
    NN_Cost, NN_Fusible, NN_Batch,
    DeclareOpInterfaceMethods<NN_DifferentiableOpInterface>]> {
  let summary = "numpy broadcasting of the input to the result's shape";
  let description = [{
    Every element of the result is the input's element at the same index,
    with the input's missing leading dimensions and its size-1 dimensions
    repeated (ONNX Expand; the gradient of nn.reduce_to). Elementwise, so it
    fuses with the elementwise ops around it.
    ```mlir
    %y = nn.broadcast_to %x : tensor<8x1xf32> -> tensor<8x5xf32>
    ```
  }];
  let arguments = (ins NN_F32Tensor:$input);
  let results = (outs NN_F32Tensor:$output);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($output)";
  let hasVerifier = 1;
}

def NN_GatherOp : NN_Op<"gather", [Pure, NN_Cost, NN_Batch,
    DeclareOpInterfaceMethods<NN_DifferentiableOpInterface>]> {
  let summary = "rows of a table at int64 indices (ONNX Gather, axis 0; embeddings)";
  let description = [{
    `output[i..., j...] = table[indices[i...], j...]`: the result's shape is
    the indices' shape followed by the table's dimensions after the first.
    Indices in [-V, 0) count from the end (ONNX semantics), V the table's
    first dimension; the kernels write zeros for an index outside [-V, V)
    (indices read from a data file are checked before, at run time).
    ```mlir
    %e = nn.gather %table, %ids : tensor<50x16xf32>, tensor<4x8xi64> -> tensor<4x8x16xf32>
    ```
  }];
  let arguments = (ins NN_F32Tensor:$table, NN_I64Tensor:$indices);
  let results = (outs NN_F32Tensor:$output);
  let assemblyFormat = [{
    $table `,` $indices attr-dict `:` type($table) `,` type($indices) `->` type($output)
  }];
  let hasVerifier = 1;
}

def NN_ScatterAddOp : NN_Op<"scatter_add", [Pure, NN_Cost]> {
  let summary = "gradient of nn.gather with respect to the table";
  let description = [{
    A zero table of the result's shape, to whose row `indices[i...]` (negative
    ones counted from the end) every row `grad[i...]` is added; repeated
    indices add up, in the order of their positions (deterministic on both
    targets). Indices outside [-V, V) are skipped.
    ```mlir
    %dt = nn.scatter_add %dy, %ids : tensor<4x8x16xf32>, tensor<4x8xi64> -> tensor<50x16xf32>
    ```
  }];
  let arguments = (ins NN_F32Tensor:$grad, NN_I64Tensor:$indices);
  let results = (outs NN_F32Tensor:$output);
  let assemblyFormat = [{
    $grad `,` $indices attr-dict `:` type($grad) `,` type($indices) `->` type($output)
  }];
  let hasVerifier = 1;
}

#endif // GPIPE_NN_OPS_DATA_MOVEMENT
