// gpipe-fuse-elementwise: marks the groups of ops code generation emits as
// one loop or kernel (lowering).
#include "passes/Passes.h"

namespace gpipe {
#define GEN_PASS_DEF_FUSEELEMENTWISE
#include "passes/Passes.h.inc"
} // namespace gpipe

using namespace mlir;
using namespace gpipe;

namespace {

struct FuseElementwisePass
    : gpipe::impl::FuseElementwiseBase<FuseElementwisePass> {
  using FuseElementwiseBase::FuseElementwiseBase;

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (target != "cpu" && target != "cuda") {
      func.emitError("fusion target must be cpu or cuda, got '")
          << target << "'";
      return signalPassFailure();
    }
    if (func.isExternal())
      return;
    int64_t groups = 0;
    // Ops in the group being built; `open`: it still takes elementwise ops.
    SmallVector<Operation *> group;
    bool open = false;
    auto close = [&]() {
      if (group.size() > 1) {
        for (Operation *op : group)
          pipeline::setFusionGroup(op, groups);
        ++groups;
      }
      group.clear();
    };
    for (Operation &op : func.getBody().front()) {
      // CUDA: a relu that is the only reader of the GEMM just before it runs
      // in that GEMM's epilogue.
      if (target == "cuda" && isa<nn::ReluOp>(op) && group.size() == 1)
        if (auto gemm = dyn_cast<nn::GemmOp>(group.front()))
          if (op.getOperand(0) == gemm.getOutput() &&
              gemm.getOutput().hasOneUse()) {
            group.push_back(&op);
            open = false;
            continue;
          }
      bool fusible = op.hasTrait<nn::Fusible>();
      if (fusible && open &&
          op.getResult(0).getType() == group.front()->getResult(0).getType()) {
        group.push_back(&op);
        continue;
      }
      // Parameters and constants emit no code: a group continues past them.
      if (isa<nn::ParamOp, nn::ConstantOp>(op))
        continue;
      close();
      group.push_back(&op);
      open = fusible;
    }
    close();
  }
};

} // namespace
