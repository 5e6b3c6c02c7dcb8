// gpipe-split-weight-grad: weight-gradient GEMMs move to the update, one
// GEMM over all micro-batches (lowering).
#include "passes/Passes.h"
#include "passes/Utils.h"

namespace gpipe {
#define GEN_PASS_DEF_SPLITWEIGHTGRAD
#include "passes/Passes.h.inc"
} // namespace gpipe

using namespace mlir;
using namespace gpipe;

namespace {

struct SplitWeightGradPass
    : gpipe::impl::SplitWeightGradBase<SplitWeightGradPass> {
  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (microbatchesOf(func) <= 1)
      return;
    func.walk([&](pipeline::AccumulateGradOp acc) {
      if (!acc.getInPlace() || acc.getOverwrite())
        return;
      auto gemm = acc.getGrad().getDefiningOp<nn::GemmOp>();
      if (gemm.getTransA() && !gemm.getTransB() &&
          gemm.getAlpha().convertToFloat() == 1.f &&
          cast<RankedTensorType>(gemm.getA().getType())
              .getElementType()
              .isF32())
        acc.setDeferred(true);
    });
  }
};

} // namespace
