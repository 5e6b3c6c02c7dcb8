// Ops of the nn dialect: GEMM.
#ifndef GPIPE_NN_OPS_GEMM
#define GPIPE_NN_OPS_GEMM

def NN_GemmOp : NN_Op<"gemm", [Pure,
    NN_Cost,
    NN_Batch,
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

def NN_BatchMatMulOp : NN_Op<"batch_matmul", [Pure,
    NN_Cost,
    NN_Batch,
    DeclareOpInterfaceMethods<NN_DifferentiableOpInterface>]> {
  let summary = "batched matrix product with broadcast batch dimensions";
  let description = [{
    ONNX MatMul on operands of rank >= 3 (or rank 2 against rank >= 3) that is
    not one plain GEMM: A [..., M, K] and B [..., K, N] (op(A) / op(B): the
    last two dims swapped when transA / transB is set, no data moves), the
    batch dims (all but the last two) broadcast numpy-style, the result is
    [broadcast batch..., M, N].
    ```mlir
    %s = nn.batch_matmul %q, %k {transB = true}
        : (tensor<8x2x4x4xf32>, tensor<8x2x4x4xf32>) -> tensor<8x2x4x4xf32>
    ```
  }];
  let arguments = (ins NN_F32Tensor:$a, NN_F32Tensor:$b,
                   DefaultValuedAttr<BoolAttr, "false">:$transA,
                   DefaultValuedAttr<BoolAttr, "false">:$transB);
  let results = (outs NN_F32Tensor:$output);
  let assemblyFormat = [{
    $a `,` $b attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The result's batch dims (all but the last two).
    llvm::ArrayRef<int64_t> getBatchShape() {
      return llvm::cast<mlir::RankedTensorType>(getOutput().getType())
          .getShape().drop_back(2);
    }
  }];
}

#endif // GPIPE_NN_OPS_GEMM
