// gpipe-optimizer: nn.param_grad -> pipe.{sgd,adam}_update (torch.optim).
#include "passes/Passes.h"

#include "mlir/IR/Verifier.h"

namespace gpipe {
#define GEN_PASS_DEF_OPTIMIZER
#include "passes/Passes.h.inc"
} // namespace gpipe

using namespace mlir;
using namespace gpipe;

namespace {
struct OptimizerPass : gpipe::impl::OptimizerBase<OptimizerPass> {
  using OptimizerBase::OptimizerBase;

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (optimizer != "sgd" && optimizer != "adam" && optimizer != "adamw") {
      func.emitError() << "unknown optimizer '" << optimizer
                       << "' (expected sgd, adam or adamw)";
      return signalPassFailure();
    }
    SmallVector<nn::ParamGradOp> grads;
    func.walk([&](nn::ParamGradOp op) { grads.push_back(op); });
    for (nn::ParamGradOp grad : grads) {
      // Updates go last, so every read of the parameter comes before them.
      Operation *terminator = grad->getBlock()->getTerminator();
      OpBuilder b(terminator);
      auto f64 = [&](double v) { return b.getF64FloatAttr(v); };
      Operation *update;
      if (optimizer == "sgd")
        update = pipeline::SGDUpdateOp::create(
            b, grad.getLoc(), grad.getParam(), grad.getGrad(), f64(lr),
            f64(momentum), f64(weightDecay), b.getBoolAttr(nesterov));
      else
        update = pipeline::AdamUpdateOp::create(
            b, grad.getLoc(), grad.getParam(), grad.getGrad(), f64(lr),
            f64(beta1), f64(beta2), f64(eps), f64(weightDecay),
            b.getBoolAttr(optimizer == "adamw"));
      // The update runs on the parameter's stage.
      if (std::optional<int64_t> stage = pipeline::getStage(grad))
        pipeline::setStage(update, *stage);
      grad.erase();
      if (failed(mlir::verify(update)))
        return signalPassFailure();
    }
  }
};
} // namespace
