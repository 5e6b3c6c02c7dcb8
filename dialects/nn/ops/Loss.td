// Ops of the nn dialect: losses.
#ifndef GPIPE_NN_OPS_LOSS
#define GPIPE_NN_OPS_LOSS

//===----------------------------------------------------------------------===//
// Loss.
//===----------------------------------------------------------------------===//

// A loss over a mini-batch of N samples of C classes: the mean (or, with
// `sum`, the sum) over the samples whose label is not `ignore_index` (when
// set); the mean is NaN when every label is ignored, the sum 0. With
// `microbatches = M` (set by `gpipe-microbatch`) the op sees one of M
// micro-batches of a mini-batch, and its result is that micro-batch's share
// of the mini-batch's loss: the sum over its samples, divided by the
// mini-batch's count of non-ignored labels (N * M without ignore_index) for
// a mean.
class NN_LossOp<string mnemonic, string what>
    : NN_Op<mnemonic, [Pure, NN_Cost, NN_Batch,
                       DeclareOpInterfaceMethods<NN_DifferentiableOpInterface>]> {
  let summary = what;
  let arguments = (ins NN_F32Tensor:$logits, NN_I64Tensor:$labels,
                   OptionalAttr<I64Attr>:$ignore_index, UnitAttr:$sum,
                   OptionalAttr<I64Attr>:$microbatches);
  let results = (outs NN_F32Scalar:$loss);
  let assemblyFormat = [{
    $logits `,` $labels attr-dict `:` type($logits) `,` type($labels)
  }];
  let hasVerifier = 1;
}

class NN_LossGradOp<string mnemonic, string what>
    : NN_Op<mnemonic, [Pure, AllTypesMatch<["logits", "output"]>, NN_Cost]> {
  let summary = "gradient of " # what # " with respect to its scores";
  let arguments = (ins NN_F32Tensor:$logits, NN_I64Tensor:$labels,
                   NN_F32Scalar:$grad, OptionalAttr<I64Attr>:$ignore_index,
                   UnitAttr:$sum, OptionalAttr<I64Attr>:$microbatches);
  let results = (outs NN_F32Tensor:$output);
  let assemblyFormat = [{
    $logits `,` $labels `,` $grad attr-dict `:` type($logits) `,` type($labels)
  }];
  let hasVerifier = 1;
}

def NN_SoftmaxCrossEntropyOp : NN_LossOp<"softmax_cross_entropy",
    "mean or sum softmax cross-entropy over a mini-batch (ONNX SoftmaxCrossEntropyLoss)"> {
  let description = [{
    logits [N, C], int64 labels [N]: `logsumexp(logits[i]) -
    logits[i, labels[i]]` per sample, reduced as every loss (above).
    ```mlir
    %l = nn.softmax_cross_entropy %x, %y {ignore_index = -100 : i64} : tensor<8x10xf32>, tensor<8xi64>
    ```
  }];
}

def NN_SoftmaxCrossEntropyGradOp : NN_LossGradOp<"softmax_cross_entropy_grad",
    "nn.softmax_cross_entropy">;

def NN_NllLossOp : NN_LossOp<"nll_loss",
    "mean or sum negative log-likelihood over a mini-batch (ONNX NegativeLogLikelihoodLoss)"> {
  let description = [{
    Scores [N, C] (log-probabilities, e.g. a log-softmax's output; the
    operand is named `logits` as in every loss), int64 labels [N]:
    `-logits[i, labels[i]]` per sample, reduced as every loss (above).
    ```mlir
    %l = nn.nll_loss %logp, %y {ignore_index = 0 : i64, sum} : tensor<8x10xf32>, tensor<8xi64>
    ```
  }];
}

def NN_NllLossGradOp : NN_LossGradOp<"nll_loss_grad", "nn.nll_loss">;

#endif // GPIPE_NN_OPS_LOSS
