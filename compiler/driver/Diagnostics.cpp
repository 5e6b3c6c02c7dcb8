// How gpipe-compile reports errors: one line each, naming file and node.
#include "compiler/driver/Diagnostics.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Location.h"

using namespace mlir;

namespace gpipe::driver {

llvm::raw_ostream &errorLine() {
  return llvm::errs() << "gpipe-compile: error: ";
}

LogicalResult fail(const llvm::Twine &msg) {
  errorLine() << msg << "\n";
  return failure();
}

namespace {

/// "model.onnx: node 'Gemm_0': " for op locations, "model.onnx: " for files.
std::string describe(Location loc) {
  if (auto name = dyn_cast<NameLoc>(loc))
    return describe(name.getChildLoc()) + "node '" +
           name.getName().getValue().str() + "': ";
  if (auto file = dyn_cast<FileLineColLoc>(loc)) {
    std::string s = file.getFilename().getValue().str();
    if (file.getLine())
      s += ":" + std::to_string(file.getLine()) + ":" +
           std::to_string(file.getColumn());
    return s + ": ";
  }
  if (auto fused = dyn_cast<FusedLoc>(loc))
    return fused.getLocations().empty() ? ""
                                        : describe(fused.getLocations()[0]);
  return "";
}

} // namespace

/// Prints diagnostics as "gpipe-compile: error: FILE: node 'N': message".
LogicalResult printDiagnostic(Diagnostic &diag) {
  const char *kind = diag.getSeverity() == DiagnosticSeverity::Error ? "error"
                     : diag.getSeverity() == DiagnosticSeverity::Warning
                         ? "warning"
                         : "note";
  llvm::errs() << "gpipe-compile: " << kind << ": "
               << describe(diag.getLocation()) << diag.str() << "\n";
  for (const Diagnostic &note : diag.getNotes())
    llvm::errs() << "  note: " << describe(note.getLocation()) << note.str()
                 << "\n";
  return success();
}

} // namespace gpipe::driver
