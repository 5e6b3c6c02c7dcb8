// Every pass of gpipe-compile; flags are prefixed `gpipe-`.
#ifndef GPIPE_PASSES
#define GPIPE_PASSES

include "mlir/Pass/PassBase.td"

def Autodiff : Pass<"gpipe-autodiff", "mlir::func::FuncOp"> {
  let summary = "Differentiates the loss with respect to every parameter";
  let description = [{
    The function's result marked `nn.loss` (a `tensor<f32>` scalar) is
    differentiated in reverse mode, using each op's
    `DifferentiableOpInterface` rule. Gradients of a value used several times
    are summed. For every `nn.param` that influences the loss, an
    `nn.param_grad` is emitted before the return; parameters that do not
    influence the loss get none (as torch leaves their `.grad` unset).
  }];
  let dependentDialects = ["gpipe::nn::NNDialect"];
}

def Optimizer : Pass<"gpipe-optimizer", "mlir::func::FuncOp"> {
  let summary = "Turns parameter gradients into in-place optimizer updates";
  let description = [{
    Replaces every `nn.param_grad` by a `pipe.sgd_update` or
    `pipe.adam_update` placed just before the return, so every use of the
    parameter precedes its update. Hyper-parameters follow torch.optim.
  }];
  let options = [
    Option<"optimizer", "optimizer", "std::string", "\"sgd\"",
           "sgd, adam or adamw">,
    Option<"lr", "lr", "double", "0.01", "learning rate">,
    Option<"momentum", "momentum", "double", "0.0", "SGD momentum">,
    Option<"nesterov", "nesterov", "bool", "false", "SGD Nesterov momentum">,
    Option<"weightDecay", "weight-decay", "double", "0.0",
           "weight decay (L2 for sgd/adam, decoupled for adamw)">,
    Option<"beta1", "beta1", "double", "0.9", "Adam beta1">,
    Option<"beta2", "beta2", "double", "0.999", "Adam beta2">,
    Option<"eps", "eps", "double", "1e-8", "Adam epsilon">,
  ];
  let dependentDialects = ["gpipe::pipeline::PipeDialect"];
}

#endif // GPIPE_PASSES
