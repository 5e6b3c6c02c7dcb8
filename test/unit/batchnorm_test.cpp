// Unit tests of the CPU batch normalization kernels (gp_batch_norm,
// gp_batch_norm_bwd, gp_batch_norm_update) against a naive double reference,
// finite differences, and the statistics of a whole mini-batch.
#include "gpipe/runtime.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace {

std::vector<float> randomVector(size_t n, unsigned seed, float lo = -1.0f,
                                float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float &x : v)
    x = d(rng);
  return v;
}

struct Shape {
  int64_t n, c, s;
  std::string name() const {
    return "[" + std::to_string(n) + "," + std::to_string(c) + "," +
           std::to_string(s) + "]";
  }
  int64_t size() const { return n * c * s; }
};

/// Element i of channel k in [n, c, s] order: the i-th of its n * s.
int64_t at(const Shape &sh, int64_t k, int64_t i) {
  return (i / sh.s) * sh.c * sh.s + k * sh.s + i % sh.s;
}

struct RefForward {
  std::vector<double> y, mean, var;
};

RefForward refForward(const Shape &sh, const std::vector<double> &x,
                      const std::vector<double> &scale,
                      const std::vector<double> &bias, double eps) {
  RefForward r;
  r.y.resize(sh.size());
  r.mean.resize(sh.c);
  r.var.resize(sh.c);
  const int64_t cnt = sh.n * sh.s;
  for (int64_t k = 0; k < sh.c; ++k) {
    double m = 0.0, v = 0.0;
    for (int64_t i = 0; i < cnt; ++i)
      m += x[at(sh, k, i)];
    m /= cnt;
    for (int64_t i = 0; i < cnt; ++i)
      v += (x[at(sh, k, i)] - m) * (x[at(sh, k, i)] - m);
    v /= cnt;
    r.mean[k] = m;
    r.var[k] = v;
    for (int64_t i = 0; i < cnt; ++i) {
      const int64_t e = at(sh, k, i);
      r.y[e] = (x[e] - m) / std::sqrt(v + eps) * scale[k] + bias[k];
    }
  }
  return r;
}

std::vector<double> toDouble(const std::vector<float> &v) {
  return std::vector<double>(v.begin(), v.end());
}

/// The reference gradients from the formulas, in double.
void refBackward(const Shape &sh, const std::vector<double> &x,
                 const std::vector<double> &mean,
                 const std::vector<double> &var,
                 const std::vector<double> &scale,
                 const std::vector<double> &dy, double eps,
                 std::vector<double> &dx, std::vector<double> &dscale,
                 std::vector<double> &dbias) {
  const int64_t cnt = sh.n * sh.s;
  dx.assign(sh.size(), 0.0);
  dscale.assign(sh.c, 0.0);
  dbias.assign(sh.c, 0.0);
  for (int64_t k = 0; k < sh.c; ++k) {
    const double rstd = 1.0 / std::sqrt(var[k] + eps);
    for (int64_t i = 0; i < cnt; ++i) {
      const int64_t e = at(sh, k, i);
      dbias[k] += dy[e];
      dscale[k] += dy[e] * (x[e] - mean[k]) * rstd;
    }
    for (int64_t i = 0; i < cnt; ++i) {
      const int64_t e = at(sh, k, i);
      const double xhat = (x[e] - mean[k]) * rstd;
      dx[e] =
          scale[k] * rstd * (dy[e] - dbias[k] / cnt - xhat * dscale[k] / cnt);
    }
  }
}

double maxAbsDiff(const std::vector<float> &got,
                  const std::vector<double> &ref) {
  double e = 0.0;
  for (size_t i = 0; i < ref.size(); ++i)
    e = std::max(e, std::fabs(static_cast<double>(got[i]) - ref[i]));
  return std::isnan(e) ? INFINITY : e;
}

double maxAbs(const std::vector<double> &v) {
  double m = 0.0;
  for (double d : v)
    m = std::max(m, std::fabs(d));
  return m;
}

// The CPU kernels take runs of s floats for s >= 64, columns below.
const Shape kShapes[] = {
    {4, 3, 5},      // tiny, columns
    {2, 5, 1},      // [n, c]
    {64, 300, 1},   // [n, c], several column blocks
    {1000, 40, 1},  // many rows, parallel columns
    {3, 40, 3},     // columns with s > 1
    {32, 64, 16},   // ResNet's last stage (4 x 4), parallel columns
    {8, 7, 49},     // 7 x 7
    {4, 5, 63},     // just below runs: 4 channels per column block
    {2, 3, 64},     // just at runs
    {3, 2, 67},     // runs with a tail
    {1, 4, 1000},   // n == 1, large s
    {32, 16, 1024}, // ResNet's first stage, parallel runs
};

