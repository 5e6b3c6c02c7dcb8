// The compile as one registered pass pipeline.
#include "passes/Pipeline.h"

#include "passes/Passes.h"

#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"

using namespace mlir;

void gpipe::buildCompilePipeline(OpPassManager &pm,
                                 const CompilePipelineOptions &o) {
  OpPassManager &fpm = pm.nest<func::FuncOp>();
  fpm.addPass(createFuseLayerNorm());
  fpm.addPass(createFuseAttention());
  MicrobatchOptions mb;
  mb.microbatches = o.microbatches;
  mb.batchnorm = o.batchnorm;
  fpm.addPass(createMicrobatch(mb));
  PartitionOptions part;
  part.stages = o.stages * o.virtualStages;
  part.cuts.assign(o.partition.begin(), o.partition.end());
  part.memoryPerStage = o.memoryPerStage;
  part.inFlight.assign(o.inFlight.begin(), o.inFlight.end());
  part.optimizerStates = o.optimizer == "sgd" ? (o.momentum > 0 ? 1 : 0) : 2;
  part.remat = o.remat;
  part.costs = o.costs;
  fpm.addPass(createPartition(part));
  fpm.addPass(createAutodiff());
  OptimizerOptions opt;
  opt.optimizer = o.optimizer;
  opt.lr = o.lr;
  opt.momentum = o.momentum;
  opt.nesterov = o.nesterov;
  opt.weightDecay = o.weightDecay;
  opt.beta1 = o.beta1;
  opt.beta2 = o.beta2;
  opt.eps = o.eps;
  fpm.addPass(createOptimizer(opt));
  pm.addPass(createCSEPass());
  pm.addPass(createOutlineStages());
  RematOptions rm;
  rm.mode = o.remat;
  rm.stages.assign(o.rematStages.begin(), o.rematStages.end());
  rm.stashBytes.assign(o.rematStashBytes.begin(), o.rematStashBytes.end());
  rm.costs = o.costs;
  pm.addPass(createRemat(rm));
  ScheduleOptions sched;
  sched.schedule = o.schedule;
  sched.virtualStages = o.virtualStages;
  pm.addPass(createSchedule(sched));
  pm.addPass(createFlushSends());
}

void gpipe::buildLoweringPipeline(OpPassManager &pm,
                                  const LoweringOptions &options) {
  OpPassManager &fpm = pm.nest<func::FuncOp>();
  fpm.addPass(createInlineRemat());
  fpm.addPass(createAccumulateInPlace());
  fpm.addPass(createSplitWeightGrad());
  FuseElementwiseOptions fuse;
  fuse.target = options.target;
  fpm.addPass(createFuseElementwise(fuse));
  if (options.precision == "bf16")
    pm.addPass(createBf16Shadows());
  PlanMemoryOptions plan;
  plan.target = options.target;
  plan.precision = options.precision;
  plan.shardOptimizer = options.shardOptimizer;
  pm.addPass(createPlanMemory(plan));
  pm.addPass(createCheckMemory());
}

void gpipe::registerCompilePipeline() {
  PassPipelineRegistration<CompilePipelineOptions>(
      "gpipe-pipeline",
      "The whole compile after import: layer-norm and attention fusion, "
      "micro-batching, "
      "partitioning, "
      "autodiff, optimizer, CSE, outlining, remat, schedule (what "
      "gpipe-compile runs)",
      buildCompilePipeline);
  PassPipelineRegistration<LoweringOptions>(
      "gpipe-lower",
      "Lowers scheduled pipeline IR to what code generation reads "
      "(gpipe-inline-remat, gpipe-accumulate-in-place, "
      "gpipe-split-weight-grad, gpipe-fuse-elementwise, with precision=bf16 "
      "gpipe-bf16-shadows, gpipe-plan-memory, gpipe-check-memory)",
      buildLoweringPipeline);
}
