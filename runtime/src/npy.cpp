// NumPy .npy format (v1.0/2.0/3.0) reading via mmap and atomic v1.0 writing.
#include "npy.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <functional>
#include <limits>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <utility>
#include <vector>

namespace gpipe {

int64_t dtypeSize(gp_dtype dtype) { return dtype == GP_I64 ? 8 : 4; }

const char *dtypeDescr(gp_dtype dtype) {
  return dtype == GP_I64 ? "<i8" : "<f4";
}

std::string shapeToString(const int64_t *shape, size_t rank) {
  std::string s = "(";
  for (size_t i = 0; i < rank; ++i) {
    if (i)
      s += ", ";
    s += std::to_string(shape[i]);
  }
  // A 1-tuple keeps its trailing comma, as in Python.
  if (rank == 1)
    s += ",";
  return s + ")";
}

std::string shapeToString(const std::vector<int64_t> &shape) {
  return shapeToString(shape.data(), shape.size());
}

namespace {

const char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;

/// Recursive-descent parser for the Python dict literal in a .npy header,
/// e.g. {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }.
class HeaderParser {
public:
  HeaderParser(const char *begin, const char *end) : p_(begin), end_(end) {}

  bool parse(std::string &descr, bool &fortran, std::vector<int64_t> &shape,
             std::string &err) {
    bool haveDescr = false, haveFortran = false, haveShape = false;
    skipWs();
    if (!consume('{'))
      return fail(err, "expected '{'");
    for (;;) {
      skipWs();
      if (consume('}'))
        break;
      std::string key;
      if (!parseString(key))
        return fail(err, "expected a quoted key");
      skipWs();
      if (!consume(':'))
        return fail(err, "expected ':' after '" + key + "'");
      skipWs();
      if (key == "descr") {
        if (!parseString(descr))
          return fail(err, "'descr' is not a simple dtype string");
        haveDescr = true;
      } else if (key == "fortran_order") {
        std::string word = parseWord();
        if (word != "True" && word != "False")
          return fail(err, "'fortran_order' must be True or False");
        fortran = word == "True";
        haveFortran = true;
      } else if (key == "shape") {
        if (!parseShape(shape))
          return fail(err, "'shape' is not a tuple of non-negative integers");
        haveShape = true;
      } else {
        return fail(err, "unexpected key '" + key + "'");
      }
      skipWs();
      if (consume(','))
        continue;
      skipWs();
      if (consume('}'))
        break;
      return fail(err, "expected ',' or '}'");
    }
    if (!haveDescr || !haveFortran || !haveShape)
      return fail(err, "missing 'descr', 'fortran_order' or 'shape'");
    return true;
  }

private:
  static bool fail(std::string &err, const std::string &msg) {
    err = msg;
    return false;
  }
  void skipWs() {
    while (p_ < end_ && (*p_ == ' ' || *p_ == '\t' || *p_ == '\n' ||
                         *p_ == '\r' || *p_ == '\0'))
      ++p_;
  }
  bool consume(char c) {
    if (p_ < end_ && *p_ == c) {
      ++p_;
      return true;
    }
    return false;
  }
  bool parseString(std::string &out) {
    if (p_ >= end_ || (*p_ != '\'' && *p_ != '"'))
      return false;
    char quote = *p_++;
    out.clear();
    while (p_ < end_ && *p_ != quote)
      out += *p_++;
    return consume(quote);
  }
  std::string parseWord() {
    std::string w;
    while (p_ < end_ &&
           ((*p_ >= 'a' && *p_ <= 'z') || (*p_ >= 'A' && *p_ <= 'Z')))
      w += *p_++;
    return w;
  }
  bool parseInt(int64_t &v) {
    if (p_ >= end_ || *p_ < '0' || *p_ > '9')
      return false;
    v = 0;
    while (p_ < end_ && *p_ >= '0' && *p_ <= '9') {
      int d = *p_++ - '0';
      if (v > (std::numeric_limits<int64_t>::max() - d) / 10)
        return false;
      v = v * 10 + d;
    }
    consume('L'); // Python 2 longs in very old files.
    return true;
  }
  bool parseShape(std::vector<int64_t> &shape) {
    shape.clear();
    if (!consume('('))
      return false;
    for (;;) {
      skipWs();
      if (consume(')'))
        return true;
      int64_t v;
      if (!parseInt(v))
        return false;
      shape.push_back(v);
      skipWs();
      if (consume(','))
        continue;
      skipWs();
      return consume(')');
    }
  }

