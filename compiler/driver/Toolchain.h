// Building the stage programs: the host C++ compiler or nvcc, the runtime.
#ifndef GPIPE_COMPILER_DRIVER_TOOLCHAIN_H
#define GPIPE_COMPILER_DRIVER_TOOLCHAIN_H

#include "compiler/driver/Driver.h"

#include "mlir/Support/LLVM.h"

#include <string>
#include <vector>

namespace gpipe::driver {

/// The SM versions of --cuda-arch ("80,90" -> {80, 90}); prints the error
/// and fails on a bad list.
mlir::FailureOr<std::vector<int>> cudaArchitectures(const std::string &list);

/// Compiles and links the stage programs `names` (their sources are
/// DIR/NAME.cpp or DIR/NAME.cu) into DIR/NAME.
mlir::LogicalResult buildExecutables(const CompileOptions &o,
                                     const std::string &dir,
                                     const std::vector<std::string> &names);

} // namespace gpipe::driver

#endif
