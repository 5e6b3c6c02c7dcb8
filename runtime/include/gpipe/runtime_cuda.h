// The extra API that CUDA stage programs (--target cuda) call, beside the
// kernels of gpipe/runtime.h. In the CUDA runtime every tensor pointer handed
// to a kernel (runtime.h's and these) is a device pointer into the stage's
// arena, and every kernel is enqueued on the compute stream (gp_cuda_stream)
// and returns at once: generated code never synchronises.
#ifndef GPIPE_RUNTIME_CUDA_H
#define GPIPE_RUNTIME_CUDA_H

#include "gpipe/runtime.h"

#include <cuda_runtime.h>

extern "C" {

/// How a GEMM multiplies.
enum gp_math : int32_t {
  GP_MATH_F32 = 0,  // fp32 inputs, fp32 products (no TF32)
  GP_MATH_TF32 = 1, // fp32 inputs rounded to TF32 by the tensor cores
  GP_MATH_BF16 = 2  // bf16 inputs, fp32 accumulation and output
};

/// The stream every generated kernel and runtime kernel runs on.
cudaStream_t gp_cuda_stream(void);

/// gp_gemm with cuBLASLt and more: C[M,N] = alpha*op(A)*op(B) + beta*C
/// (+ bias[N] on every row when bias != nullptr: the bias epilogue; then
/// max(., 0) when relu != 0: the relu epilogue), row-major as gp_gemm. `math`
/// picks the products (gp_math). With GP_MATH_BF16, A16 and B16 may point at
/// bf16 copies of A and B (same layout and strides), e.g. the bf16 shadows of
/// parameters; a null one is rounded from the fp32 operand into the runtime's
/// scratch (program->scratch_bytes) first. C stays fp32.
void gp_gemm_ex(int transA, int transB, int64_t M, int64_t N, int64_t K,
                float alpha, const float *A, int64_t lda, const float *B,
                int64_t ldb, float beta, float *C, int64_t ldc,
                const float *bias, int32_t relu, int32_t math, const void *A16,
                const void *B16);

/// Ends the run ("gpipe: error: stage S: CUDA error ...") unless `err` is
/// cudaSuccess: generated code checks its own CUDA calls with it.
void gp_cuda_check(cudaError_t err);

/// out[i] = bf16(in[i]) (round to nearest even), n elements; out is bf16.
void gp_cast_bf16(const float *in, void *out, int64_t n);

} // extern "C"

#endif // GPIPE_RUNTIME_CUDA_H
