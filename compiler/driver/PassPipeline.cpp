// The pass pipeline gpipe-compile runs on the imported model: the registered
// gpipe-pipeline (passes/Pipeline.h) with the command line's options.
#include "compiler/driver/PassPipeline.h"

#include "passes/Pipeline.h"
#include "passes/schedules/Schedules.h"

#include <algorithm>

using namespace mlir;

void gpipe::driver::setPipelineOptions(CompilePipelineOptions &p,
                                       const CompileOptions &o,
                                       const std::string &remat) {
  p.microbatches = o.microbatches;
  p.stages = o.stages;
  p.optimizer = o.optimizer.kind;
  p.lr = o.optimizer.lr;
  p.momentum = o.optimizer.momentum;
  p.nesterov = o.optimizer.nesterov;
  p.weightDecay = o.optimizer.weightDecay;
  p.beta1 = o.optimizer.beta1;
  p.beta2 = o.optimizer.beta2;
  p.eps = o.optimizer.eps;
  p.remat = remat;
  p.rematStages = o.rematStages;
  p.rematStashBytes = o.rematStashBytes;
  p.schedule = o.schedule;
  p.virtualStages = o.virtualStages;
  p.partition = o.partition;
  p.memoryPerStage = o.memoryPerStage;
  p.costs = o.costs;
  if (o.memoryPerStage > 0)
    if (const schedules::Schedule *s = schedules::lookup(o.schedule)) {
      // Each stage's micro-batches in flight under the schedule.
      mlir::MLIRContext ctx;
      ctx.loadDialect<pipeline::PipeDialect>();
      for (auto &actions :
           s->generate(&ctx, o.stages, o.microbatches, o.virtualStages))
        p.inFlight.push_back(
            std::max<int64_t>(1, pipeline::ScheduleOp::maxInFlight(actions)));
    }
  p.batchnorm = o.batchnorm;
}

void gpipe::driver::buildPassPipeline(PassManager &pm, const CompileOptions &o,
                                      const std::string &remat) {
  CompilePipelineOptions p;
  setPipelineOptions(p, o, remat);
  buildCompilePipeline(pm, p);
}
