// The extra API that CUDA stage programs (--target cuda) call, beside the
// kernels of gpipe/runtime.h (gp_gemm_ex, gp_cast_bf16 included). In the CUDA
// runtime every tensor pointer handed to a kernel (runtime.h's and these) is a
// device pointer into the stage's arena, and every kernel is enqueued on the
// compute stream (gp_cuda_stream) and returns at once: generated code never
// synchronises.
#ifndef GPIPE_RUNTIME_CUDA_H
#define GPIPE_RUNTIME_CUDA_H

#include "gpipe/runtime.h"

#include <cuda_runtime.h>

extern "C" {

/// The stream every generated kernel and runtime kernel runs on.
cudaStream_t gp_cuda_stream(void);

/// Ends the run ("gpipe: error: stage S: CUDA error ...") unless `err` is
/// cudaSuccess: generated code checks its own CUDA calls with it.
void gp_cuda_check(cudaError_t err);

/// Called after every generated kernel launch: ends the run naming `kernel`
/// (the generated kernel's name) and `node` (the ONNX node(s) it computes)
/// when the launch failed (cudaGetLastError).
void gp_cuda_check_launch(const char *kernel, const char *node);

} // extern "C"

#endif // GPIPE_RUNTIME_CUDA_H
