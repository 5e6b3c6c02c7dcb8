// The pass pipeline gpipe-compile runs on the imported model.
#include "compiler/driver/PassPipeline.h"

#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Transforms/Passes.h"

using namespace mlir;

namespace gpipe::driver {
namespace {

gpipe::OptimizerOptions optimizerPassOptions(const OptimizerConfig &c) {
  gpipe::OptimizerOptions o;
  o.optimizer = c.kind;
  o.lr = c.lr;
  o.momentum = c.momentum;
  o.nesterov = c.nesterov;
  o.weightDecay = c.weightDecay;
  o.beta1 = c.beta1;
  o.beta2 = c.beta2;
  o.eps = c.eps;
  return o;
}

} // namespace

void buildPassPipeline(PassManager &pm, const CompileOptions &o,
                       const std::string &remat) {
  auto &fpm = pm.nest<func::FuncOp>();
  MicrobatchOptions mb;
  mb.microbatches = o.microbatches;
  fpm.addPass(createMicrobatch(mb));
  PartitionOptions part;
  part.stages = o.stages;
  fpm.addPass(createPartition(part));
  fpm.addPass(createAutodiff());
  fpm.addPass(createOptimizer(optimizerPassOptions(o.optimizer)));
  pm.addPass(createCSEPass());
  pm.addPass(createOutlineStages());
  RematOptions rm;
  rm.mode = remat;
  pm.addPass(createRemat(rm));
  ScheduleOptions sched;
  sched.schedule = o.schedule;
  pm.addPass(createSchedule(sched));
}

} // namespace gpipe::driver
