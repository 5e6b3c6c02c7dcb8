// Attention micro-benchmark (a benchmark aid, not a test): on one thread,
// the fused kernels gp_attention_fwd + gp_attention_bwd from
// libgpipe_runtime.a against the chain the unfused program calls for the
// same attention (gp_batch_gemm Q K^T, the fused div + where loop,
// gp_softmax, gp_batch_gemm P V; backward: dP = dout V^T, dV = P^T dout,
// gp_softmax_bwd, the where + div gradient loop, dQ = dS K, dK = dS^T Q),
// and against the fused algorithm written with plain loops instead of
// oneDNN GEMMs (the choice the CPU kernel makes).
//
// usage: attention_bench [BH T D REPS]   (default 128 64 32 50; causal mask)
// Build (from the repository root, after tools/build.sh):
//   g++ -O3 -march=native -fno-math-errno -fopenmp -Iruntime/include
//       -o build/attention_bench bench/attention_bench.cpp
//       build/runtime/libgpipe_runtime.a -ldnnl -lmvec $(mpicxx --showme:link)
// Run: OMP_NUM_THREADS=1 build/attention_bench
#include "gpipe/runtime.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

// exp(x - shift), 0 where masked, the masked lanes' argument 0 (as the
// runtime's kernel does: -inf lanes send libmvec's vector expf to its slow
// path).
void maskedExp(float *__restrict row, const float *__restrict mask, float shift,
               int64_t n) {
  for (int64_t j = 0; j < n; ++j) {
    const uint32_t keep = mask[j] != 0.0f ? 0u : ~0u;
    const float t = row[j] - shift;
    uint32_t bits;
    std::memcpy(&bits, &t, 4);
    bits &= keep;
    float a;
    std::memcpy(&a, &bits, 4);
    const float e = expf(a);
    std::memcpy(&bits, &e, 4);
    bits &= keep;
    std::memcpy(&row[j], &bits, 4);
  }
}

// The fused algorithm with loops: S = Q K^T via K^T rows (axpy, vectorizes),
// P V and the gradient products likewise.
void loopsFwd(const float *q, const float *k, const float *v, const float *mask,
              float *out, float *lse, int64_t B, int64_t T, int64_t d,
              float scale) {
  std::vector<float> s(T * T), kt(d * T);
  for (int64_t b = 0; b < B; ++b) {
    const float *qb = q + b * T * d, *kb = k + b * T * d, *vb = v + b * T * d;
    float *ob = out + b * T * d;
    for (int64_t j = 0; j < T; ++j)
      for (int64_t c = 0; c < d; ++c)
        kt[c * T + j] = kb[j * d + c];
    for (int64_t i = 0; i < T; ++i) {
      float *row = s.data() + i * T;
      std::fill(row, row + T, 0.0f);
      for (int64_t c = 0; c < d; ++c) {
        const float a = qb[i * d + c] * scale;
        const float *kr = kt.data() + c * T;
        for (int64_t j = 0; j < T; ++j)
          row[j] += a * kr[j];
      }
      float m = -INFINITY;
      for (int64_t j = 0; j < T; ++j)
        m = mask[i * T + j] == 0.0f && row[j] > m ? row[j] : m;
      maskedExp(row, mask + i * T, m, T);
      double sum = 0.0;
      for (int64_t j = 0; j < T; ++j)
        sum += row[j];
      const float inv = static_cast<float>(1.0 / sum);
      lse[b * T + i] = m + static_cast<float>(std::log(sum));
      float *o = ob + i * d;
      std::fill(o, o + d, 0.0f);
      for (int64_t j = 0; j < T; ++j) {
        const float p = row[j] * inv;
        for (int64_t c = 0; c < d; ++c)
          o[c] += p * vb[j * d + c];
      }
    }
  }
}

