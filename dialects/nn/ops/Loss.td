// Ops of the nn dialect: losses.
#ifndef GPIPE_NN_OPS_LOSS
#define GPIPE_NN_OPS_LOSS

//===----------------------------------------------------------------------===//
// Loss.
//===----------------------------------------------------------------------===//

def NN_SoftmaxCrossEntropyOp : NN_Op<"softmax_cross_entropy", [Pure,
    NN_Cost,
    NN_Batch,
    DeclareOpInterfaceMethods<NN_DifferentiableOpInterface>]> {
  let summary = "mean softmax cross-entropy over a mini-batch (ONNX SoftmaxCrossEntropyLoss)";
  let description = [{
    logits [N, C], int64 labels [N]. The mean is over the samples whose label
    is not `ignore_index` (when set); it is NaN when every label is ignored.
    With `microbatches = M` (set by `gpipe-microbatch`) the op sees one of M
    micro-batches of a mini-batch, and its result is that micro-batch's share
    of the mini-batch mean: the sum over its samples divided by the
    mini-batch's count of non-ignored labels (N * M without ignore_index).
  }];
  let arguments = (ins NN_F32Tensor:$logits, NN_I64Tensor:$labels,
                   OptionalAttr<I64Attr>:$ignore_index,
                   OptionalAttr<I64Attr>:$microbatches);
  let results = (outs NN_F32Scalar:$loss);
  let assemblyFormat = [{
    $logits `,` $labels attr-dict `:` type($logits) `,` type($labels)
  }];
  let hasVerifier = 1;
}

def NN_SoftmaxCrossEntropyGradOp : NN_Op<"softmax_cross_entropy_grad", [Pure,
    AllTypesMatch<["logits", "output"]>,
    NN_Cost]> {
  let summary = "gradient of nn.softmax_cross_entropy with respect to the logits";
  let arguments = (ins NN_F32Tensor:$logits, NN_I64Tensor:$labels, NN_F32Scalar:$grad,
                   OptionalAttr<I64Attr>:$ignore_index,
                   OptionalAttr<I64Attr>:$microbatches);
  let results = (outs NN_F32Tensor:$output);
  let assemblyFormat = [{
    $logits `,` $labels `,` $grad attr-dict `:` type($logits) `,` type($labels)
  }];
  let hasVerifier = 1;
}

#endif // GPIPE_NN_OPS_LOSS
