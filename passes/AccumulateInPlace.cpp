// gpipe-accumulate-in-place: GEMMs add (or write) gradients straight into
// their parameter's accumulator (lowering).
#include "passes/Passes.h"
#include "passes/Utils.h"

#include "llvm/ADT/StringMap.h"

namespace gpipe {
#define GEN_PASS_DEF_ACCUMULATEINPLACE
#include "passes/Passes.h.inc"
} // namespace gpipe

using namespace mlir;
using namespace gpipe;

namespace {

/// The GEMM that computes `acc`'s gradient and nothing else, or null.
nn::GemmOp soleGemm(pipeline::AccumulateGradOp acc) {
  auto gemm = acc.getGrad().getDefiningOp<nn::GemmOp>();
  if (!gemm || gemm.getC() || !acc.getGrad().hasOneUse())
    return nullptr;
  return gemm;
}

struct AccumulateInPlacePass
    : gpipe::impl::AccumulateInPlaceBase<AccumulateInPlacePass> {
  void runOnOperation() override {
    func::FuncOp func = getOperation();
    bool oneMicrobatch = microbatchesOf(func) == 1;
    llvm::StringMap<int> contributions;
    func.walk([&](pipeline::AccumulateGradOp acc) {
      ++contributions[acc.getParam()];
    });
    func.walk([&](pipeline::AccumulateGradOp acc) {
      if (!soleGemm(acc))
        return;
      acc.setInPlace(true);
      if (oneMicrobatch && contributions.lookup(acc.getParam()) == 1)
        acc.setOverwrite(true);
    });
  }
};

} // namespace