void loopsBwd(const float *q, const float *k, const float *v, const float *mask,
              const float *out, const float *lse, const float *dout, float *dq,
              float *dk, float *dv, int64_t B, int64_t T, int64_t d,
              float scale) {
  std::vector<float> p(T * T), dp(T * T), kt(d * T), vt(d * T);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t o = b * T * d;
    for (int64_t j = 0; j < T; ++j)
      for (int64_t c = 0; c < d; ++c) {
        kt[c * T + j] = k[o + j * d + c];
        vt[c * T + j] = v[o + j * d + c];
      }
    std::fill(dk + o, dk + o + T * d, 0.0f);
    std::fill(dv + o, dv + o + T * d, 0.0f);
    for (int64_t i = 0; i < T; ++i) {
      float *pr = p.data() + i * T, *dr = dp.data() + i * T;
      std::fill(pr, pr + T, 0.0f);
      std::fill(dr, dr + T, 0.0f);
      for (int64_t c = 0; c < d; ++c) {
        const float a = q[o + i * d + c] * scale, g = dout[o + i * d + c];
        for (int64_t j = 0; j < T; ++j) {
          pr[j] += a * kt[c * T + j];
          dr[j] += g * vt[c * T + j];
        }
      }
      const float l = lse[b * T + i];
      maskedExp(pr, mask + i * T, l, T);
      double D = 0.0;
      for (int64_t c = 0; c < d; ++c)
        D += static_cast<double>(dout[o + i * d + c]) * out[o + i * d + c];
      for (int64_t j = 0; j < T; ++j)
        dr[j] = pr[j] * (dr[j] - static_cast<float>(D)) * scale;
      float *dqi = dq + o + i * d;
      std::fill(dqi, dqi + d, 0.0f);
      for (int64_t j = 0; j < T; ++j) {
        const float *kj = k + o + j * d, *qi = q + o + i * d,
                    *gi = dout + o + i * d;
        float *dkj = dk + o + j * d, *dvj = dv + o + j * d;
        for (int64_t c = 0; c < d; ++c) {
          dqi[c] += dr[j] * kj[c];
          dkj[c] += dr[j] * qi[c];
          dvj[c] += pr[j] * gi[c];
        }
      }
    }
  }
}

// What the unfused program calls.
void chainFwd(const float *q, const float *k, const float *v, const float *mask,
              float *s, float *p, float *out, int64_t B, int64_t T, int64_t d,
              float c) {
  const int64_t shape[1] = {B}, strideTd[1] = {T * d};
  gp_batch_gemm(0, 1, T, T, d, q, k, s, 1, shape, strideTd, strideTd, 0);
  for (int64_t i = 0; i < B * T * T; ++i) // the fused div + where loop
    s[i] = mask[i % (T * T)] != 0.0f ? -INFINITY : s[i] / c;
  gp_softmax(s, p, B * T, T, 1);
  const int64_t strideTT[1] = {T * T};
  gp_batch_gemm(0, 0, T, d, T, p, v, out, 1, shape, strideTT, strideTd, 0);
}

void chainBwd(const float *q, const float *k, const float *v, const float *mask,
              const float *p, const float *dout, float *dp, float *ds,
              float *dq, float *dk, float *dv, int64_t B, int64_t T, int64_t d,
              float c) {
  const int64_t shape[1] = {B}, strideTd[1] = {T * d}, strideTT[1] = {T * T};
  gp_batch_gemm(0, 1, T, T, d, dout, v, dp, 1, shape, strideTd, strideTd, 0);
  gp_batch_gemm(1, 0, T, d, T, p, dout, dv, 1, shape, strideTT, strideTd, 0);
  gp_softmax_bwd(p, dp, ds, B * T, T, 1);
  for (int64_t i = 0; i < B * T * T; ++i) // where's and div's gradients
    ds[i] = mask[i % (T * T)] != 0.0f ? 0.0f : ds[i] / c;
  gp_batch_gemm(0, 0, T, d, T, ds, k, dq, 1, shape, strideTT, strideTd, 0);
  gp_batch_gemm(1, 0, T, d, T, ds, q, dk, 1, shape, strideTT, strideTd, 0);
}

