// Writing the output directory: staged files replace the compiler's earlier
// ones in OUT all together, or not at all.
#include "compiler/driver/Publish.h"
#include "compiler/driver/Diagnostics.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;

namespace gpipe::driver {
namespace {

/// Whether `name` is a file gpipe-compile writes into an output directory.
bool ownedByCompiler(llvm::StringRef name) {
  if (name == "pipeline.json" || name == "model.onnx" || name == "weights" ||
      name == "pipeline.mlir" || name == "pipeline.import.mlir")
    return true;
  if (!name.consume_front("stage"))
    return false;
  llvm::StringRef digits = name.take_while(llvm::isDigit);
  if (digits.empty())
    return false;
  name = name.drop_front(digits.size());
  return name.empty() || name == ".cpp" || name == ".cu" || name == ".mlir" ||
         name == ".import.mlir" || name == ".build.log";
}

} // namespace

LogicalResult writeFile(const std::string &path, llvm::StringRef contents) {
  std::error_code ec;
  llvm::raw_fd_ostream os(path, ec);
  if (ec)
    return fail("cannot write " + path + ": " + ec.message());
  os << contents;
  os.close();
  if (os.has_error())
    return fail("cannot write " + path + ": " + os.error().message());
  return success();
}

LogicalResult publish(const std::string &staging, const std::string &out) {
  namespace fs = llvm::sys::fs;
  if (std::error_code ec = fs::create_directories(out))
    return fail("cannot create the output directory " + out + ": " +
                ec.message());
  std::string backup =
      out + ".gpipe-old-" + std::to_string(llvm::sys::Process::getProcessId());
  fs::remove_directories(backup);
  if (std::error_code ec = fs::create_directories(backup))
    return fail("cannot create " + backup + ": " + ec.message());
  auto list = [](const std::string &dir, bool ownedOnly) {
    std::vector<std::string> names;
    std::error_code ec;
    for (fs::directory_iterator it(dir, ec), end; it != end && !ec;
         it.increment(ec)) {
      std::string name = llvm::sys::path::filename(it->path()).str();
      if (!ownedOnly || ownedByCompiler(name))
        names.push_back(name);
    }
    return names;
  };
  std::vector<std::string> asideNames, inNames;
  auto rollback = [&](const llvm::Twine &msg) {
    for (const std::string &name : inNames)
      (void)fs::rename(out + "/" + name, staging + "/" + name);
    for (const std::string &name : asideNames)
      (void)fs::rename(backup + "/" + name, out + "/" + name);
    fs::remove_directories(backup);
    return fail(msg);
  };
  for (const std::string &name : list(out, /*ownedOnly=*/true)) {
    if (std::error_code ec = fs::rename(out + "/" + name, backup + "/" + name))
      return rollback("cannot move " + out + "/" + name +
                      " aside: " + ec.message());
    asideNames.push_back(name);
  }
  for (const std::string &name : list(staging, /*ownedOnly=*/false)) {
    if (std::error_code ec = fs::rename(staging + "/" + name, out + "/" + name))
      return rollback("cannot move " + staging + "/" + name + " to " + out +
                      ": " + ec.message());
    inNames.push_back(name);
  }
  fs::remove_directories(backup);
  fs::remove_directories(staging);
  return success();
}

} // namespace gpipe::driver