class BatchNorm : public ::testing::TestWithParam<Shape> {};

TEST_P(BatchNorm, ForwardAndGradientsMatchReference) {
  const Shape sh = GetParam();
  SCOPED_TRACE(sh.name());
  const float eps = 1e-5f;
  // Centred away from 0 (the variance is taken around the mean).
  const std::vector<float> x = randomVector(sh.size(), 1, 2.0f, 4.0f);
  const std::vector<float> scale = randomVector(sh.c, 2, 0.5f, 1.5f);
  const std::vector<float> bias = randomVector(sh.c, 3);
  const std::vector<float> dy = randomVector(sh.size(), 4);
  std::vector<float> y(sh.size(), NAN), mean(sh.c, NAN), var(sh.c, NAN);
  gp_batch_norm(x.data(), scale.data(), bias.data(), y.data(), mean.data(),
                var.data(), sh.n, sh.c, sh.s, eps);
  const RefForward ref =
      refForward(sh, toDouble(x), toDouble(scale), toDouble(bias), eps);
  EXPECT_LT(maxAbsDiff(mean, ref.mean), 1e-6);
  EXPECT_LT(maxAbsDiff(var, ref.var), 1e-6);
  EXPECT_LT(maxAbsDiff(y, ref.y), 2e-5 * std::max(1.0, maxAbs(ref.y)));

  // y aliasing x.
  std::vector<float> inPlace = x, mean2(sh.c), var2(sh.c);
  gp_batch_norm(inPlace.data(), scale.data(), bias.data(), inPlace.data(),
                mean2.data(), var2.data(), sh.n, sh.c, sh.s, eps);
  EXPECT_EQ(inPlace, y);
  EXPECT_EQ(mean2, mean);
  EXPECT_EQ(var2, var);

  // Gradients from the kernel's saved statistics.
  std::vector<double> rdx, rds, rdb;
  refBackward(sh, toDouble(x), toDouble(mean), toDouble(var), toDouble(scale),
              toDouble(dy), eps, rdx, rds, rdb);
  std::vector<float> dx(sh.size(), NAN), ds(sh.c, NAN), db(sh.c, NAN);
  gp_batch_norm_bwd(x.data(), mean.data(), var.data(), scale.data(), dy.data(),
                    dx.data(), ds.data(), db.data(), sh.n, sh.c, sh.s, eps);
  const double cnt = static_cast<double>(sh.n * sh.s);
  EXPECT_LT(maxAbsDiff(db, rdb), 1e-6 * std::sqrt(cnt) + 1e-6);
  EXPECT_LT(maxAbsDiff(ds, rds), 1e-6 * std::sqrt(cnt) + 1e-6);
  EXPECT_LT(maxAbsDiff(dx, rdx), 2e-5 * std::max(1.0, maxAbs(rdx)));

  // dx aliasing dy.
  std::vector<float> g = dy, ds2(sh.c), db2(sh.c);
  gp_batch_norm_bwd(x.data(), mean.data(), var.data(), scale.data(), g.data(),
                    g.data(), ds2.data(), db2.data(), sh.n, sh.c, sh.s, eps);
  EXPECT_EQ(g, dx);
  EXPECT_EQ(ds2, ds);
  EXPECT_EQ(db2, db);

  // Null outputs: the others unchanged.
  std::vector<float> dx3(sh.size(), NAN);
  gp_batch_norm_bwd(x.data(), mean.data(), var.data(), scale.data(), dy.data(),
                    dx3.data(), nullptr, nullptr, sh.n, sh.c, sh.s, eps);
  EXPECT_EQ(dx3, dx);
  std::vector<float> ds4(sh.c, NAN), db4(sh.c, NAN);
  gp_batch_norm_bwd(x.data(), mean.data(), var.data(), scale.data(), dy.data(),
                    nullptr, ds4.data(), nullptr, sh.n, sh.c, sh.s, eps);
  EXPECT_EQ(ds4, ds);
  gp_batch_norm_bwd(x.data(), mean.data(), var.data(), scale.data(), dy.data(),
                    nullptr, nullptr, db4.data(), sh.n, sh.c, sh.s, eps);
  EXPECT_EQ(db4, db);
}

