// The nn dialect: tensor compute ops imported from ONNX and their gradients.
#ifndef GPIPE_NN_DIALECT
#define GPIPE_NN_DIALECT

include "mlir/IR/OpBase.td"

def NN_Dialect : Dialect {
  let name = "nn";
  let cppNamespace = "::gpipe::nn";
  let summary = "Tensor compute ops of a training graph, with gradient ops.";
  let description = [{
    Value-semantics ops on statically shaped tensors. Trainable parameters are
    explicit (`nn.param "name"`); the gradient of the loss with respect to a
    parameter is marked by `nn.param_grad`. Every op carries a cost estimate;
    forward ops carry their reverse-mode gradient rule.
  }];
}

class NN_Op<string mnemonic, list<Trait> traits = []>
    : Op<NN_Dialect, mnemonic, traits>;

#endif // GPIPE_NN_DIALECT