  const char *p_;
  const char *end_;
};

uint32_t readLE(const unsigned char *p, int bytes) {
  uint32_t v = 0;
  for (int i = bytes - 1; i >= 0; --i)
    v = (v << 8) | p[i];
  return v;
}

} // namespace

bool npyParse(const unsigned char *buf, size_t size, gp_dtype expected,
              NpyLayout &layout, std::string &err) {
  layout = NpyLayout();
  auto failWith = [&](const std::string &msg) {
    layout = NpyLayout();
    err = msg;
    return false;
  };
  if (size < kMagicLen || std::memcmp(buf, kMagic, kMagicLen) != 0)
    return failWith("not a .npy file (bad magic)");
  if (size < kMagicLen + 2)
    return failWith("truncated .npy header");
  int major = buf[6], minor = buf[7];
  if (major < 1 || major > 3 || minor != 0)
    return failWith("unsupported .npy format version " + std::to_string(major) +
                    "." + std::to_string(minor));
  int lenBytes = major == 1 ? 2 : 4;
  size_t prefix = kMagicLen + 2 + lenBytes;
  if (size < prefix)
    return failWith("truncated .npy header");
  size_t headerLen = readLE(buf + kMagicLen + 2, lenBytes);
  if (size - prefix < headerLen)
    return failWith("truncated .npy header (" + std::to_string(headerLen) +
                    " header bytes announced, " +
                    std::to_string(size - prefix) + " present)");

  std::string descr, parseErr;
  bool fortran = false;
  const char *h = reinterpret_cast<const char *>(buf + prefix);
  if (!HeaderParser(h, h + headerLen)
           .parse(descr, fortran, layout.shape, parseErr))
    return failWith("malformed .npy header: " + parseErr);

  const char *want = dtypeDescr(expected);
  if (descr != want) {
    if (!descr.empty() && descr[0] == '>')
      return failWith("big-endian dtype '" + descr +
                      "' is not supported (expected '" + want + "')");
    return failWith("dtype '" + descr + "' does not match expected '" + want +
                    "'");
  }
  if (fortran)
    return failWith("fortran_order True is not supported (expected C order; "
                    "save with np.ascontiguousarray)");

  // Guard the element count against overflow before trusting it.
  int64_t elems = 1;
  const int64_t maxBytes = std::numeric_limits<int64_t>::max() / 8;
  for (int64_t d : layout.shape) {
    if (d != 0 && elems > maxBytes / d)
      return failWith("shape " + shapeToString(layout.shape) + " is too large");
    elems *= d;
  }
  layout.dataOffset = prefix + headerLen;
  layout.dataBytes = elems * dtypeSize(expected);
  size_t have = size - layout.dataOffset;
  if (have < static_cast<uint64_t>(layout.dataBytes))
    return failWith("truncated data: shape " + shapeToString(layout.shape) +
                    " needs " + std::to_string(layout.dataBytes) +
                    " bytes, file has " + std::to_string(have));
  if (have > static_cast<uint64_t>(layout.dataBytes))
    return failWith(std::to_string(have - layout.dataBytes) +
                    " unexpected trailing bytes after the data of shape " +
                    shapeToString(layout.shape));
  return true;
}

NpyFile::NpyFile(NpyFile &&other) noexcept { *this = std::move(other); }

NpyFile &NpyFile::operator=(NpyFile &&other) noexcept {
  if (this != &other) {
    reset();
    map_ = other.map_;
    mapSize_ = other.mapSize_;
    dataOffset_ = other.dataOffset_;
    dataBytes_ = other.dataBytes_;
    dtype_ = other.dtype_;
    shape_ = std::move(other.shape_);
    other.map_ = nullptr;
    other.mapSize_ = 0;
  }
  return *this;
}

NpyFile::~NpyFile() { reset(); }

void NpyFile::reset() {
  if (map_)
    munmap(map_, mapSize_);
  map_ = nullptr;
  mapSize_ = 0;
  dataOffset_ = 0;
  dataBytes_ = 0;
  shape_.clear();
}

int64_t NpyFile::numElements() const {
  int64_t n = 1;
  for (int64_t d : shape_)
    n *= d;
  return n;
}

bool NpyFile::open(const std::string &path, gp_dtype expected,
                   std::string &err) {
  reset();
  auto fail = [&](const std::string &msg) {
    reset();
    err = path + ": " + msg;
    return false;
  };

  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return fail(std::string("cannot open: ") + std::strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    return fail(std::string("cannot stat: ") + std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return fail("not a regular file");
  }
  size_t size = static_cast<size_t>(st.st_size);
  if (size == 0) {
    ::close(fd);
    return fail("empty file, not a .npy file");
  }
  void *m = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  int mapErr = errno;
  ::close(fd);
  if (m == MAP_FAILED)
    return fail(std::string("cannot mmap: ") + std::strerror(mapErr));
  map_ = static_cast<unsigned char *>(m);
  mapSize_ = size;

  NpyLayout layout;
  std::string parseErr;
  if (!npyParse(map_, size, expected, layout, parseErr))
    return fail(parseErr);
  dtype_ = expected;
  shape_ = std::move(layout.shape);
  dataOffset_ = layout.dataOffset;
  dataBytes_ = layout.dataBytes;
  return true;
}

void NpyFile::release(int64_t begin, int64_t end) const {
  static const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  // Whole pages inside the range only.
  size_t from = dataOffset_ + static_cast<size_t>(begin);
  size_t to = dataOffset_ + static_cast<size_t>(end);
  from = (from + page - 1) / page * page;
  to = to / page * page;
  if (map_ && to > from)
    ::madvise(map_ + from, to - from, MADV_DONTNEED);
}

namespace {

/// Writes the .npy header for `shape`, then the data `copy` writes to the
/// file (returning false with errno set on failure), atomically.
bool npyWriteWith(const std::string &path, const int64_t *shape, size_t rank,
                  const std::function<bool(FILE *, size_t)> &copy,
                  std::string &err) {
  int64_t elems = 1;
  for (size_t i = 0; i < rank; ++i)
    elems *= shape[i];

  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': " +
                     shapeToString(shape, rank) + ", }";
  // NumPy pads the header with spaces and a final newline so the data starts
  // on a 64-byte boundary.
  size_t unpadded = kMagicLen + 2 + 2 + dict.size() + 1;
  dict.append((64 - unpadded % 64) % 64, ' ');
  dict += '\n';
  if (dict.size() > 0xffff) {
    err = path + ": header too long for .npy v1.0";
    return false;
  }

  unsigned char prefix[10];
  std::memcpy(prefix, kMagic, kMagicLen);
  prefix[6] = 1;
  prefix[7] = 0;
  prefix[8] = static_cast<unsigned char>(dict.size() & 0xff);
  prefix[9] = static_cast<unsigned char>(dict.size() >> 8);

  std::string tmp = path + ".tmp";
  FILE *f = std::fopen(tmp.c_str(), "wb");
  if (!f) {
    err = "cannot create " + tmp + ": " + std::strerror(errno);
    return false;
  }
  size_t bytes = static_cast<size_t>(elems) * sizeof(float);
  errno = 0;
  bool ok = std::fwrite(prefix, 1, sizeof(prefix), f) == sizeof(prefix) &&
            std::fwrite(dict.data(), 1, dict.size(), f) == dict.size() &&
            (bytes == 0 || copy(f, bytes)) && std::fflush(f) == 0 &&
            fsync(fileno(f)) == 0;
  int e = errno;
  if (std::fclose(f) != 0 && ok) {
    ok = false;
    e = errno;
  }
  if (!ok) {
    std::remove(tmp.c_str());
    if (err.empty())
      err = "cannot write " + tmp + ": " + std::strerror(e);
    return false;
  }
  // rename() is atomic: readers see either the old file or the complete new.
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    e = errno;
    std::remove(tmp.c_str());
    err = "cannot rename " + tmp + " to " + path + ": " + std::strerror(e);
    return false;
  }
  return true;
}

} // namespace

bool npyWriteF32(const std::string &path, const float *data,
                 const int64_t *shape, size_t rank, std::string &err) {
  return npyWriteWith(
      path, shape, rank,
      [&](FILE *f, size_t bytes) {
        return std::fwrite(data, 1, bytes, f) == bytes;
      },
      err);
}

bool npyWriteF32FromFile(const std::string &path, const int64_t *shape,
                         size_t rank, const std::string &source, int64_t offset,
                         std::string &err) {
  int fd = ::open(source.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    err = "cannot open " + source + ": " + std::strerror(errno);
    return false;
  }
  std::vector<char> piece(16 << 20);
  bool ok = npyWriteWith(
      path, shape, rank,
      [&](FILE *f, size_t bytes) {
        for (size_t done = 0; done < bytes;) {
          size_t n = std::min(piece.size(), bytes - done);
          ssize_t got = ::pread(fd, piece.data(), n,
                                static_cast<off_t>(offset) + off_t(done));
          if (got <= 0) {
            err = source + ": " +
                  (got == 0 ? std::string("ends before the tensor's data")
                            : std::string(std::strerror(errno)));
            return false;
          }
          if (std::fwrite(piece.data(), 1, size_t(got), f) != size_t(got))
            return false;
          done += size_t(got);
        }
        return true;
      },
      err);
  ::close(fd);
  return ok;
}

} // namespace gpipe
