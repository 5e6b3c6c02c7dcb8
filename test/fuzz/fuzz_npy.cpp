// libFuzzer harness: the bytes are a .npy file, validated as float32 and as
// int64 by the runtime's reader (npyParse, what NpyFile::open runs on the
// mapped file). A valid result's data must lie inside the input.
#include "npy.h"

#include <cstdint>
#include <cstdlib>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  for (gp_dtype dtype : {GP_F32, GP_I64}) {
    gpipe::NpyLayout layout;
    std::string err;
    if (gpipe::npyParse(data, size, dtype, layout, err)) {
      int64_t elems = 1;
      for (int64_t d : layout.shape)
        elems *= d;
      if (layout.dataOffset > size ||
          layout.dataBytes != elems * gpipe::dtypeSize(dtype) ||
          static_cast<uint64_t>(layout.dataBytes) != size - layout.dataOffset)
        std::abort();
    } else if (err.empty()) {
      std::abort(); // a failure always says why
    }
  }
  return 0;
}
