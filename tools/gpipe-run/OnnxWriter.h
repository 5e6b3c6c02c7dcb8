// gpipe-run --save-onnx: the compiled model with its trained parameters.
#ifndef GPIPE_TOOLS_GPIPE_RUN_ONNXWRITER_H
#define GPIPE_TOOLS_GPIPE_RUN_ONNXWRITER_H

#include "gpipe/manifest.h"

#include <string>

namespace gpipe::run {

/// Writes OUT/model.onnx to `dest` with every parameter of `m` replaced by
/// its trained value from `trainedDir`, under the same initializer names;
/// atomically (DEST.tmp, then rename). On failure sets `err`.
bool writeTrainedOnnx(const std::string &out, const manifest::Manifest &m,
                      const std::string &trainedDir, const std::string &dest,
                      std::string &err);

} // namespace gpipe::run

#endif
