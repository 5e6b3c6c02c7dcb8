// Checkpoint directories (gpipe/checkpoint.h): the stage indexes, the
// manifest written last, atomic publication by rename, pruning, and finding
// the newest complete checkpoint. Tensors themselves are .npy files written
// by gp_main (npyWriteF32 syncs each one).
#include "gpipe/checkpoint.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unistd.h>

namespace gpipe {
namespace checkpoint {
namespace {

using Json = nlohmann::ordered_json;
namespace fs = std::filesystem;

constexpr const char *kPrefix = "step-";

std::string join(const std::string &dir, const std::string &file) {
  return dir.empty() || dir.back() == '/' ? dir + file : dir + "/" + file;
}

/// Writes `text` to PATH.tmp, syncs it, renames it to PATH.
bool writeSynced(const std::string &path, const std::string &text,
                 std::string &err) {
  std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    err = "cannot create " + tmp + ": " + std::strerror(errno);
    return false;
  }
  const char *p = text.data();
  size_t left = text.size();
  bool ok = true;
  while (ok && left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR)
      continue;
    ok = n > 0;
    if (ok) {
      p += n;
      left -= static_cast<size_t>(n);
    }
  }
  ok = ok && ::fsync(fd) == 0;
  int e = errno;
  if (::close(fd) != 0 && ok) {
    ok = false;
    e = errno;
  }
  if (ok && std::rename(tmp.c_str(), path.c_str()) != 0) {
    ok = false;
    e = errno;
  }
  if (!ok) {
    err = "cannot write " + path + ": " + std::strerror(e);
    std::remove(tmp.c_str());
  }
  return ok;
}

bool readText(const std::string &path, std::string &text, std::string &err) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    err = path + ": cannot open (" + std::strerror(errno) + ")";
    return false;
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  text = ss.str();
  return true;
}

Json tensorsToJson(const std::vector<Tensor> &tensors) {
  Json a = Json::array();
  for (const Tensor &t : tensors) {
    Json o;
    o["name"] = t.name;
    if (!t.slot.empty())
      o["slot"] = t.slot;
    o["file"] = t.file;
    o["shape"] = t.shape;
    a.push_back(std::move(o));
  }
  return a;
}

/// Reads a "tensors" array; `where` names the file in errors.
bool tensorsFromJson(const Json &a, const std::string &where,
                     std::vector<Tensor> &out, std::string &err) {
  if (!a.is_array()) {
    err = where + ": \"tensors\" is not an array";
    return false;
  }
  for (const Json &o : a) {
    Tensor t;
    if (!o.is_object() || !o.contains("name") || !o["name"].is_string() ||
        !o.contains("file") || !o["file"].is_string() || !o.contains("shape") ||
        !o["shape"].is_array() ||
        (o.contains("slot") && !o["slot"].is_string())) {
      err = where + ": a tensor entry lacks a string \"name\" and \"file\" or "
                    "an array \"shape\"";
      return false;
    }
    t.name = o["name"].get<std::string>();
    t.file = o["file"].get<std::string>();
    if (o.contains("slot"))
      t.slot = o["slot"].get<std::string>();
    for (const Json &d : o["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0) {
        err = where + ": tensor '" + t.name + "' has a bad shape";
        return false;
      }
      t.shape.push_back(d.get<int64_t>());
    }
    // Files stay inside the checkpoint.
    if (t.file.empty() || t.file[0] == '/' ||
        t.file.find("..") != std::string::npos) {
      err = where + ": tensor '" + t.name + "' has file '" + t.file +
            "' outside the checkpoint";
      return false;
    }
    out.push_back(std::move(t));
  }
  return true;
}

/// The step of a "step-<digits>" name; -1 for any other name.
int64_t stepOfName(const std::string &name) {
  if (name.rfind(kPrefix, 0) != 0)
    return -1;
  std::string digits = name.substr(std::strlen(kPrefix));
  if (digits.empty() || digits.size() > 18 ||
      digits.find_first_not_of("0123456789") != std::string::npos)
    return -1;
  return std::stoll(digits);
}

/// The complete checkpoints under `dir`, oldest first.
std::vector<std::pair<int64_t, std::string>> complete(const std::string &dir) {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  for (const fs::directory_entry &e : fs::directory_iterator(dir, ec)) {
    int64_t step = stepOfName(e.path().filename().string());
    if (step >= 0 && fs::is_regular_file(e.path() / "manifest.json", ec))
      found.push_back({step, e.path().string()});
  }
  std::sort(found.begin(), found.end());
  return found;
}

} // namespace

std::string directoryFor(const std::string &dir, int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "%s%08lld", kPrefix,
                static_cast<long long>(step));
  return join(dir, name);
}

bool makeDirectories(const std::string &path, std::string &err) {
  std::error_code ec;
  fs::create_directories(path, ec);
  if (ec) {
    err = "cannot create directory " + path + ": " + ec.message();
    return false;
  }
  return true;
}

bool syncDirectory(const std::string &path, std::string &err) {
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  bool ok = fd >= 0 && ::fsync(fd) == 0;
  int e = errno;
  if (fd >= 0)
    ::close(fd);
  if (!ok)
    err = "cannot sync directory " + path + ": " + std::strerror(e);
  return ok;
}

bool writeStageIndex(const std::string &tmpDir, int64_t stage,
                     const std::vector<Tensor> &tensors, std::string &err) {
  Json j;
  j["format"] = kFormat;
  j["version"] = kVersion;
  j["stage"] = stage;
  j["tensors"] = tensorsToJson(tensors);
  return writeSynced(join(tmpDir, "stage" + std::to_string(stage) + ".json"),
                     j.dump(1) + "\n", err);
}

