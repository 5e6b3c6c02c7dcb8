// Internal NumPy .npy reader/writer used by gp_main (and the unit tests).
#ifndef GPIPE_RUNTIME_NPY_H
#define GPIPE_RUNTIME_NPY_H

#include "gpipe/runtime.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace gpipe {

/// Bytes per element of a runtime dtype.
int64_t dtypeSize(gp_dtype dtype);
/// The .npy descr string of a runtime dtype ("<f4", "<i8").
const char *dtypeDescr(gp_dtype dtype);
/// "(2, 3)", the way NumPy prints a shape.
std::string shapeToString(const int64_t *shape, size_t rank);
std::string shapeToString(const std::vector<int64_t> &shape);

/// Where a validated .npy image keeps its elements, and their shape.
struct NpyLayout {
  size_t dataOffset = 0;
  int64_t dataBytes = 0;
  std::vector<int64_t> shape;
};

/// Validates the .npy image [data, data + size) against `expected`: the
/// checks NpyFile::open makes once the file is mapped (magic, version,
/// header, dtype, C order, data size). On failure returns false and sets
/// `err` without a file name. The in-memory entry point of the fuzz harness.
bool npyParse(const unsigned char *data, size_t size, gp_dtype expected,
              NpyLayout &layout, std::string &err);

/// A read-only .npy file mapped into memory. Move-only; unmaps on destruction.
class NpyFile {
public:
  NpyFile() = default;
  NpyFile(const NpyFile &) = delete;
  NpyFile &operator=(const NpyFile &) = delete;
  NpyFile(NpyFile &&other) noexcept;
  NpyFile &operator=(NpyFile &&other) noexcept;
  ~NpyFile();

  /// Maps `path` and validates its header against `expected`. On failure
  /// returns false and sets `err` to a message that names the file (no
  /// "gpipe: error:" prefix).
  bool open(const std::string &path, gp_dtype expected, std::string &err);

  const std::vector<int64_t> &shape() const { return shape_; }
  gp_dtype dtype() const { return dtype_; }
  int64_t numElements() const;
  /// Start of the element data (C order, little-endian).
  const unsigned char *data() const { return map_ + dataOffset_; }
  int64_t dataBytes() const { return dataBytes_; }
  /// Drops the mapped pages of data bytes [begin, end) from the process's
  /// resident memory (they are read again from the file if touched): a
  /// large file copied piece by piece then never stays resident whole.
  void release(int64_t begin, int64_t end) const;

private:
  void reset();

  unsigned char *map_ = nullptr;
  size_t mapSize_ = 0;
  size_t dataOffset_ = 0;
  int64_t dataBytes_ = 0;
  gp_dtype dtype_ = GP_F32;
  std::vector<int64_t> shape_;
};

/// Writes a v1.0 '<f4' .npy file atomically (PATH.tmp, then rename).
bool npyWriteF32(const std::string &path, const float *data,
                 const int64_t *shape, size_t rank, std::string &err);

/// The same with the data copied from `length` bytes at `offset` of the
/// file `source` (ONNX external data) a piece at a time: the tensor is never
/// in memory whole. A source shorter than the shape needs is an error.
bool npyWriteF32FromFile(const std::string &path, const int64_t *shape,
                         size_t rank, const std::string &source,
                         int64_t offset, std::string &err);

} // namespace gpipe

#endif // GPIPE_RUNTIME_NPY_H
