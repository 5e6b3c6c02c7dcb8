// Writing the output directory: files are staged beside OUT, then published.
#ifndef GPIPE_COMPILER_DRIVER_PUBLISH_H
#define GPIPE_COMPILER_DRIVER_PUBLISH_H

#include "mlir/Support/LLVM.h"
#include "llvm/ADT/StringRef.h"

#include <string>

namespace gpipe::driver {

/// Writes `contents` to `path`; prints the error and fails if it cannot.
mlir::LogicalResult writeFile(const std::string &path,
                              llvm::StringRef contents);

/// Moves every entry of `staging` into `out`. The compiler's files from an
/// earlier compile (including ones this compile does not write, like a
/// stage0 left from --emit exe under --emit cpp) are moved aside first and
/// deleted only once every new file is in place; if a move fails, OUT is
/// restored as it was. Other files (trained weights, logs) are left alone.
mlir::LogicalResult publish(const std::string &staging, const std::string &out);

} // namespace gpipe::driver

#endif
