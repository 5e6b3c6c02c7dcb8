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

#endif // GPIPE_NN_OPS_GEMM
