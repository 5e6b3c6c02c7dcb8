// The pipeline.json of a compile: fills the manifest (gpipe/manifest.h).
#ifndef GPIPE_COMPILER_DRIVER_MANIFEST_H
#define GPIPE_COMPILER_DRIVER_MANIFEST_H

#include "compiler/CppEmitter.h"
#include "compiler/importer/OnnxImporter.h"
#include "compiler/driver/Driver.h"

#include "gpipe/manifest.h"

#include <string>
#include <vector>

namespace gpipe::driver {

/// What gpipe-run and the stage programs need, plus the partition,
/// transfers, schedule, memory plan and cost estimate of every stage, for
/// people and tools. `remat` is the resolved policy, `sourceModel` the
/// model's absolute path.
manifest::Manifest
makeManifest(const CompileOptions &o, const ImportedModel &model,
             const std::vector<EmittedStage> &stages, const std::string &remat,
             const std::string &sourceModel, const std::string &buildId);

} // namespace gpipe::driver

#endif
