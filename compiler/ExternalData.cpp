// Reads ONNX tensor data stored outside the model file (external data).
#include "compiler/ExternalData.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace fs = std::filesystem;

bool gpipe::checkExternalDataLocation(const onnx::TensorProto &tensor,
                                      const std::string &modelDir,
                                      std::string &err) {
  std::string location;
  for (const auto &kv : tensor.external_data())
    if (kv.key() == "location")
      location = kv.value();
  if (location.empty())
    return true; // readExternalData names it
  fs::path loc(location);
  auto refuse = [&](const std::string &why) {
    err = "tensor '" + tensor.name() + "': external data location '" +
          location + "' " + why +
          ": external data must be a relative path to a file in the model's "
          "directory or below it";
    return false;
  };
  if (loc.is_absolute() || loc.has_root_name() || loc.has_root_directory())
    return refuse("is an absolute path");
  for (const fs::path &part : loc)
    if (part == "..")
      return refuse("leaves the model's directory ('..')");
  std::error_code ec;
  fs::path base = fs::weakly_canonical(modelDir.empty() ? "." : modelDir, ec);
  if (ec)
    return true; // the open below names the file
  fs::path real = fs::weakly_canonical(base / loc, ec);
  if (ec)
    return true;
  auto [b, r] = std::mismatch(base.begin(), base.end(), real.begin(),
                              real.end());
  if (b != base.end())
    return refuse("resolves to '" + real.string() +
                  "', outside the model's directory (a symbolic link)");
  return true;
}

bool gpipe::locateExternalData(const onnx::TensorProto &tensor,
                               const std::string &modelDir, std::string &file,
                               int64_t &offsetOut, int64_t &lengthOut,
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
  if (!checkExternalDataLocation(tensor, modelDir, err))
    return false;
  file = modelDir.empty() ? location : modelDir + "/" + location;
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
  offsetOut = offset;
  lengthOut = length;
  return true;
}

bool gpipe::readExternalData(const onnx::TensorProto &tensor,
                             const std::string &modelDir, std::string &bytes,
                             std::string &err) {
  std::string file;
  int64_t offset = 0, length = 0;
  if (!locateExternalData(tensor, modelDir, file, offset, length, err))
    return false;
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    err = "tensor '" + tensor.name() +
          "': cannot open its external data file '" + file + "'";
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
