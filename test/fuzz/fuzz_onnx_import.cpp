// libFuzzer harness: the ONNX importer on arbitrary bytes. The first byte
// picks the format: 'T' = the rest is ONNX text (a .onnxtext file), anything
// else = the whole input is a binary .onnx model. The bytes go to a file in
// a private temporary directory, since importOnnxModel reads a path.
// Diagnostics are swallowed (printed with GPIPE_FUZZ_VERBOSE=1, to see why
// a reproducer fails); an error must come with at least one.
#include "compiler/importer/OnnxImporter.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <unistd.h>

#include "llvm/Support/raw_ostream.h"

namespace {

std::string tempDir() {
  static std::string dir = [] {
    const char *base = std::getenv("TMPDIR");
    std::string tmpl =
        std::string(base && *base ? base : "/tmp") + "/gpipe-fuzz-onnx-XXXXXX";
    if (!mkdtemp(tmpl.data()))
      std::abort();
    static std::string made = tmpl;
    std::atexit([] { rmdir(made.c_str()); }); // empty unless it crashed
    return tmpl;
  }();
  return dir;
}

bool writeFile(const std::string &path, const uint8_t *data, size_t size) {
  FILE *f = std::fopen(path.c_str(), "wb");
  if (!f)
    return false;
  bool ok = std::fwrite(data, 1, size, f) == size;
  return std::fclose(f) == 0 && ok;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  bool text = size > 0 && data[0] == 'T';
  std::string path = tempDir() + (text ? "/model.onnxtext" : "/model.onnx");
  if (text) {
    ++data;
    --size;
  }
  if (!writeFile(path, data, size))
    std::abort();

  mlir::MLIRContext ctx(mlir::MLIRContext::Threading::DISABLED);
  ctx.printOpOnDiagnostic(false);
  int errors = 0;
  static const bool verbose = std::getenv("GPIPE_FUZZ_VERBOSE") != nullptr;
  mlir::ScopedDiagnosticHandler handler(&ctx, [&](mlir::Diagnostic &diag) {
    if (diag.getSeverity() == mlir::DiagnosticSeverity::Error)
      ++errors;
    if (verbose)
      llvm::errs() << diag.getLocation() << ": " << diag << "\n";
    return mlir::success();
  });
  gpipe::ImportOptions options;
  options.batchSize = 4;
  mlir::FailureOr<gpipe::ImportedModel> model =
      gpipe::importOnnxModel(ctx, path, options);
  if (mlir::failed(model) && errors == 0)
    std::abort(); // a failure without an error message
  std::remove(path.c_str());
  return 0;
}
