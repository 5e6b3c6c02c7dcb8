// gp_batch_norm + gp_batch_norm_bwd (runtime/src/batchnorm.cpp) on ResNet-18
// shapes, the median of REPEAT forward+backward pairs; bench_batchnorm.py
// times torch's batch_norm(training=True) forward+backward on the same.
//
// Build and run (from the repository root, after bash tools/build.sh):
//   g++ -O2 -fopenmp -Iruntime/include bench/bench_batchnorm.cpp \
//     build/runtime/libgpipe_runtime.a -o /tmp/bench_batchnorm
//   OMP_NUM_THREADS=1 /tmp/bench_batchnorm [REPEAT]
#include "gpipe/runtime.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

int main(int argc, char **argv) {
  const int repeat = argc > 1 ? std::atoi(argv[1]) : 50;
  const long shapes[][3] = {{32, 64, 1024}, {32, 128, 256}, {32, 256, 64},
                            {32, 512, 16},  {256, 1024, 1}, {32, 512, 1}};
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  for (const auto &sh : shapes) {
    const long n = sh[0], c = sh[1], s = sh[2], size = n * c * s;
    std::vector<float> x(size), y(size), dy(size), dx(size), scale(c, 1.0f),
        bias(c, 0.0f), mean(c), var(c), ds(c), db(c);
    for (float &v : x)
      v = d(rng);
    for (float &v : dy)
      v = d(rng);
    std::vector<double> fwd, bwd;
    for (int r = 0; r < repeat; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      gp_batch_norm(x.data(), scale.data(), bias.data(), y.data(), mean.data(),
                    var.data(), n, c, s, 1e-5f);
      auto t1 = std::chrono::steady_clock::now();
      gp_batch_norm_bwd(x.data(), mean.data(), var.data(), scale.data(),
                        dy.data(), dx.data(), ds.data(), db.data(), n, c, s,
                        1e-5f);
      auto t2 = std::chrono::steady_clock::now();
      fwd.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
      bwd.push_back(std::chrono::duration<double, std::milli>(t2 - t1).count());
    }
    std::sort(fwd.begin(), fwd.end());
    std::sort(bwd.begin(), bwd.end());
    std::printf("[%ld, %ld, %ld]  fwd %.3f ms  bwd %.3f ms  total %.3f ms\n", n,
                c, s, fwd[repeat / 2], bwd[repeat / 2],
                fwd[repeat / 2] + bwd[repeat / 2]);
  }
  return 0;
}
