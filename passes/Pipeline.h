// The whole compile, ONNX-imported function to scheduled stages, as one
// registered pass pipeline: gpipe-compile runs it, and
// `gpipe-opt --gpipe-pipeline='...'` reproduces it pass for pass.
#ifndef GPIPE_PASSES_PIPELINE_H
#define GPIPE_PASSES_PIPELINE_H

#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassOptions.h"

#include <string>

namespace gpipe {

struct CompilePipelineOptions
    : mlir::PassPipelineOptions<CompilePipelineOptions> {
  Option<int64_t> microbatches{*this, "microbatches",
                               llvm::cl::desc("micro-batches per step M"),
                               llvm::cl::init(1)};
  Option<int64_t> stages{*this, "stages", llvm::cl::desc("pipeline stages K"),
                         llvm::cl::init(1)};
  Option<std::string> optimizer{*this, "optimizer",
                                llvm::cl::desc("sgd, adam or adamw"),
                                llvm::cl::init("sgd")};
  Option<double> lr{*this, "lr", llvm::cl::desc("learning rate"),
                    llvm::cl::init(0.01)};
  Option<double> momentum{*this, "momentum", llvm::cl::desc("SGD momentum"),
                          llvm::cl::init(0.0)};
  Option<bool> nesterov{*this, "nesterov",
                        llvm::cl::desc("SGD Nesterov momentum"),
                        llvm::cl::init(false)};
  Option<double> weightDecay{*this, "weight-decay",
                             llvm::cl::desc("weight decay"),
                             llvm::cl::init(0.0)};
  Option<double> beta1{*this, "beta1", llvm::cl::desc("Adam beta1"),
                       llvm::cl::init(0.9)};
  Option<double> beta2{*this, "beta2", llvm::cl::desc("Adam beta2"),
                       llvm::cl::init(0.999)};
  Option<double> eps{*this, "eps", llvm::cl::desc("Adam epsilon"),
                     llvm::cl::init(1e-8)};
  Option<std::string> remat{*this, "remat",
                            llvm::cl::desc("stage, segments or none"),
                            llvm::cl::init("none")};
  ListOption<int64_t> rematStages{
      *this, "remat-stages",
      llvm::cl::desc("with remat=stage: the pieces to rematerialize (default: "
                     "all; gpipe-remat's stages)")};
  ListOption<int64_t> rematStashBytes{
      *this, "remat-stash-bytes",
      llvm::cl::desc("with remat=segments: per piece, the stash bytes per "
                     "micro-batch it may keep, -1: all (gpipe-remat's "
                     "stash-bytes)")};
  Option<std::string> schedule{*this, "schedule",
                               llvm::cl::desc("a registered schedule name"),
                               llvm::cl::init("gpipe")};
  ListOption<std::string> partition{
      *this, "partition",
      llvm::cl::desc("split points by hand: the node (or module path) each "
                     "piece after the first starts with (gpipe-partition's "
                     "cuts)")};
  Option<int64_t> memoryPerStage{
      *this, "memory-per-stage",
      llvm::cl::desc("bytes each stage's estimated memory must fit (0: no "
                     "limit; gpipe-partition)"),
      llvm::cl::init(0)};
  ListOption<int64_t> inFlight{
      *this, "in-flight",
      llvm::cl::desc("micro-batches each stage keeps in flight under the "
                     "schedule (gpipe-partition's memory estimate)")};
  Option<std::string> costs{
      *this, "costs",
      llvm::cl::desc("a measured cost table (gpipe-partition's costs)"),
      llvm::cl::init("")};
  Option<int64_t> virtualStages{
      *this, "virtual-stages",
      llvm::cl::desc("model chunks per stage V (the model is cut into K*V "
                     "pieces)"),
      llvm::cl::init(1)};
  Option<std::string> batchnorm{
      *this, "batchnorm",
      llvm::cl::desc("BatchNorm running statistics: microbatch or deferred"),
      llvm::cl::init("microbatch")};
};

/// Adds the compile's passes, in order, to a module pass manager.
void buildCompilePipeline(mlir::OpPassManager &pm,
                          const CompilePipelineOptions &options);

struct LoweringOptions : mlir::PassPipelineOptions<LoweringOptions> {
  Option<std::string> target{*this, "target",
                             llvm::cl::desc("cpu or cuda (fusion, memory)"),
                             llvm::cl::init("cpu")};
  Option<std::string> precision{
      *this, "precision",
      llvm::cl::desc("fp32 or bf16 (bf16 parameter copies, scratch)"),
      llvm::cl::init("fp32")};
  Option<int64_t> shardOptimizer{
      *this, "shard-optimizer",
      llvm::cl::desc("the replicas the optimizer state is split across "
                     "(--shard-optimizer; 1: not split)"),
      llvm::cl::init(1)};
};

/// Adds the lowering below the pipeline IR, what code generation needs
/// (`gpipe-lower`): remat regions inlined, in-place gradient accumulation,
/// deferred weight-gradient GEMMs, fusion groups for `target`, bf16
/// parameter copies for `precision`, the memory plan, and its check.
void buildLoweringPipeline(mlir::OpPassManager &pm,
                           const LoweringOptions &options);

/// Registers `gpipe-pipeline` and `gpipe-lower` (for gpipe-opt).
void registerCompilePipeline();

} // namespace gpipe

#endif
