// The pipe dialect: pipeline structure and the optimizer update.
#ifndef GPIPE_PIPE_OPS
#define GPIPE_PIPE_OPS

include "mlir/IR/OpBase.td"
include "mlir/Interfaces/InferTypeOpInterface.td"

def Pipe_Dialect : Dialect {
  let name = "pipe";
  // Not `pipe`: that would collide with POSIX pipe().
  let cppNamespace = "::gpipe::pipeline";
  let summary = "Pipeline structure of a training step.";
  let description = [{
    Ops that say how a training step is executed rather than what it computes:
    the in-place optimizer update of a parameter now; pipeline stages,
    send/recv, micro-batch loops and remat regions as they land.
  }];
}

class Pipe_Op<string mnemonic, list<Trait> traits = []>
    : Op<Pipe_Dialect, mnemonic, traits>;

def Pipe_F32Tensor : StaticShapeTensorOf<[F32]>;

def Pipe_SGDUpdateOp : Pipe_Op<"sgd_update", [AllTypesMatch<["param", "grad"]>]> {
  let summary = "torch.optim.SGD update of one parameter, in place";
  let description = [{
    Updates the storage of `$param` (an `nn.param` result) with its gradient,
    following torch.optim.SGD (dampening 0): weight decay is added to the
    gradient, momentum keeps one buffer per parameter (initialised to the first
    gradient), Nesterov uses `g + momentum * buf`. The new value is what the
    parameter reads at the next step; no use of `$param` may follow the update.
  }];
  let arguments = (ins Pipe_F32Tensor:$param, Pipe_F32Tensor:$grad,
                       F64Attr:$lr, F64Attr:$momentum, F64Attr:$weight_decay,
                       BoolAttr:$nesterov);
  let assemblyFormat = "$param `,` $grad attr-dict `:` type($param)";
  let hasVerifier = 1;
}

def Pipe_AdamUpdateOp : Pipe_Op<"adam_update", [AllTypesMatch<["param", "grad"]>]> {
  let summary = "torch.optim.Adam / AdamW update of one parameter, in place";
  let description = [{
    Adam with bias correction (amsgrad off). With `decoupled` (AdamW) weight
    decay scales the parameter by `1 - lr * weight_decay` before the update;
    without it (Adam) weight decay is added to the gradient. Keeps two moment
    buffers per parameter, zero at the start.
  }];
  let arguments = (ins Pipe_F32Tensor:$param, Pipe_F32Tensor:$grad,
                       F64Attr:$lr, F64Attr:$beta1, F64Attr:$beta2,
                       F64Attr:$eps, F64Attr:$weight_decay, BoolAttr:$decoupled);
  let assemblyFormat = "$param `,` $grad attr-dict `:` type($param)";
  let hasVerifier = 1;
}

#endif // GPIPE_PIPE_OPS
