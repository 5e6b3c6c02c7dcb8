// The op table and the supported-op list derived from it.
#include "compiler/importer/OpTable.h"

#include <algorithm>
#include <cassert>

using namespace gpipe;
using namespace gpipe::importer;

void OpTable::add(llvm::StringRef opType, ImportFn import, FoldFn fold) {
  [[maybe_unused]] bool inserted =
      handlers.try_emplace(opType, OpHandler{import, fold}).second;
  assert(inserted && "ONNX op type registered twice");
}

const OpHandler *OpTable::lookup(llvm::StringRef opType) const {
  auto it = handlers.find(opType);
  return it == handlers.end() ? nullptr : &it->second;
}

std::vector<std::string> OpTable::opTypes() const {
  std::vector<std::string> names;
  for (const auto &entry : handlers)
    names.push_back(entry.getKey().str());
  std::sort(names.begin(), names.end());
  return names;
}

const OpTable &gpipe::importer::onnxOpTable() {
  static const OpTable table = [] {
    OpTable t;
    registerAttentionOps(t);
    registerConvOps(t);
    registerElementwiseOps(t);
    registerGemmOps(t);
    registerLogicalOps(t);
    registerLossOps(t);
    registerNormalizationOps(t);
    registerPoolOps(t);
    registerReductionOps(t);
    registerShapeOps(t);
    return t;
  }();
  return table;
}

const std::vector<std::string> &gpipe::supportedOnnxOps() {
  static const std::vector<std::string> ops = onnxOpTable().opTypes();
  return ops;
}
