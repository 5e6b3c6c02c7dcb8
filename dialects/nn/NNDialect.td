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
    module-level symbols (`nn.parameter @name`) read by `nn.param @name`; the gradient of the loss with respect to a
    parameter is marked by `nn.param_grad`. Every op carries a cost estimate;
    forward ops carry their reverse-mode gradient rule.
  }];

  // The attributes the importer and the passes put on the training step
  // (docs/passes.md): read and written through the accessors of
  // NNDialect.h, verified by the hooks below.
  let discardableAttrs = (ins
    // On an argument: the ONNX name of the graph input it is.
    "::mlir::StringAttr":$input,
    // On a result: the ONNX name of the graph output it is.
    "::mlir::StringAttr":$output,
    // On the one result that is the training loss.
    "::mlir::UnitAttr":$loss,
    // On an op: it belongs to the backward phase (gpipe-autodiff).
    "::mlir::UnitAttr":$backward
  );
  let hasOperationAttrVerify = 1;
  let hasRegionArgAttrVerify = 1;
  let hasRegionResultAttrVerify = 1;
}

class NN_Op<string mnemonic, list<Trait> traits = []>
    : Op<NN_Dialect, mnemonic, traits>;

#endif // GPIPE_NN_DIALECT
