// How gpipe-compile reports errors: one "gpipe-compile: error: ..." line.
#ifndef GPIPE_COMPILER_DRIVER_DIAGNOSTICS_H
#define GPIPE_COMPILER_DRIVER_DIAGNOSTICS_H

#include "mlir/IR/Diagnostics.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/raw_ostream.h"

namespace gpipe::driver {

/// Starts an error line on stderr: "gpipe-compile: error: ".
llvm::raw_ostream &errorLine();

/// Prints "gpipe-compile: error: MSG" and returns failure.
mlir::LogicalResult fail(const llvm::Twine &msg);

/// Prints diagnostics as "gpipe-compile: error: FILE: node 'N': message".
mlir::LogicalResult printDiagnostic(mlir::Diagnostic &diag);

} // namespace gpipe::driver

#endif
