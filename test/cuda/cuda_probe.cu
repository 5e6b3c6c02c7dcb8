// Exits 0 when a CUDA device can run kernels; else prints why and exits 1
// (gpu_test.sh turns that into a skipped test).
#include <cuda_runtime.h>

#include <cstdio>

__global__ void touch(int *p) { *p = 42; }

int main() {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    std::printf("%s", e != cudaSuccess ? cudaGetErrorString(e)
                                       : "cudaGetDeviceCount found none");
    return 1;
  }
  int *p = nullptr, host = 0;
  if ((e = cudaMalloc(&p, sizeof(int))) == cudaSuccess) {
    touch<<<1, 1>>>(p);
    e = cudaMemcpy(&host, p, sizeof(int), cudaMemcpyDeviceToHost);
    cudaFree(p);
  }
  if (e != cudaSuccess || host != 42) {
    std::printf("a test kernel did not run: %s", cudaGetErrorString(e));
    return 1;
  }
  cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, 0);
  std::printf("%d device(s), device 0: %s (sm_%d%d)\n", count, prop.name,
              prop.major, prop.minor);
  return 0;
}