TEST_P(BatchNorm, SameResultsOnOneAndThreeThreads) {
  const Shape sh = GetParam();
  SCOPED_TRACE(sh.name());
  const std::vector<float> x = randomVector(sh.size(), 11, -3.0f, 5.0f);
  const std::vector<float> scale = randomVector(sh.c, 12);
  const std::vector<float> bias = randomVector(sh.c, 13);
  const std::vector<float> dy = randomVector(sh.size(), 14);
  struct Out {
    std::vector<float> y, mean, var, dx, ds, db;
  };
  auto run = [&](int threads) {
    omp_set_num_threads(threads);
    Out o{std::vector<float>(sh.size()), std::vector<float>(sh.c),
          std::vector<float>(sh.c),      std::vector<float>(sh.size()),
          std::vector<float>(sh.c),      std::vector<float>(sh.c)};
    gp_batch_norm(x.data(), scale.data(), bias.data(), o.y.data(),
                  o.mean.data(), o.var.data(), sh.n, sh.c, sh.s, 1e-3f);
    gp_batch_norm_bwd(x.data(), o.mean.data(), o.var.data(), scale.data(),
                      dy.data(), o.dx.data(), o.ds.data(), o.db.data(), sh.n,
                      sh.c, sh.s, 1e-3f);
    return o;
  };
  const int saved = omp_get_max_threads();
  const Out one = run(1), three = run(3);
  omp_set_num_threads(saved);
  EXPECT_EQ(one.y, three.y);
  EXPECT_EQ(one.mean, three.mean);
  EXPECT_EQ(one.var, three.var);
  EXPECT_EQ(one.dx, three.dx);
  EXPECT_EQ(one.ds, three.ds);
  EXPECT_EQ(one.db, three.db);
}

INSTANTIATE_TEST_SUITE_P(Shapes, BatchNorm, ::testing::ValuesIn(kShapes),
                         [](const ::testing::TestParamInfo<Shape> &info) {
                           return "n" + std::to_string(info.param.n) + "c" +
                                  std::to_string(info.param.c) + "s" +
                                  std::to_string(info.param.s);
                         });

/// Central differences of loss = sum(w * y) on a double forward, against the
/// kernel's gradients (dy = w).
void finiteDifferences(const Shape &sh) {
  SCOPED_TRACE(sh.name());
  const double eps = 1e-3;
  const std::vector<float> xf = randomVector(sh.size(), 21, -1.0f, 2.0f);
  const std::vector<float> sf = randomVector(sh.c, 22, 0.5f, 1.5f);
  const std::vector<float> bf = randomVector(sh.c, 23);
  const std::vector<float> wf = randomVector(sh.size(), 24);
  std::vector<double> x = toDouble(xf), scale = toDouble(sf),
                      bias = toDouble(bf), w = toDouble(wf);
  auto loss = [&]() {
    const RefForward r = refForward(sh, x, scale, bias, eps);
    double l = 0.0;
    for (int64_t e = 0; e < sh.size(); ++e)
      l += w[e] * r.y[e];
    return l;
  };
  auto numeric = [&](std::vector<double> &v, size_t i) {
    const double h = 1e-5, keep = v[i];
    v[i] = keep + h;
    const double up = loss();
    v[i] = keep - h;
    const double down = loss();
    v[i] = keep;
    return (up - down) / (2 * h);
  };
  std::vector<float> y(sh.size()), mean(sh.c), var(sh.c);
  gp_batch_norm(xf.data(), sf.data(), bf.data(), y.data(), mean.data(),
                var.data(), sh.n, sh.c, sh.s, static_cast<float>(eps));
  std::vector<float> dx(sh.size()), ds(sh.c), db(sh.c);
  gp_batch_norm_bwd(xf.data(), mean.data(), var.data(), sf.data(), wf.data(),
                    dx.data(), ds.data(), db.data(), sh.n, sh.c, sh.s,
                    static_cast<float>(eps));
  for (int64_t e = 0; e < sh.size(); ++e)
    EXPECT_NEAR(dx[e], numeric(x, e), 1e-4) << "dx[" << e << "]";
  for (int64_t k = 0; k < sh.c; ++k) {
    EXPECT_NEAR(ds[k], numeric(scale, k), 1e-4) << "dscale[" << k << "]";
    EXPECT_NEAR(db[k], numeric(bias, k), 1e-4) << "dbias[" << k << "]";
  }
}

