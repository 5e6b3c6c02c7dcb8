// The pipeline.json of a compile: the manifest filled from the options, the
// imported model and the emitted stages.
#include "compiler/driver/Manifest.h"
#include "compiler/driver/Toolchain.h"

namespace gpipe::driver {
namespace {

manifest::Memory memoryOf(const MemoryPlan &m) {
  manifest::Memory out;
  out.arenaBytes = m.arenaBytes;
  out.parameterBytes = m.parameterBytes;
  out.optimizerStateBytes = m.optimizerBytes;
  out.gradientBytes = m.gradientBytes;
  out.activationBytesPerMicrobatch = m.stashBytesPerMicrobatch;
  out.inFlightMicrobatches = m.stashSlots;
  out.activationBytes = m.stashBytes;
  out.transientPeakBytes = m.transientBytes;
  out.inputBytesPerMicrobatch = m.inputBytes;
  out.constantBytes = m.constantBytes;
  out.bf16CopyBytes = m.shadowBytes;
  out.arenaConstantBytes = m.arenaConstantBytes;
  out.scratchBytes = m.scratchBytes;
  out.sendStagingBytes = m.sendStagingBytes;
  return out;
}

manifest::Stage stageOf(int64_t index, const EmittedStage &stage) {
  manifest::Stage out;
  out.index = index;
  out.rank = index;
  out.executable = "stage" + std::to_string(index);
  out.weights = "weights";
  out.flopsPerStep = stage.flops;
  out.forwardFlopsPerMicrobatch = stage.forwardFlops;
  out.backwardFlopsPerMicrobatch = stage.backwardFlops;
  out.weightFlopsPerMicrobatch = stage.weightFlops;
  for (const EmittedInput &in : stage.inputs)
    out.inputs.push_back(in.name);
  for (const EmittedParam &p : stage.params)
    out.params.push_back({p.name, p.file, p.shape});
  out.memory = memoryOf(stage.memory);
  out.memory.predictedPeakBytes = stage.predictedPeakBytes;
  out.memory.predictedDeviceBytes = stage.predictedDeviceBytes;
  for (const EmittedTransfer &t : stage.transfers)
    out.boundaries.push_back(
        {t.isSend ? "send" : "recv", t.phase, t.peer, t.tag, t.type, t.bytes});
  out.schedule = stage.schedule;
  out.virtualStages = stage.virtualStages;
  out.chunkForwardFlops = stage.chunkForwardFlops;
  out.chunkBackwardFlops = stage.chunkBackwardFlops;
  out.chunkWeightFlops = stage.chunkWeightFlops;
  out.predictedSeconds = stage.predictedSeconds;
  out.predictedAnalyticShare = stage.predictedAnalyticShare;
  return out;
}

} // namespace

manifest::Manifest
makeManifest(const CompileOptions &o, const ImportedModel &model,
             const std::vector<EmittedStage> &stages, const std::string &remat,
             const std::string &sourceModel, const std::string &buildId) {
  manifest::Manifest m;
  m.buildId = buildId;
  m.model = "model.onnx";
  m.sourceModel = sourceModel;
  m.target = o.target;
  m.precision = o.precision;
  if (o.target == "cuda") {
    m.allowTf32 = o.allowTf32;
    std::vector<int> archs = *cudaArchitectures(o.cudaArch);
    m.cudaArch.assign(archs.begin(), archs.end());
  }
  // The program's batch is a replica's (B / D).
  m.batchSize = model.batchSize * o.dataParallel;
  m.microbatches = o.microbatches;
  m.microbatchSize = model.batchSize / o.microbatches;
  m.dataParallel = o.dataParallel;
  m.shardOptimizer = o.shardOptimizer;
  m.remat = remat;
  m.rematStages = o.rematStages;
  m.rematStashBytes = o.rematStashBytes;
  m.costs = o.costs;
  m.profile = o.profile;
  m.schedule = o.schedule;
  m.virtualStages = o.virtualStages;
  m.loss = model.lossName;
  for (size_t i = 0; i < stages.size(); ++i)
    if (stages[i].hasLoss)
      m.lossStage = static_cast<int64_t>(i);
  m.optimizer.kind = o.optimizer.kind;
  m.optimizer.lr = o.optimizer.lr;
  m.optimizer.momentum = o.optimizer.momentum;
  m.optimizer.nesterov = o.optimizer.nesterov;
  m.optimizer.betas = {o.optimizer.beta1, o.optimizer.beta2};
  m.optimizer.eps = o.optimizer.eps;
  m.optimizer.weightDecay = o.optimizer.weightDecay;
  for (const ImportedInput &in : model.inputs) {
    manifest::Input entry{in.name, in.isFloat ? "float32" : "int64", in.shape,
                          -1};
    // The first stage that reads it.
    for (size_t i = 0; i < stages.size() && entry.stage < 0; ++i)
      for (const EmittedInput &e : stages[i].inputs)
        if (e.name == in.name)
          entry.stage = static_cast<int64_t>(i);
    m.inputs.push_back(std::move(entry));
  }
  for (size_t i = 0; i < stages.size(); ++i)
    m.stages.push_back(stageOf(static_cast<int64_t>(i), stages[i]));
  return m;
}

} // namespace gpipe::driver
