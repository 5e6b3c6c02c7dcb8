// Reads ONNX tensor data stored outside the model file (external data).
#include "compiler/ExternalData.h"

#include <cerrno>
#include <cstdlib>
#include <fstream>

bool gpipe::readExternalData(const onnx::TensorProto &tensor,
                             const std::string &modelDir, std::string &bytes,
                             std::string &err) {
  std::string location;
  long long offset = 0, length = -1;
  for (const auto &kv : tensor.external_data()) {
    const std::string &v = kv.value();
    auto parse = [&](long long &out) {
      char *end = nullptr;
      errno = 0;
      out = std::strtoll(v.c_str(), &end, 10);
      return !v.empty() && *end == '\0' && errno == 0 && out >= 0;
    };
    if (kv.key() == "location") {
      location = v;
    } else if ((kv.key() == "offset" && !parse(offset)) ||
               (kv.key() == "length" && !parse(length))) {
      err = "tensor '" + tensor.name() + "': invalid external data " +
            kv.key() + " '" + v + "'";
      return false;
    }
  }
  if (location.empty()) {
    err = "tensor '" + tensor.name() + "': external data without a location";
    return false;
  }
  std::string file = modelDir.empty() ? location : modelDir + "/" + location;
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    err = "tensor '" + tensor.name() +
          "': cannot open its external data file '" + file + "'";
    return false;
  }
  in.seekg(0, std::ios::end);
  long long size = in.tellg();
  if (length < 0)
    length = size - offset;
  if (offset + length > size) {
    err = "tensor '" + tensor.name() + "': external data '" + file +
          "' is too short (" + std::to_string(size) + " bytes, need " +
          std::to_string(offset + length) + ")";
    return false;
  }
  bytes.assign(static_cast<size_t>(length), '\0');
  in.seekg(offset);
  in.read(bytes.data(), length);
  if (!in) {
    err = "tensor '" + tensor.name() + "': cannot read '" + file + "'";
    return false;
  }
  return true;
}
