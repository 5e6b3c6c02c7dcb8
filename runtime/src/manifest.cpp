// Writes and reads pipeline.json (gpipe/manifest.h) with nlohmann/json; the
// only file that includes it, so generated stage code never sees it. Each
// struct's JSON fields are listed once (fieldsOf), for the writer and the
// reader alike.
#include "gpipe/manifest.h"

#include <nlohmann/json.hpp>

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <type_traits>

namespace gpipe {
namespace manifest {
namespace {

// Objects keep their fields in the order written.
using Json = nlohmann::ordered_json;

/// How a field is written and read: `Always` written, read if present;
/// `Required` written, and an error when absent; `Omitted` not written
/// (it does not apply to this pipeline), read if present.
enum class Presence { Always, Required, Omitted };

Presence writtenIf(bool applies) {
  return applies ? Presence::Always : Presence::Omitted;
}

//===----------------------------------------------------------------------===//
// The fields of each struct, in the order they are written. `f(key, member,
// presence)` is called for each; `top` is the whole manifest (when reading,
// as far as it is read), which decides the fields that depend on the target.
// A member that is a struct (or a vector of structs) is a JSON object (or an
// array of objects) with fields of its own. The header fields "format" and
// "version" are written and checked apart.
//===----------------------------------------------------------------------===//

/// Const or not, as the writer and the reader need.
template <class S, class T>
using IfIs = std::enable_if_t<std::is_same_v<std::remove_const_t<S>, T>, int>;

template <class O, class F, IfIs<O, Optimizer> = 0>
void fieldsOf(O &o, F &&f, const Manifest &) {
  f("kind", o.kind, Presence::Always);
  f("lr", o.lr, Presence::Always);
  f("momentum", o.momentum, writtenIf(o.kind == "sgd"));
  f("nesterov", o.nesterov, writtenIf(o.kind == "sgd"));
  f("betas", o.betas, writtenIf(o.kind != "sgd"));
  f("eps", o.eps, writtenIf(o.kind != "sgd"));
  f("weight_decay", o.weightDecay, Presence::Always);
}

template <class I, class F, IfIs<I, Input> = 0>
void fieldsOf(I &in, F &&f, const Manifest &) {
  f("name", in.name, Presence::Always);
  f("dtype", in.dtype, Presence::Always);
  f("shape", in.shape, Presence::Always);
  f("stage", in.stage, Presence::Always);
}

template <class P, class F, IfIs<P, Param> = 0>
void fieldsOf(P &p, F &&f, const Manifest &) {
  f("name", p.name, Presence::Required);
  f("file", p.file, Presence::Required);
  f("shape", p.shape, Presence::Required);
}

template <class M, class F, IfIs<M, Memory> = 0>
void fieldsOf(M &m, F &&f, const Manifest &top) {
  bool cuda = top.target == "cuda";
  f("arena_bytes", m.arenaBytes, Presence::Always);
  f("parameter_bytes", m.parameterBytes, Presence::Always);
  f("optimizer_state_bytes", m.optimizerStateBytes, Presence::Always);
  f("gradient_bytes", m.gradientBytes, Presence::Always);
  f("activation_bytes_per_microbatch", m.activationBytesPerMicrobatch,
    Presence::Always);
  f("in_flight_microbatches", m.inFlightMicrobatches, Presence::Always);
  f("activation_bytes", m.activationBytes, Presence::Always);
  f("transient_peak_bytes", m.transientPeakBytes, Presence::Always);
  f("input_bytes_per_microbatch", m.inputBytesPerMicrobatch, Presence::Always);
  f("constant_bytes", m.constantBytes, Presence::Always);
  f("bf16_copy_bytes", m.bf16CopyBytes,
    writtenIf(cuda || top.precision == "bf16"));
  f("arena_constant_bytes", m.arenaConstantBytes, writtenIf(cuda));
  f("scratch_bytes", m.scratchBytes, writtenIf(cuda));
  f("send_staging_bytes", m.sendStagingBytes, writtenIf(cuda));
  f("predicted_peak_bytes", m.predictedPeakBytes,
    writtenIf(m.predictedPeakBytes > 0));
  f("predicted_device_bytes", m.predictedDeviceBytes,
    writtenIf(m.predictedDeviceBytes > 0));
}

template <class B, class F, IfIs<B, Boundary> = 0>
void fieldsOf(B &b, F &&f, const Manifest &) {
  f("direction", b.direction, Presence::Always);
  f("phase", b.phase, Presence::Always);
  f("peer", b.peer, Presence::Always);
  f("tag", b.tag, Presence::Always);
  f("type", b.type, Presence::Always);
  f("bytes", b.bytes, Presence::Always);
}

template <class S, class F, IfIs<S, Stage> = 0>
void fieldsOf(S &s, F &&f, const Manifest &top) {
  f("index", s.index, Presence::Always);
  f("rank", s.rank, Presence::Always);
  f("executable", s.executable, Presence::Required);
  f("weights", s.weights, Presence::Always);
  f("flops_per_step", s.flopsPerStep, Presence::Always);
  f("forward_flops_per_microbatch", s.forwardFlopsPerMicrobatch,
    Presence::Always);
  f("backward_flops_per_microbatch", s.backwardFlopsPerMicrobatch,
    Presence::Always);
  f("weight_flops_per_microbatch", s.weightFlopsPerMicrobatch,
    Presence::Always);
  f("inputs", s.inputs, Presence::Always);
  f("params", s.params, Presence::Required);
  f("memory", s.memory, Presence::Always);
  f("boundaries", s.boundaries, Presence::Always);
  f("schedule", s.schedule, Presence::Always);
  const bool chunked = top.virtualStages > 1;
  f("virtual_stages", s.virtualStages, writtenIf(chunked));
  f("chunk_forward_flops_per_microbatch", s.chunkForwardFlops,
    writtenIf(chunked));
  f("chunk_backward_flops_per_microbatch", s.chunkBackwardFlops,
    writtenIf(chunked));
  f("chunk_weight_flops_per_microbatch", s.chunkWeightFlops,
    writtenIf(chunked));
  f("predicted_seconds_per_step", s.predictedSeconds,
    writtenIf(!s.predictedSeconds.empty()));
  f("predicted_analytic_share", s.predictedAnalyticShare,
    writtenIf(!s.predictedSeconds.empty()));
}

template <class M, class F, IfIs<M, Manifest> = 0>
void fieldsOf(M &m, F &&f, const Manifest &) {
  bool cuda = m.target == "cuda";
  f("build_id", m.buildId, Presence::Always);
  f("model", m.model, Presence::Always);
  f("source_model", m.sourceModel, Presence::Always);
  f("target", m.target, Presence::Always);
  f("precision", m.precision, Presence::Always);
  f("allow_tf32", m.allowTf32, writtenIf(cuda));
  f("cuda_arch", m.cudaArch, writtenIf(cuda));
  f("batch_size", m.batchSize, Presence::Always);
  f("microbatches", m.microbatches, Presence::Always);
  f("microbatch_size", m.microbatchSize, Presence::Always);
  f("remat", m.remat, Presence::Always);
  f("remat_stages", m.rematStages, writtenIf(!m.rematStages.empty()));
  f("remat_stash_bytes", m.rematStashBytes,
    writtenIf(!m.rematStashBytes.empty()));
  f("costs", m.costs, writtenIf(!m.costs.empty()));
  f("profile", m.profile, writtenIf(m.profile));
  f("schedule", m.schedule, Presence::Always);
  f("virtual_stages", m.virtualStages, writtenIf(m.virtualStages > 1));
  f("data_parallel", m.dataParallel, writtenIf(m.dataParallel > 1));
  f("shard_optimizer", m.shardOptimizer, writtenIf(m.shardOptimizer));
  f("loss", m.loss, Presence::Always);
  f("loss_stage", m.lossStage, Presence::Always);
  f("optimizer", m.optimizer, Presence::Always);
  f("inputs", m.inputs, Presence::Always);
  f("stages", m.stages, Presence::Required);
}

/// Whether T is one of the structs above (a JSON object).
template <class T>
constexpr bool isRecord =
    std::is_same_v<T, Optimizer> || std::is_same_v<T, Input> ||
    std::is_same_v<T, Param> || std::is_same_v<T, Memory> ||
    std::is_same_v<T, Boundary> || std::is_same_v<T, Stage>;

/// Whether T is a vector of them (a JSON array of objects).
template <class T> constexpr bool isRecordVector = false;
template <class T> constexpr bool isRecordVector<std::vector<T>> = isRecord<T>;

//===----------------------------------------------------------------------===//
// Writing
//===----------------------------------------------------------------------===//

template <class T> Json toJson(const T &record, const Manifest &top) {
  Json j = Json::object();
  fieldsOf(
      record,
      [&](const char *key, const auto &value, Presence presence) {
        using V = std::decay_t<decltype(value)>;
        if (presence == Presence::Omitted)
          return;
        if constexpr (isRecord<V>) {
          j[key] = toJson(value, top);
        } else if constexpr (isRecordVector<V>) {
          j[key] = Json::array();
          for (const auto &item : value)
            j[key].push_back(toJson(item, top));
        } else {
          j[key] = value;
        }
      },
      top);
  return j;
}

//===----------------------------------------------------------------------===//
// Reading
//===----------------------------------------------------------------------===//

bool convert(const Json &v, std::string &out) {
  if (!v.is_string())
    return false;
  out = v.get<std::string>();
  return true;
}

bool convert(const Json &v, bool &out) {
  if (!v.is_boolean())
    return false;
  out = v.get<bool>();
  return true;
}

bool convert(const Json &v, double &out) {
  if (!v.is_number())
    return false;
  out = v.get<double>();
  return true;
}

bool convert(const Json &v, int64_t &out) {
  if (!v.is_number_integer() ||
      (v.is_number_unsigned() &&
       v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max())))
    return false;
  out = v.get<int64_t>();
  return true;
}

template <class T> bool convert(const Json &v, std::vector<T> &out) {
  if (!v.is_array())
    return false;
  out.assign(v.size(), T());
  for (size_t i = 0; i < v.size(); ++i)
    if (!convert(v[i], out[i]))
      return false;
  return true;
}

template <class T, size_t N>
bool convert(const Json &v, std::array<T, N> &out) {
  if (!v.is_array() || v.size() != N)
    return false;
  for (size_t i = 0; i < N; ++i)
    if (!convert(v[i], out[i]))
      return false;
  return true;
}

/// What a field of the type of `out` must be, for messages.
const char *expected(const std::string &) { return "a string"; }
const char *expected(const bool &) { return "true or false"; }
const char *expected(const double &) { return "a number"; }
const char *expected(const int64_t &) { return "an integer"; }
const char *expected(const std::vector<std::string> &) {
  return "an array of strings";
}
const char *expected(const std::vector<int64_t> &) {
  return "an array of integers";
}
const char *expected(const std::vector<double> &) {
  return "an array of numbers";
}
const char *expected(const std::array<double, 2> &) {
  return "an array of two numbers";
}

/// Reads the fields of one file; the first problem ends the reading with
/// `error` set to "PATH: ...", naming the field as "stages[1].params[0].file".
class Reader {
public:
  explicit Reader(const std::string &path) : path_(path) {}