template <typename F> double bestMs(int reps, F f) {
  double best = std::numeric_limits<double>::infinity();
  for (int r = 0; r < reps; ++r) {
    auto t0 = Clock::now();
    f();
    best = std::min(
        best,
        std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  return best;
}

} // namespace

int main(int argc, char **argv) {
  const int64_t B = argc > 1 ? std::atoll(argv[1]) : 128;
  const int64_t T = argc > 2 ? std::atoll(argv[2]) : 64;
  const int64_t d = argc > 3 ? std::atoll(argv[3]) : 32;
  const int reps = argc > 4 ? std::atoi(argv[4]) : 50;
  const float c = std::sqrt(static_cast<float>(d)), scale = 1.0f / c;
  std::mt19937 gen(1);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  auto rnd = [&](int64_t n) {
    std::vector<float> x(n);
    for (float &e : x)
      e = dist(gen);
    return x;
  };
  const int64_t n = B * T * d;
  std::vector<float> q = rnd(n), k = rnd(n), v = rnd(n), dout = rnd(n);
  std::vector<float> mask(T * T);
  for (int64_t i = 0; i < T; ++i)
    for (int64_t j = 0; j < T; ++j)
      mask[i * T + j] = j > i ? 1.0f : 0.0f;
  std::vector<float> out(n), lse(B * T), dq(n), dk(n), dv(n);
  std::vector<float> s(B * T * T), p(B * T * T), dp(B * T * T), ds(B * T * T);
  std::vector<float> out2(n), dq2(n), dk2(n), dv2(n), lse2(B * T);

  const double fusedF = bestMs(reps, [&] {
    gp_attention_fwd(q.data(), k.data(), v.data(), mask.data(), out.data(),
                     lse.data(), B, T, T, d, d, scale);
  });
  const double fusedB = bestMs(reps, [&] {
    gp_attention_bwd(q.data(), k.data(), v.data(), mask.data(), out.data(),
                     lse.data(), dout.data(), dq.data(), dk.data(), dv.data(),
                     B, T, T, d, d, scale);
  });
  const double loopF = bestMs(reps, [&] {
    loopsFwd(q.data(), k.data(), v.data(), mask.data(), out2.data(),
             lse2.data(), B, T, d, scale);
  });
  const double loopB = bestMs(reps, [&] {
    loopsBwd(q.data(), k.data(), v.data(), mask.data(), out2.data(),
             lse2.data(), dout.data(), dq2.data(), dk2.data(), dv2.data(), B, T,
             d, scale);
  });
  double err = 0.0;
  for (int64_t i = 0; i < n; ++i)
    err = std::max({err, std::fabs(double(out[i]) - out2[i]),
                    std::fabs(double(dq[i]) - dq2[i]),
                    std::fabs(double(dk[i]) - dk2[i]),
                    std::fabs(double(dv[i]) - dv2[i])});
  const double chainF = bestMs(reps, [&] {
    chainFwd(q.data(), k.data(), v.data(), mask.data(), s.data(), p.data(),
             out2.data(), B, T, d, c);
  });
  const double chainB = bestMs(reps, [&] {
    chainBwd(q.data(), k.data(), v.data(), mask.data(), p.data(), dout.data(),
             dp.data(), ds.data(), dq2.data(), dk2.data(), dv2.data(), B, T, d,
             c);
  });
  for (int64_t i = 0; i < n; ++i)
    err = std::max({err, std::fabs(double(out[i]) - out2[i]),
                    std::fabs(double(dq[i]) - dq2[i]),
                    std::fabs(double(dk[i]) - dk2[i]),
                    std::fabs(double(dv[i]) - dv2[i])});
  std::printf("B*H=%lld T=%lld d=%lld, causal mask, best of %d, ms per call\n",
              static_cast<long long>(B), static_cast<long long>(T),
              static_cast<long long>(d), reps);
  std::printf("%-28s %8s %8s %8s\n", "", "fwd", "bwd", "fwd+bwd");
  std::printf("%-28s %8.3f %8.3f %8.3f\n", "fused (oneDNN GEMMs)", fusedF,
              fusedB, fusedF + fusedB);
  std::printf("%-28s %8.3f %8.3f %8.3f\n", "fused (plain loops)", loopF, loopB,
              loopF + loopB);
  std::printf("%-28s %8.3f %8.3f %8.3f\n", "unfused chain", chainF, chainB,
              chainF + chainB);
  std::printf("max |difference| between the three: %.2e\n", err);
  return 0;
}
