// Graph inputs of a stage: opening and checking the data files, and the
// micro-batch copies (gp_load_input) and label counts (gp_count_labels) the
// generated code asks for.
#include "internal.h"
#include "random.h"

#include <algorithm>
#include <cstring>
#include <sys/stat.h>
#include <vector>

namespace gpipe {
namespace {

std::string joinPath(const std::string &dir, const std::string &file) {
  if (dir.empty() || dir.back() == '/')
    return dir + file;
  return dir + "/" + file;
}

bool fileExists(const std::string &path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

/// "(S, 28, 28)": an input's shape with the sample axis left open.
std::string sampleShape(const gp_tensor_desc &d) {
  std::string s = shapeToString(d.shape, static_cast<size_t>(d.rank));
  size_t end = s.find_first_of(",)");
  return "(S" + s.substr(end);
}

const Runtime &runtimeOf(const gp_step_ctx *ctx, const char *what) {
  const Runtime *rt =
      ctx ? static_cast<const Runtime *>(ctx->runtime) : nullptr;
  if (!rt)
    fatal(ctx, 1,
          std::string("invalid program: ") + what + " called outside gp_main");
  return *rt;
}

const InputData &inputOf(const gp_step_ctx *ctx, const Runtime &rt,
                         int32_t input, const char *what) {
  if (input < 0 || input >= rt.program->num_inputs)
    fatal(ctx, 1,
          std::string("invalid program: ") + what + " of input " +
              std::to_string(input) + "; the stage has " +
              std::to_string(rt.program->num_inputs) + " graph input(s)");
  return rt.inputs[static_cast<size_t>(input)];
}

/// Fisher-Yates over the rows 0..n-1: for i = n-1 down to 1, swap rows i
/// and j = r_i mod (i + 1), r_i = mix64(mix64(mix64(seed) ^ epoch) ^ i).
void shuffledOrder(int64_t n, uint64_t seed, int64_t epoch,
                   std::vector<int64_t> &rows) {
  rows.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    rows[static_cast<size_t>(i)] = i;
  const uint64_t key = mix64(mix64(seed) ^ static_cast<uint64_t>(epoch));
  for (int64_t i = n - 1; i > 0; --i) {
    uint64_t r = mix64(key ^ static_cast<uint64_t>(i));
    int64_t j = static_cast<int64_t>(r % static_cast<uint64_t>(i + 1));
    std::swap(rows[static_cast<size_t>(i)], rows[static_cast<size_t>(j)]);
  }
}

int64_t samplesOf(const Runtime &rt) {
  return rt.inputs.empty() ? 0 : rt.inputs[0].file.shape()[0];
}

/// The order of `epoch` (file order without --shuffle: rows stay empty).
void orderFor(const Runtime &rt, int64_t epoch, EpochOrder &order) {
  if (order.epoch == epoch)
    return;
  order.epoch = epoch;
  if (rt.shuffle)
    shuffledOrder(samplesOf(rt), rt.seed, epoch, order.rows);
  else
    order.rows.clear();
}

/// Gathers rows [first, first + count) of `order` of input `in` to `dst`.
void gatherRows(const InputData &in, const EpochOrder &order, int64_t first,
                int64_t count, unsigned char *dst) {
  const size_t rowBytes = static_cast<size_t>(in.rowBytes);
  if (order.rows.empty()) {
    std::memcpy(dst, in.file.data() + first * in.rowBytes,
                static_cast<size_t>(count) * rowBytes);
    return;
  }
  for (int64_t k = 0; k < count; ++k)
    std::memcpy(dst + static_cast<size_t>(k) * rowBytes,
                in.file.data() +
                    order.rows[static_cast<size_t>(first + k)] * in.rowBytes,
                rowBytes);
}

} // namespace

void selectMiniBatch(Runtime &rt, int64_t step) {
  rt.miniStep = step;
  if (rt.numBatches == 0) {
    rt.miniFirst = 0;
    return;
  }
  int64_t epoch = (step - 1) / rt.numBatches;
  rt.miniFirst = (step - 1) % rt.numBatches * rt.globalBatch + rt.replicaOffset;
  orderFor(rt, epoch, rt.order);
  for (InputData &in : rt.inputs) {
    if (rt.order.rows.empty()) {
      in.cur = in.file.data() + rt.miniFirst * in.rowBytes;
      continue;
    }
    in.gathered.resize(static_cast<size_t>(rt.batchSize * in.rowBytes));
    gatherRows(in, rt.order, rt.miniFirst, rt.batchSize, in.gathered.data());
    in.cur = in.gathered.data();
  }
}

void copyMiniBatch(const Runtime &rt, int64_t step, int32_t input, void *dst) {
  EpochOrder order;
  int64_t epoch = (step - 1) / rt.numBatches;
  const EpochOrder *o = &rt.order;
  if (rt.order.epoch != epoch) {
    orderFor(rt, epoch, order);
    o = &order;
  }
  gatherRows(rt.inputs[static_cast<size_t>(input)], *o,
             (step - 1) % rt.numBatches * rt.globalBatch + rt.replicaOffset,
             rt.batchSize, static_cast<unsigned char *>(dst));
}

int64_t fileRow(const Runtime &rt, int64_t position) {
  if (rt.order.rows.empty() || position < 0 ||
      position >= static_cast<int64_t>(rt.order.rows.size()))
    return position;
  return rt.order.rows[static_cast<size_t>(position)];
}

bool openInputs(Runtime &rt, const std::string &dataDir, int64_t &numBatches,
                std::string &err) {
  const gp_program *program = rt.program;
  rt.inputs.clear();
  rt.inputs.resize(static_cast<size_t>(program->num_inputs));
  numBatches = 0;
  for (int32_t i = 0; i < program->num_inputs; ++i) {
    const gp_tensor_desc &d = program->inputs[i];
    InputData &in = rt.inputs[static_cast<size_t>(i)];
    in.path = joinPath(dataDir, std::string(d.name) + ".npy");
    if (!fileExists(in.path)) {
      err =
          "missing data file " + in.path + " for graph input '" + d.name + "'";
      return false;
    }
    if (!in.file.open(in.path, d.dtype, err))
      return false;
    const std::vector<int64_t> &s = in.file.shape();
    bool sameRow = s.size() == static_cast<size_t>(d.rank);
    for (int32_t k = 1; sameRow && k < d.rank; ++k)
      sameRow = s[static_cast<size_t>(k)] == d.shape[k];
    if (!sameRow) {
      err = in.path + ": expected shape " + sampleShape(d) +
            " for graph input '" + d.name + "', found " + shapeToString(s);
      return false;
    }
    int64_t rowElems = 1;
    for (int32_t k = 1; k < d.rank; ++k)
      rowElems *= d.shape[k];
    in.rowBytes = rowElems * dtypeSize(d.dtype);
    if (s[0] < rt.globalBatch) {
      err = in.path + ": " + std::to_string(s[0]) +
            " samples, fewer than the mini-batch size " +
            std::to_string(rt.globalBatch) + " of graph input '" + d.name + "'";
      return false;
    }
    // Only this stage's files can be compared here; every stage's must have
    // the same number of rows (the user guide says so).
    if (i == 0) {
      numBatches = s[0] / rt.globalBatch;
    } else if (s[0] != rt.inputs[0].file.shape()[0]) {
      err = in.path + " has " + std::to_string(s[0]) + " samples but " +
            rt.inputs[0].path + " has " +
            std::to_string(rt.inputs[0].file.shape()[0]);
      return false;
    }
  }
  return true;
}

void checkRange(const gp_step_ctx *ctx, const int64_t *values, int64_t n,
                int64_t lo, int64_t hi, int32_t hasIgnore, int64_t ignoreIndex,
                const char *input, int64_t rowOffset, int64_t perSample,
                const char *what) {
  for (int64_t k = 0; k < n; ++k) {
    int64_t v = values[k];
    if ((v >= lo && v < hi) || (hasIgnore && v == ignoreIndex))
      continue;
    int64_t position = ctx->first_sample + rowOffset + k / perSample;
    const Runtime *rt =
        ctx ? static_cast<const Runtime *>(ctx->runtime) : nullptr;
    std::string msg =
        std::string("graph input '") + input + "', sample " +
        std::to_string(rt ? fileRow(*rt, position) : position) +
        (perSample > 1 ? ", element " + std::to_string(k % perSample) : "") +
        " (step " + std::to_string(ctx->step) + "): " + what + " " +
        std::to_string(v) + " is outside [" + std::to_string(lo) + ", " +
        std::to_string(hi) + ")" +
        (hasIgnore ? " and is not the ignore_index" : "");
    // Names the stage, writes its status, tears the other stages down.
    fatal(ctx, 1, msg);
  }
}

/// The int64 rows of micro-batch `microbatch` of graph input `input`, read
/// from its data file, checked to lie in [lo, hi) (checkRange); `caller`
/// names the runtime function in errors of the program.
void checkInputRange(const gp_step_ctx *ctx, int32_t input, int64_t microbatch,
                     int64_t lo, int64_t hi, int32_t hasIgnore,
                     int64_t ignoreIndex, const char *caller,
                     const char *what) {
  const Runtime &rt = runtimeOf(ctx, caller);
  const InputData &in = inputOf(ctx, rt, input, caller);
  const gp_tensor_desc &d = rt.program->inputs[input];
  if (d.dtype != GP_I64 || microbatch < 0 ||
      microbatch >= rt.program->microbatches)
    fatal(ctx, 1,
          std::string("invalid program: ") + caller + " of graph input '" +
              d.name + "', micro-batch " + std::to_string(microbatch));
  int64_t first = rt.miniFirst + microbatch * rt.microRows;
  int64_t perSample = in.rowBytes / 8;
  int64_t n = rt.microRows * perSample;
  // Rows of a mapped .npy may be unaligned: copy before reading int64s.
  std::vector<int64_t> values(static_cast<size_t>(n));
  std::memcpy(values.data(), in.cur + microbatch * rt.microRows * in.rowBytes,
              static_cast<size_t>(n * 8));
  checkRange(ctx, values.data(), n, lo, hi, hasIgnore, ignoreIndex, d.name,
             first - ctx->first_sample, std::max<int64_t>(perSample, 1), what);
}

} // namespace gpipe

using gpipe::fatal;

extern "C" void gp_load_input(gp_step_ctx *ctx, int32_t input,
                              int64_t microbatch, void *dst) {
  const gpipe::Runtime &rt = gpipe::runtimeOf(ctx, "gp_load_input");
  const gpipe::InputData &in = gpipe::inputOf(ctx, rt, input, "gp_load_input");
  if (microbatch < 0 || microbatch >= rt.program->microbatches)
    fatal(ctx, 1,
          "invalid program: gp_load_input of micro-batch " +
              std::to_string(microbatch) + "; the pipeline has " +
              std::to_string(rt.program->microbatches));
  gpipe::deviceLoadInput(ctx, input, microbatch, dst,
                         in.cur + microbatch * rt.microRows * in.rowBytes,
                         rt.microRows * in.rowBytes);
}

extern "C" void gp_check_input_labels(const gp_step_ctx *ctx, int32_t input,
                                      int64_t microbatch, int64_t classes,
                                      int32_t has_ignore,
                                      int64_t ignore_index) {
  gpipe::checkInputRange(ctx, input, microbatch, 0, classes, has_ignore,
                         ignore_index, "gp_check_input_labels", "label");
}

extern "C" void gp_check_input_indices(const gp_step_ctx *ctx, int32_t input,
                                       int64_t microbatch, int64_t rows) {
  gpipe::checkInputRange(ctx, input, microbatch, -rows, rows, 0, 0,
                         "gp_check_input_indices", "index");
}

extern "C" int64_t gp_count_labels(gp_step_ctx *ctx, int32_t input,
                                   int32_t has_ignore, int64_t ignore_index) {
  const gpipe::Runtime &rt = gpipe::runtimeOf(ctx, "gp_count_labels");
  const gpipe::InputData &in =
      gpipe::inputOf(ctx, rt, input, "gp_count_labels");
  if (rt.program->inputs[input].dtype != GP_I64)
    fatal(ctx, 1,
          std::string("invalid program: gp_count_labels of graph input '") +
              rt.program->inputs[input].name + "', which is not int64");
  int64_t n =
      rt.batchSize * in.rowBytes / static_cast<int64_t>(sizeof(int64_t));
  const unsigned char *base = in.cur;
  if (!has_ignore)
    return n;
  int64_t count = 0;
  for (int64_t i = 0; i < n; ++i) {
    int64_t label;
    std::memcpy(&label, base + i * 8, sizeof(label)); // rows may be unaligned
    count += label != ignore_index;
  }
  return count;
}