  bool read(const Json &root, Manifest &m) {
    std::string format;
    if (!root.is_object() || !field(root, "format", format) ||
        format != kFormat)
      return fail("not a gpipe pipeline description");
    m.version = 1; // version 1 files may predate the field
    if (!field(root, "version", m.version))
      return false;
    if (m.version != 1 && m.version != 2)
      return fail("version " + std::to_string(m.version) +
                  " is not supported (versions 1 and 2)");
    if (!record(root, "", m, m))
      return false;
    if (m.stages.empty())
      return fail("no stages");
    if (m.version == 1 && m.stages.size() != 1)
      return fail(std::to_string(m.stages.size()) +
                  " stages in a version 1 pipeline description (one stage)");
    return true;
  }

  const std::string &error() const { return error_; }

private:
  bool fail(const std::string &msg) {
    error_ = path_ + ": " + msg;
    return false;
  }
  static std::string join(const std::string &where, const char *key) {
    return where.empty() ? key : where + "." + key;
  }

  /// Reads the fields of `out` from the object `obj` (at `where`).
  template <class T>
  bool record(const Json &obj, const std::string &where, T &out,
              const Manifest &top) {
    bool ok = true;
    fieldsOf(
        out,
        [&](const char *key, auto &value, Presence presence) {
          if (!ok)
            return;
          std::string name = join(where, key);
          auto it = obj.find(key);
          if (it == obj.end()) {
            if (presence == Presence::Required)
              ok = fail("'" + name + "' is missing");
            return;
          }
          ok = member(*it, name, value, top);
        },
        top);
    return ok;
  }

