// gpipe-run --save-onnx: writes the compiled model with the trained values
// of its parameters, inlining every other initializer's external data.
#include "tools/gpipe-run/OnnxWriter.h"

#include "compiler/ExternalData.h"
#include "npy.h" // the runtime's .npy reader

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

#include <onnx/onnx_pb.h>

#include <fstream>
#include <map>

namespace gpipe::run {

bool writeTrainedOnnx(const std::string &out, const manifest::Manifest &m,
                      const std::string &trainedDir, const std::string &dest,
                      std::string &err) {
  auto fail = [&](const std::string &msg) {
    err = msg;
    return false;
  };
  std::string modelPath = out + "/model.onnx";
  std::ifstream in(modelPath, std::ios::binary);
  onnx::ModelProto model;
  if (!in || !model.ParseFromIstream(&in))
    return fail(modelPath + ": cannot read the compiled model");
  // A parameter lives in one stage; keep the first if listed twice.
  std::map<std::string, const manifest::Param *> byName;
  for (const manifest::Stage &stage : m.stages)
    for (const manifest::Param &param : stage.params)
      byName.emplace(param.name, &param);
  std::string srcDir = llvm::sys::path::parent_path(m.sourceModel).str();
  for (onnx::TensorProto &t : *model.mutable_graph()->mutable_initializer()) {
    auto it = byName.find(t.name());
    if (it == byName.end()) {
      // Untrained initializers keep their value; inline external data so the
      // saved model stands on its own.
      if (t.data_location() == onnx::TensorProto::EXTERNAL) {
        std::string data;
        if (!readExternalData(t, srcDir, data, err))
          return false;
        t.clear_external_data();
        t.set_data_location(onnx::TensorProto::DEFAULT);
        t.set_raw_data(data);
      }
      continue;
    }
    std::string file = trainedDir + "/" + it->second->file;
    NpyFile npy;
    if (!npy.open(file, GP_F32, err))
      return false;
    if (npy.shape() != it->second->shape)
      return fail(file + ": shape " + shapeToString(npy.shape()) +
                  " differs from parameter '" + t.name() + "' " +
                  shapeToString(it->second->shape));
    t.clear_float_data();
    t.clear_external_data();
    t.set_data_location(onnx::TensorProto::DEFAULT);
    t.set_raw_data(reinterpret_cast<const char *>(npy.data()), npy.dataBytes());
  }
  std::string tmp = dest + ".tmp";
  {
    std::ofstream os(tmp, std::ios::binary | std::ios::trunc);
    if (!os || !model.SerializeToOstream(&os) || !os.flush())
      return llvm::sys::fs::remove(tmp), fail("cannot write " + tmp);
  }
  if (std::error_code ec = llvm::sys::fs::rename(tmp, dest))
    return fail("cannot move " + tmp + " to " + dest + ": " + ec.message());
  return true;
}

} // namespace gpipe::run