TEST(BatchNormGrad, FiniteDifferences) {
  finiteDifferences({3, 2, 5});  // columns layout
  finiteDifferences({2, 2, 67}); // runs layout with a tail
  finiteDifferences({6, 4, 1});  // [n, c]
  finiteDifferences({1, 2, 12}); // n == 1
}

TEST(BatchNormUpdate, OneMicroBatch) {
  const int64_t c = 5, count = 7;
  const float momentum = 0.9f;
  const std::vector<float> mean = randomVector(c, 31),
                           var = randomVector(c, 32, 0.1f, 2.0f);
  std::vector<float> rm = randomVector(c, 33),
                     rv = randomVector(c, 34, 0.5f, 1.5f);
  const std::vector<float> rm0 = rm, rv0 = rv;
  gp_batch_norm_update(rm.data(), rv.data(), mean.data(), var.data(), nullptr,
                       c, count, momentum, 1, 0);
  for (int64_t k = 0; k < c; ++k) {
    const double m = 0.9, n = static_cast<double>(count);
    EXPECT_NEAR(rm[k], m * rm0[k] + (1 - m) * mean[k], 1e-6);
    EXPECT_NEAR(rv[k], m * rv0[k] + (1 - m) * var[k] * n / (n - 1), 1e-6);
  }
}

TEST(BatchNormUpdate, ThreeMicroBatchesMatchTheWholeBatch) {
  const int64_t M = 3, n = 4, c = 6, s = 10, per = n * c * s;
  const float momentum = 0.8f, eps = 1e-5f;
  const std::vector<float> x = randomVector(M * per, 41, -2.0f, 3.0f);
  const std::vector<float> scale(c, 1.0f), bias(c, 0.0f);
  std::vector<float> rm = randomVector(c, 42),
                     rv = randomVector(c, 43, 0.5f, 1.5f);
  const std::vector<float> rm0 = rm, rv0 = rv;
  std::vector<float> state(M * 2 * c, NAN), y(per), mean(c), var(c);
  for (int64_t m = 0; m < M; ++m) {
    gp_batch_norm(x.data() + m * per, scale.data(), bias.data(), y.data(),
                  mean.data(), var.data(), n, c, s, eps);
    gp_batch_norm_update(rm.data(), rv.data(), mean.data(), var.data(),
                         state.data(), c, n * s, momentum, M, m);
    if (m < M - 1) {
      EXPECT_EQ(rm, rm0) << "after micro-batch " << m;
      EXPECT_EQ(rv, rv0) << "after micro-batch " << m;
    }
    for (int64_t k = 0; k < c; ++k) {
      EXPECT_EQ(state[m * 2 * c + k], mean[k]);
      EXPECT_EQ(state[m * 2 * c + c + k], var[k]);
    }
  }
  // The statistics of the whole [M * n, c, s] tensor, directly.
  const Shape whole{M * n, c, s};
  const RefForward ref =
      refForward(whole, toDouble(x), toDouble(scale), toDouble(bias), eps);
  const double total = static_cast<double>(M * n * s), mom = 0.8;
  for (int64_t k = 0; k < c; ++k) {
    const double wantM = mom * rm0[k] + (1 - mom) * ref.mean[k];
    const double wantV =
        mom * rv0[k] + (1 - mom) * ref.var[k] * total / (total - 1);
    EXPECT_NEAR(rm[k], wantM, 1e-5 * std::max(1.0, std::fabs(wantM)));
    EXPECT_NEAR(rv[k], wantV, 1e-5 * std::max(1.0, std::fabs(wantV)));
  }
  // The same through the whole tensor's own statistics (M == 1).
  std::vector<float> yw(M * per), mw(c), vw(c), rm1 = rm0, rv1 = rv0;
  gp_batch_norm(x.data(), scale.data(), bias.data(), yw.data(), mw.data(),
                vw.data(), M * n, c, s, eps);
  gp_batch_norm_update(rm1.data(), rv1.data(), mw.data(), vw.data(), nullptr, c,
                       M * n * s, momentum, 1, 0);
  for (int64_t k = 0; k < c; ++k) {
    EXPECT_NEAR(rm[k], rm1[k], 1e-5 * std::max(1.0f, std::fabs(rm1[k])));
    EXPECT_NEAR(rv[k], rv1[k], 1e-5 * std::max(1.0f, std::fabs(rv1[k])));
  }
}

} // namespace