  /// Reads `v` (the field `name`) into `out`.
  template <class T>
  bool member(const Json &v, const std::string &name, T &out,
              const Manifest &top) {
    if constexpr (isRecord<T>) {
      if (!v.is_object())
        return fail("'" + name + "' must be an object");
      return record(v, name, out, top);
    } else if constexpr (isRecordVector<T>) {
      if (!v.is_array())
        return fail("'" + name + "' must be an array");
      out.assign(v.size(), typename T::value_type());
      for (size_t i = 0; i < v.size(); ++i)
        if (!element(v[i], name + "[" + std::to_string(i) + "]", out[i], i,
                     top))
          return false;
      return true;
    } else {
      if (!convert(v, out))
        return fail("'" + name + "' must be " + expected(out));
      return true;
    }
  }

  template <class T>
  bool element(const Json &v, const std::string &at, T &out, size_t,
               const Manifest &top) {
    return member(v, at, out, top);
  }
  /// A stage's index and rank are its position unless the file says
  /// otherwise; an index that differs is an error.
  bool element(const Json &v, const std::string &at, Stage &out,
               size_t position, const Manifest &top) {
    out.index = out.rank = static_cast<int64_t>(position);
    if (!member(v, at, out, top))
      return false;
    if (out.index != static_cast<int64_t>(position))
      return fail("stage " + std::to_string(position) + " has index " +
                  std::to_string(out.index));
    return true;
  }

