// gpipe-inline-remat: pipe.remat regions become ordinary ops (lowering).
#include "passes/Passes.h"

namespace gpipe {
#define GEN_PASS_DEF_INLINEREMAT
#include "passes/Passes.h.inc"
} // namespace gpipe

using namespace mlir;
using namespace gpipe;

namespace {

struct InlineRematPass : gpipe::impl::InlineRematBase<InlineRematPass> {
  void runOnOperation() override {
    SmallVector<pipeline::RematOp> remats;
    getOperation().walk([&](pipeline::RematOp op) { remats.push_back(op); });
    for (pipeline::RematOp remat : remats) {
      Block &body = remat.getBody().front();
      for (auto [arg, input] :
           llvm::zip_equal(body.getArguments(), remat.getInputs()))
        arg.replaceAllUsesWith(input);
      auto yield = cast<pipeline::YieldOp>(body.getTerminator());
      remat.replaceAllUsesWith(yield.getValues());
      yield.erase();
      remat->getBlock()->getOperations().splice(remat->getIterator(),
                                                body.getOperations());
      remat.erase();
    }
  }
};

} // namespace
