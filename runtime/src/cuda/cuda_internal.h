// State the CUDA runtime's sources share: the device, its streams, the
// cuBLASLt handle and workspace, the bf16 scratch. Not installed.
#ifndef GPIPE_RUNTIME_CUDA_INTERNAL_H
#define GPIPE_RUNTIME_CUDA_INTERNAL_H

#include "gpipe/runtime_cuda.h"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace gpipe {
namespace cuda {

struct DeviceState {
  int device = -1;                // the GPU this stage bound
  cudaStream_t compute = nullptr; // every kernel
  cudaStream_t comm = nullptr;    // sends and receives
  cublasLtHandle_t lt = nullptr;
  void *workspace = nullptr; // cuBLASLt workspace
  size_t workspaceBytes = 0;
  void *scratch = nullptr; // bf16 copies of GEMM operands (gp_gemm_ex)
  size_t scratchBytes = 0;
  // The fused attention's score tiles (gp_attention_fwd / _bwd): a fixed
  // kAttentionWorkspaceBytes allocated at start-up, the batch processed in
  // chunks of as many blocks as fit; grown (setAttentionWorkspace) only when
  // a single block's two [Tq, Tk] fp32 tiles exceed it.
  void *attention = nullptr;
  size_t attentionBytes = 0;
  int32_t defaultMath = GP_MATH_F32; // what plain gp_gemm uses
};

/// The process's device state (one stage per process).
DeviceState &state();

/// The attention workspace allocated at start-up (deviceInit,
/// testInitDevice): 256 MiB, 32 blocks of T = 1024 in the backward.
constexpr size_t kAttentionWorkspaceBytes = size_t(256) << 20;

/// Replaces the attention workspace with one of exactly `bytes` (after the
/// compute stream's work is done: the old one may be in use). gp_attention_*
/// call it only when one block needs more than the workspace has; unit tests
/// call it to shrink the workspace so that the batch runs in several chunks.
void setAttentionWorkspace(size_t bytes);

/// gp_gemm_ex's fallbacks when cublasLtMatmul rejects an algorithm the
/// heuristic proposed: counts, for logs and tests.
struct GemmFallbacks {
  int64_t algorithm = 0; // moved on to the heuristic's next algorithm
  int64_t epilogue = 0;  // dropped a fused epilogue for the kernel
  // GEMM plans (one per shape and alignments) whose bias was under 16-byte
  // alignment, so the kernel applies the epilogue from the start.
  int64_t unalignedBias = 0;
};
GemmFallbacks &gemmFallbacks();

/// Whether gp_gemm_ex may hand `bias` (null: no bias) to cuBLASLt's fused
/// bias epilogue: only at 16-byte alignment. cuBLASLt's heuristic does not
/// check the bias's alignment, and on sm_90 it may pick a kernel that faults
/// on a less aligned one; otherwise a kernel adds the bias after the GEMM.
/// Host-only: testable without a GPU.
bool gemmBiasEpilogueOk(const void *bias);

/// Unit tests only: make gp_gemm_ex treat cublasLtMatmul calls as rejected
/// (the next `rejectNext` attempts; every fused-epilogue attempt while
/// `rejectFused`), so the fallbacks can be checked on any GPU.
struct GemmTestHooks {
  int rejectNext = 0;
  bool rejectFused = false;
};
GemmTestHooks &gemmTestHooks();

/// This process's stage (-1 before deviceInit): for messages.
int32_t currentStage();

/// Ends the process after a failed CUDA / cuBLASLt / NCCL call:
/// "gpipe: error: stage S: CUDA error in WHAT (FILE:LINE): DETAIL".
[[noreturn]] void fail(const char *what, const char *detail, const char *file,
                       int line);

} // namespace cuda
} // namespace gpipe

#define GP_CUDA_CHECK(call)                                                    \
  do {                                                                         \
    cudaError_t gp_err_ = (call);                                              \
    if (gp_err_ != cudaSuccess)                                                \
      ::gpipe::cuda::fail(#call, cudaGetErrorString(gp_err_), __FILE__,        \
                          __LINE__);                                           \
  } while (0)

#define GP_CUBLAS_CHECK(call)                                                  \
  do {                                                                         \
    cublasStatus_t gp_st_ = (call);                                            \
    if (gp_st_ != CUBLAS_STATUS_SUCCESS)                                       \
      ::gpipe::cuda::fail(#call, cublasLtGetStatusString(gp_st_), __FILE__,    \
                          __LINE__);                                           \
  } while (0)

/// After a kernel launch: reports a bad launch configuration at once.
#define GP_CUDA_LAUNCHED() GP_CUDA_CHECK(cudaGetLastError())

#endif // GPIPE_RUNTIME_CUDA_INTERNAL_H