  template <class T> bool field(const Json &obj, const char *key, T &out) {
    auto it = obj.find(key);
    return it == obj.end() || member(*it, key, out, Manifest());
  }

  const std::string &path_;
  std::string error_;
};

/// The contents of the file at `path`.
bool readFile(const std::string &path, std::string &text, std::string &err) {
  std::FILE *f = std::fopen(path.c_str(), "rb");
  int error = f ? 0 : errno;
  if (f) {
    char buf[1 << 16];
    while (size_t n = std::fread(buf, 1, sizeof buf, f))
      text.append(buf, n);
    if (std::ferror(f))
      error = errno ? errno : EIO;
    std::fclose(f);
  }
  if (error)
    err = path + ": cannot read (" + std::strerror(error) + ")";
  return !error;
}

} // namespace

std::string writeManifest(const Manifest &m) {
  Json j;
  j["format"] = kFormat;
  j["version"] = m.version;
  j.update(toJson(m, m));
  // Names and paths that are not UTF-8 are written with U+FFFD in place of
  // the bad bytes rather than failing the compile.
  return j.dump(2, ' ', /*ensure_ascii=*/false,
                Json::error_handler_t::replace) +
         "\n";
}

bool readManifest(const std::string &path, Manifest &m, std::string &err) {
  std::string text;
  if (!readFile(path, text, err))
    return false;
  Json root;
  try {
    root = Json::parse(text);
  } catch (const Json::exception &e) {
    // "[json.exception.parse_error.101] parse error at line 3, column 5: ..."
    std::string what = e.what();
    size_t tag = what.find("] ");
    err = path + ": invalid JSON: " +
          (tag == std::string::npos ? what : what.substr(tag + 2));
    return false;
  }
  m = Manifest();
  Reader reader(path);
  if (!reader.read(root, m)) {
    err = reader.error();
    return false;
  }
  return true;
}

} // namespace manifest
} // namespace gpipe
