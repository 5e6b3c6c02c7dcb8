// Ops of the nn dialect: fused scaled dot-product attention and its gradient.
#ifndef GPIPE_NN_OPS_ATTENTION
#define GPIPE_NN_OPS_ATTENTION

def NN_AttentionOp : NN_Op<"attention", [Pure, NN_Cost, NN_Batch,
    DeclareOpInterfaceMethods<NN_DifferentiableOpInterface>]> {
  let summary = "scaled dot-product attention with an optional constant mask";
  let description = [{
    For every index of the leading (batch, head) axes `*`:
    `out = softmax(where(mask != 0, -inf, scale * q k^T), -1) v`, with q
    [*, Tq, d], k [*, Tk, d], v [*, Tk, dv] and the optional `mask` [Tq, Tk]
    (shared by every leading index: a non-zero entry masks the score, as
    torch's `masked_fill(causal == 0, -inf)`). The second result `lse`
    [*, Tq] is each score row's log-sum-exp (after scale and mask), which
    the gradient reads to recompute the probabilities instead of storing the
    [Tq, Tk] matrix. A fully masked row gives NaN, as the unfused softmax.
    `gpipe-fuse-attention` writes it.
    ```mlir
    %o, %lse = nn.attention %q, %k, %v mask %m {scale = 0.5 : f32}
        : (tensor<8x2x4x4xf32>, tensor<8x2x4x4xf32>, tensor<8x2x4x4xf32>,
           tensor<4x4xf32>) -> (tensor<8x2x4x4xf32>, tensor<8x2x4xf32>)
    ```
  }];
  let arguments = (ins NN_F32Tensor:$q, NN_F32Tensor:$k, NN_F32Tensor:$v,
                   Optional<NN_F32Tensor>:$mask, F32Attr:$scale);
  let results = (outs NN_F32Tensor:$output, NN_F32Tensor:$lse);
  let assemblyFormat = [{
    $q `,` $k `,` $v (`mask` $mask^)? attr-dict `:`
    functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def NN_AttentionGradOp : NN_Op<"attention_grad", [Pure, NN_Cost,
    AllTypesMatch<["q", "dq"]>, AllTypesMatch<["k", "dk"]>,
    AllTypesMatch<["v", "dv"]>, AllTypesMatch<["output", "dout"]>]> {
  let summary = "gradient of nn.attention with respect to q, k and v";
  let description = [{
    Flash-attention's backward from the forward's operands, its output and
    its `lse`: per leading index, `P = exp(scale * q k^T (masked) - lse)`
    (recomputed), `D = rowsum(dout * out)`, `dv = P^T dout`,
    `dP = dout v^T`, `dS = P * (dP - D)`, `dq = scale * dS k`,
    `dk = scale * dS^T q`.
  }];
  let arguments = (ins NN_F32Tensor:$q, NN_F32Tensor:$k, NN_F32Tensor:$v,
                   Optional<NN_F32Tensor>:$mask, NN_F32Tensor:$output,
                   NN_F32Tensor:$lse, NN_F32Tensor:$dout, F32Attr:$scale);
  let results = (outs NN_F32Tensor:$dq, NN_F32Tensor:$dk, NN_F32Tensor:$dv);
  let assemblyFormat = [{
    $q `,` $k `,` $v (`mask` $mask^)? `,` $output `,` $lse `,` $dout
    attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

#endif // GPIPE_NN_OPS_ATTENTION
