// Reads ONNX tensor data stored outside the model file (external data).
#ifndef GPIPE_COMPILER_EXTERNALDATA_H
#define GPIPE_COMPILER_EXTERNALDATA_H

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <string>

namespace gpipe {

/// Whether the `location` of `tensor` (data_location EXTERNAL) names a file in
/// `modelDir` or below it: a relative path without a ".." component whose real
/// path (symbolic links followed) stays inside the directory's. Otherwise
/// returns false and sets `err` to a message naming the tensor and the
/// location (ONNX 1.16+'s own loader refuses the same).
bool checkExternalDataLocation(const onnx::TensorProto &tensor,
                               const std::string &modelDir, std::string &err);

/// Where the bytes of `tensor` (data_location EXTERNAL) are: `file` (its
/// location under `modelDir`), `offset` and `length` (to the file's end when
/// absent), checked against the file's size (checkExternalDataLocation
/// first). On failure returns false and sets `err` naming the tensor.
bool locateExternalData(const onnx::TensorProto &tensor,
                        const std::string &modelDir, std::string &file,
                        int64_t &offset, int64_t &length, std::string &err);

/// Reads the bytes of `tensor`, whose data_location is EXTERNAL, from the file
/// its `location` names relative to `modelDir` (honouring `offset` and
/// `length`; checkExternalDataLocation first). On failure returns false and
/// sets `err` to a message naming the tensor and the file.
bool readExternalData(const onnx::TensorProto &tensor,
                      const std::string &modelDir, std::string &bytes,
                      std::string &err);

} // namespace gpipe

#endif