bool commit(const std::string &dir, const std::string &tmpDir, Manifest m,
            int64_t keep, std::string &err) {
  m.tensors.clear();
  for (int64_t s = 0; s < m.stages; ++s) {
    std::string path = join(tmpDir, "stage" + std::to_string(s) + ".json");
    std::string text;
    if (!readText(path, text, err))
      return false;
    Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object() || !j.contains("tensors")) {
      err = path + ": not a checkpoint stage index";
      return false;
    }
    if (!tensorsFromJson(j["tensors"], path, m.tensors, err))
      return false;
  }
  Json j;
  j["format"] = kFormat;
  j["version"] = kVersion;
  j["step"] = m.step;
  j["stages"] = m.stages;
  j["microbatches"] = m.microbatches;
  j["optimizer"] = m.optimizer;
  j["skipped_updates"] = m.skippedUpdates;
  Json data;
  data["samples"] = m.data.samples;
  data["batch_size"] = m.data.batchSize;
  data["shuffle"] = m.data.shuffle;
  data["seed"] = m.data.seed;
  j["data"] = std::move(data);
  j["tensors"] = tensorsToJson(m.tensors);
  if (!writeSynced(join(tmpDir, "manifest.json"), j.dump(1) + "\n", err) ||
      !syncDirectory(tmpDir, err))
    return false;
  // Publish: a checkpoint of the same step (an earlier run's) is replaced.
  std::string final = directoryFor(dir, m.step);
  std::error_code ec;
  if (fs::exists(final, ec)) {
    std::string old = final + ".old";
    fs::remove_all(old, ec);
    fs::rename(final, old, ec);
    if (!ec)
      fs::remove_all(old, ec);
  }
  if (std::rename(tmpDir.c_str(), final.c_str()) != 0) {
    err = "cannot rename " + tmpDir + " to " + final + ": " +
          std::strerror(errno);
    return false;
  }
  if (!syncDirectory(dir, err))
    return false;
  if (keep > 0) {
    auto found = complete(dir);
    for (size_t i = 0; i + static_cast<size_t>(keep) < found.size(); ++i) {
      // The manifest goes first: a half-removed checkpoint is not complete.
      fs::remove(fs::path(found[i].second) / "manifest.json", ec);
      fs::remove_all(found[i].second, ec);
    }
  }
  return true;
}

bool read(const std::string &path, Manifest &m, std::string &err) {
  std::string file = join(path, "manifest.json"), text;
  if (!readText(file, text, err))
    return false;
  Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    err = file + ": not JSON";
    return false;
  }
  if (!j.contains("format") || j["format"] != kFormat) {
    err = file + ": not a gpipe checkpoint (\"format\" is not \"" +
          std::string(kFormat) + "\")";
    return false;
  }
  if (!j.contains("version") || j["version"] != kVersion) {
    err = file + ": checkpoint version " +
          (j.contains("version") ? j["version"].dump() : "(none)") +
          ", this release reads version " + std::to_string(kVersion);
    return false;
  }
  auto getInt = [&](const Json &o, const char *key, int64_t &out) {
    if (!o.contains(key) || !o[key].is_number_integer()) {
      err = file + ": \"" + key + "\" is missing or not an integer";
      return false;
    }
    out = o[key].get<int64_t>();
    return true;
  };
  if (!getInt(j, "step", m.step) || !getInt(j, "stages", m.stages) ||
      !getInt(j, "microbatches", m.microbatches))
    return false;
  if (!j.contains("optimizer") || !j["optimizer"].is_string() ||
      !j.contains("data") || !j["data"].is_object()) {
    err = file + ": \"optimizer\" or \"data\" is missing";
    return false;
  }
  m.optimizer = j["optimizer"].get<std::string>();
  m.skippedUpdates = 0;
  if (j.contains("skipped_updates") &&
      !getInt(j, "skipped_updates", m.skippedUpdates))
    return false;
  const Json &d = j["data"];
  if (!getInt(d, "samples", m.data.samples) ||
      !getInt(d, "batch_size", m.data.batchSize))
    return false;
  if (!d.contains("shuffle") || !d["shuffle"].is_boolean() ||
      !d.contains("seed") || !d["seed"].is_number_integer()) {
    err = file + ": \"data\" lacks \"shuffle\" or \"seed\"";
    return false;
  }
  m.data.shuffle = d["shuffle"].get<bool>();
  m.data.seed = d["seed"].get<uint64_t>();
  m.tensors.clear();
  if (!j.contains("tensors"))
    return err = file + ": \"tensors\" is missing", false;
  return tensorsFromJson(j["tensors"], file, m.tensors, err);
}

bool findLatest(const std::string &dir, std::string &path, std::string &err) {
  path.clear();
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    err = "checkpoint directory " + dir + " does not exist";
    return false;
  }
  fs::directory_iterator it(dir, ec);
  if (ec) {
    err = "cannot read checkpoint directory " + dir + ": " + ec.message();
    return false;
  }
  auto found = complete(dir);
  if (!found.empty())
    path = found.back().second;
  return true;
}

void removeIncomplete(const std::string &dir) {
  std::error_code ec;
  std::vector<fs::path> stale;
  for (const fs::directory_entry &e : fs::directory_iterator(dir, ec)) {
    std::string name = e.path().filename().string();
    if (name.rfind(kPrefix, 0) == 0 &&
        (name.size() > 4 && (name.compare(name.size() - 4, 4, ".tmp") == 0 ||
                             name.compare(name.size() - 4, 4, ".old") == 0)))
      stale.push_back(e.path());
  }
  for (const fs::path &p : stale)
    fs::remove_all(p, ec);
}

} // namespace checkpoint
} // namespace gpipe
