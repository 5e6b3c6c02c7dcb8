// The pass pipeline gpipe-compile runs on the imported model.
#ifndef GPIPE_COMPILER_DRIVER_PASSPIPELINE_H
#define GPIPE_COMPILER_DRIVER_PASSPIPELINE_H

#include "compiler/driver/Driver.h"

#include "passes/Pipeline.h"

#include "mlir/Pass/PassManager.h"

namespace gpipe::driver {

/// Sets the options of gpipe-pipeline for this compile, with the resolved
/// remat policy `remat` (none or stage).
void setPipelineOptions(CompilePipelineOptions &p, const CompileOptions &o,
                        const std::string &remat);

/// Adds the passes that turn the imported forward graph into scheduled
/// stages: micro-batch, partition, autodiff, optimizer, CSE, outline stages,
/// remat (the resolved policy `remat`, none or stage), schedule.
void buildPassPipeline(mlir::PassManager &pm, const CompileOptions &o,
                       const std::string &remat);

} // namespace gpipe::driver

#endif
