// --explain: the stage plan (ops, transfers, schedule, memory), for people.
#include "compiler/driver/Explain.h"

#include "dialects/nn/NNOps.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;

namespace gpipe::driver {

void explainStage(int64_t index, ArrayRef<func::FuncOp> forwards,
                  const EmittedStage &stage, const std::string &remat,
                  int64_t microbatches, bool cuda, int64_t numStages,
                  int64_t replicas) {
  const MemoryPlan &m = stage.memory;
  llvm::raw_ostream &os = llvm::outs();
  // Each chunk's forward ops.
  llvm::SmallVector<llvm::SmallVector<Operation *>> chunkOps;
  size_t numOps = 0;
  for (func::FuncOp forward : forwards) {
    chunkOps.emplace_back();
    forward.walk([&](Operation *op) {
      if (isa<nn::NNDialect>(op->getDialect()) &&
          !isa<nn::ParamOp, nn::ConstantOp, nn::ReshapeOp>(op))
        chunkOps.back().push_back(op);
    });
    numOps += chunkOps.back().size();
  }
  func::FuncOp forward = forwards.front();
  // Its ranks: stage s of replica r is rank r * K + s (--data-parallel).
  os << "stage " << index << (replicas > 1 ? " (ranks " : " (rank ");
  for (int64_t r = 0; r < replicas; ++r)
    os << (r ? ", " : "") << r * numStages + index;
  os << "): " << numOps << " forward ops, " << stage.params.size()
     << " parameters, " << llvm::format("%.6g", stage.forwardFlops / 1e6)
     << " MFLOP forward + " << llvm::format("%.6g", stage.backwardFlops / 1e6)
     << " MFLOP backward per micro-batch, "
     << llvm::format("%.6g", stage.flops / 1e6) << " MFLOP per step\n";
  if (!stage.predictedSeconds.empty()) {
    const std::vector<double> &t = stage.predictedSeconds;
    os << "  predicted (--costs): "
       << llvm::format("%.3f", 1e3 * (t[0] + t[1] + t[2] + t[3]))
       << " ms of compute per step: forward "
       << llvm::format("%.3f", 1e3 * t[0]) << ", backward "
       << llvm::format("%.3f", 1e3 * t[1]) << ", weight gradients "
       << llvm::format("%.3f", 1e3 * t[2]) << ", update "
       << llvm::format("%.3f", 1e3 * t[3]) << " ms ("
       << llvm::format("%.0f", 100 * stage.predictedAnalyticShare)
       << "% from the analytic model: ops the table lacks)\n";
  }
  auto module = forward->getParentOfType<ModuleOp>();
  os << "  parameters:\n";
  for (const EmittedParam &p : stage.params) {
    os << "    " << p.name << " [";
    llvm::interleave(p.shape, os, "x");
    os << "]";
    auto decl = module ? dyn_cast_or_null<nn::ParameterOp>(
                             SymbolTable::lookupSymbolIn(module, p.name))
                       : nn::ParameterOp();
    if (decl && decl.getFrozen())
      os << " (frozen: --freeze, not trained)";
    if (decl && decl.getState())
      os << " (state: a running statistic, updated by the forward, not "
            "trained)";
    os << "\n";
  }
  if (!stage.inputs.empty()) {
    os << "  reads:";
    for (const EmittedInput &in : stage.inputs)
      os << " " << in.name;
    os << "\n";
  }
  for (auto [c, ops] : llvm::enumerate(chunkOps)) {
    if (forwards.size() > 1)
      os << "  forward ops of chunk " << c << " (virtual stage "
         << (c < stage.virtualStages.size() ? stage.virtualStages[c] : -1)
         << ", " << llvm::format("%.6g", stage.chunkForwardFlops[c] / 1e6)
         << " MFLOP forward + "
         << llvm::format("%.6g", stage.chunkBackwardFlops[c] / 1e6)
         << " MFLOP backward per micro-batch):\n";
    else
      os << "  forward ops:\n";
    for (Operation *op : ops) {
      std::string type;
      llvm::raw_string_ostream ts(type);
      ts << (op->getNumResults() ? op->getResult(0) : op->getOperand(0))
                .getType();
      int64_t flops = 0;
      if (auto cost = dyn_cast<nn::CostOpInterface>(op))
        flops = cost.getFlops();
      os << "    " << llvm::left_justify(op->getName().getStringRef(), 30)
         << " " << llvm::left_justify(type, 24) << " "
         << llvm::format("%10lld", static_cast<long long>(flops)) << " FLOP";
      if (auto name = dyn_cast<NameLoc>(op->getLoc()))
        os << "  node '" << name.getName().getValue() << "'";
      os << "\n";
    }
  }
  // Batch normalization's statistics reduce over the batch: what the
  // micro-batching makes of them.
  for (func::FuncOp forward : forwards)
    forward.walk([&](nn::UpdateRunningStatsOp u) {
      auto bn = u.getMean().getDefiningOp<nn::BatchNormOp>();
      auto name = dyn_cast<NameLoc>(u->getLoc());
      os << "  batch normalization"
         << (name ? " '" + name.getName().getValue().str() + "'" : "") << ": ";
      if (bn)
        os << "statistics per micro-batch of "
           << cast<RankedTensorType>(bn.getInput().getType()).getDimSize(0)
           << " samples (" << u.getCount() << " values per channel); ";
      if (u.getMicrobatches() > 1)
        os << "running mean and variance updated once per step from the "
              "whole mini-batch's statistics (--batchnorm deferred)\n";
      else
        os << "running mean and variance updated by each of the "
           << microbatches << " micro-batch" << (microbatches == 1 ? "" : "es")
           << ", in order\n";
    });
  os << "  boundary tensors:";
  if (stage.transfers.empty())
    os << " none";
  os << "\n";
  for (const EmittedTransfer &t : stage.transfers)
    os << "    " << t.phase << " " << (t.isSend ? "send to" : "recv from")
       << " stage " << t.peer << " tag " << t.tag << " " << t.type << " ("
       << t.bytes << " bytes)\n";
  os << "  schedule:";
  for (const std::string &a : stage.schedule)
    os << " " << a;
  os << "\n";
  if (replicas > 1)
    os << "  data parallel: each update first averages " << stage.allReduceBytes
       << " bytes of gradients across the stage's " << replicas
       << " replicas (reduce-scatter and all-gather, summed in replica "
          "order)\n";
  os << "  activation memory per in-flight micro-batch: "
     << m.stashBytesPerMicrobatch << " bytes (remat " << remat << ")\n";
  os << "  peak activation memory: " << m.stashBytes << " bytes ("
     << m.stashSlots << " of " << microbatches
     << " micro-batches in flight under this schedule)\n";
  int64_t parts = m.parameterBytes + m.optimizerBytes + m.gradientBytes +
                  m.stashBytes + m.transientBytes + m.arenaConstantBytes +
                  m.shadowBytes;
  os << "  memory: arena " << m.arenaBytes << " bytes (" << (cuda ? 256 : 64)
     << "-byte aligned) = parameters " << m.parameterBytes
     << " + optimizer state " << m.optimizerBytes << " + gradients "
     << m.gradientBytes << " + activations " << m.stashBytes << " ("
     << m.stashSlots << " x " << m.stashBytesPerMicrobatch << ") + temporaries "
     << m.transientBytes;
  if (cuda)
    os << " + constants " << m.arenaConstantBytes;
  if (cuda || m.shadowBytes)
    os << " + bf16 copies " << m.shadowBytes;
  if (m.handoffBytes) {
    os << " + hand-offs between chunks " << m.handoffBytes;
    parts += m.handoffBytes;
  }
  os << " + alignment " << m.arenaBytes - parts << "\n";
  if (cuda)
    os << "  device memory outside the arena: bf16 scratch " << m.scratchBytes
       << " + send staging " << m.sendStagingBytes
       << " bytes (+ the runtime's 32 MiB cuBLASLt workspace)\n";
}

} // namespace gpipe::driver
