// CPU pooling kernels (gp_max_pool, gp_avg_pool and their gradients): one
// [n, c] plane per OpenMP iteration, windows as torch scans them (pool.h).
#include "pool.h"
#include "internal.h"

#include <algorithm>

using gpipe::avgPoolWindow;
using gpipe::maxPoolWindow;

// Planes in parallel once there is enough work to share (internal.h).
using gpipe::kParallelMin;

void gp_max_pool(const float *x, float *y, int64_t *idx, int64_t nc,
                 gp_pool_window w) {
  int64_t in = w.ih * w.iw, out = w.oh * w.ow;
#pragma omp parallel for schedule(static) if (nc * out * w.kh * w.kw >=        \
                                              kParallelMin)
  for (int64_t p = 0; p < nc; ++p)
    for (int64_t oh = 0; oh < w.oh; ++oh)
      for (int64_t ow = 0; ow < w.ow; ++ow) {
        int64_t o = p * out + oh * w.ow + ow;
        maxPoolWindow(x + p * in, w, oh, ow, &y[o], &idx[o]);
      }
}

void gp_max_pool_bwd(const int64_t *idx, const float *dy, float *dx, int64_t nc,
                     int64_t in_plane, int64_t out_plane) {
#pragma omp parallel for schedule(static) if (nc * in_plane >= kParallelMin)
  for (int64_t p = 0; p < nc; ++p) {
    float *d = dx + p * in_plane;
    std::fill(d, d + in_plane, 0.0f);
    for (int64_t o = p * out_plane; o < (p + 1) * out_plane; ++o)
      d[idx[o]] += dy[o];
  }
}

void gp_avg_pool(const float *x, float *y, int64_t nc, gp_pool_window w,
                 int32_t count_include_pad) {
  int64_t in = w.ih * w.iw, out = w.oh * w.ow;
#pragma omp parallel for schedule(static) if (nc * out * w.kh * w.kw >=        \
                                              kParallelMin)
  for (int64_t p = 0; p < nc; ++p)
    for (int64_t oh = 0; oh < w.oh; ++oh)
      for (int64_t ow = 0; ow < w.ow; ++ow) {
        int64_t hb, he, wb, we;
        float div =
            avgPoolWindow(w, oh, ow, count_include_pad, &hb, &he, &wb, &we);
        const float *plane = x + p * in;
        float sum = 0.0f;
        for (int64_t h = hb; h < he; ++h)
          for (int64_t c = wb; c < we; ++c)
            sum += plane[h * w.iw + c];
        y[p * out + oh * w.ow + ow] = sum / div;
      }
}

void gp_avg_pool_bwd(const float *dy, float *dx, int64_t nc, gp_pool_window w,
                     int32_t count_include_pad) {
  int64_t in = w.ih * w.iw, out = w.oh * w.ow;
#pragma omp parallel for schedule(static) if (nc * out * w.kh * w.kw >=        \
                                              kParallelMin)
  for (int64_t p = 0; p < nc; ++p) {
    float *plane = dx + p * in;
    std::fill(plane, plane + in, 0.0f);
    for (int64_t oh = 0; oh < w.oh; ++oh)
      for (int64_t ow = 0; ow < w.ow; ++ow) {
        int64_t hb, he, wb, we;
        float div =
            avgPoolWindow(w, oh, ow, count_include_pad, &hb, &he, &wb, &we);
        float g = dy[p * out + oh * w.ow + ow] / div;
        for (int64_t h = hb; h < he; ++h)
          for (int64_t c = wb; c < we; ++c)
            plane[h * w.iw + c] += g;
      }
  }
}
