// Reads ONNX tensor data stored outside the model file (external data).
#ifndef GPIPE_COMPILER_EXTERNALDATA_H
#define GPIPE_COMPILER_EXTERNALDATA_H

#include <onnx/onnx_pb.h>

#include <string>

namespace gpipe {

/// Reads the bytes of `tensor`, whose data_location is EXTERNAL, from the file
/// its `location` names relative to `modelDir` (honouring `offset` and
/// `length`). On failure returns false and sets `err` to a message naming the
/// tensor and the file.
bool readExternalData(const onnx::TensorProto &tensor,
                      const std::string &modelDir, std::string &bytes,
                      std::string &err);

} // namespace gpipe

#endif
