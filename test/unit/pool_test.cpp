// Unit tests of the CPU pooling kernels (gp_max_pool, gp_avg_pool and their
// gradients) against the naive references of pool_reference.h.
#include "pool_reference.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace {

std::vector<float> randomPlanes(size_t n, int levels, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<float> v(n);
  if (levels > 0) { // few distinct values: ties in most windows
    std::uniform_int_distribution<int> d(0, levels - 1);
    for (float &x : v)
      x = static_cast<float>(d(rng));
  } else {
    std::uniform_real_distribution<float> d(-1.0f, 1.0f);
    for (float &x : v)
      x = d(rng);
  }
  return v;
}

void checkMaxPool(const pool_ref::Case &c, int levels, bool withNaN) {
  SCOPED_TRACE(c.name);
  const gp_pool_window &w = c.w;
  const int64_t nc = 6, in = nc * w.ih * w.iw, out = nc * w.oh * w.ow;
  std::vector<float> x = randomPlanes(in, levels, 7);
  if (withNaN)
    x[3] = x[in / 2] = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> refY;
  std::vector<int64_t> refIdx;
  pool_ref::maxPool(x, nc, w, refY, refIdx);
  std::vector<float> y(out), dy = randomPlanes(out, 0, 8), dx(in, 42.0f);
  std::vector<int64_t> idx(out);
  gp_max_pool(x.data(), y.data(), idx.data(), nc, w);
  for (int64_t o = 0; o < out; ++o) {
    ASSERT_EQ(idx[o], refIdx[o]) << "output " << o;
    if (std::isnan(refY[o]))
      ASSERT_TRUE(std::isnan(y[o])) << "output " << o;
    else
      ASSERT_EQ(y[o], refY[o]) << "output " << o;
  }
  gp_max_pool_bwd(idx.data(), dy.data(), dx.data(), nc, w.ih * w.iw,
                  w.oh * w.ow);
  std::vector<float> refDx = pool_ref::maxPoolBwd(refIdx, dy, nc, w);
  for (int64_t e = 0; e < in; ++e)
    ASSERT_EQ(dx[e], refDx[e]) << "input " << e;
}

TEST(Pool, MaxPoolMatchesTheReference) {
  for (const pool_ref::Case &c : pool_ref::cases(/*dilated=*/true))
    checkMaxPool(c, 0, false);
}

// Ties everywhere: torch's index is the first maximum in scan order, and the
// gradient goes there only.
TEST(Pool, MaxPoolTiesPickTheFirstMaximum) {
  for (const pool_ref::Case &c : pool_ref::cases(/*dilated=*/true))
    checkMaxPool(c, 2, false);
}

TEST(Pool, MaxPoolPropagatesNaN) {
  for (const pool_ref::Case &c : pool_ref::cases(/*dilated=*/false))
    checkMaxPool(c, 0, true);
}

void checkAvgPool(const pool_ref::Case &c, bool includePad) {
  SCOPED_TRACE(std::string(c.name) + (includePad ? " count_include_pad" : ""));
  const gp_pool_window &w = c.w;
  const int64_t nc = 5, in = nc * w.ih * w.iw, out = nc * w.oh * w.ow;
  std::vector<float> x = randomPlanes(in, 0, 3), dy = randomPlanes(out, 0, 4);
  std::vector<float> y(out), dx(in, 42.0f);
  gp_avg_pool(x.data(), y.data(), nc, w, includePad);
  std::vector<double> refY = pool_ref::avgPool(x, nc, w, includePad);
  for (int64_t o = 0; o < out; ++o)
    ASSERT_NEAR(y[o], refY[o], 1e-6) << "output " << o;
  gp_avg_pool_bwd(dy.data(), dx.data(), nc, w, includePad);
  std::vector<double> refDx = pool_ref::avgPoolBwd(dy, nc, w, includePad);
  for (int64_t e = 0; e < in; ++e)
    ASSERT_NEAR(dx[e], refDx[e], 1e-6) << "input " << e;
}

TEST(Pool, AvgPoolExcludingPadding) {
  for (const pool_ref::Case &c : pool_ref::cases(/*dilated=*/false))
    checkAvgPool(c, false);
}

TEST(Pool, AvgPoolCountingPadding) {
  for (const pool_ref::Case &c : pool_ref::cases(/*dilated=*/false))
    checkAvgPool(c, true);
}

// ceil_mode's last window hangs over the end: with count_include_pad the
// divisor stops at the padded input's end (torch), here 4 + 1: the window
// [3, 6) over [0, 5) has 2 elements of the padded input, not 3.
TEST(Pool, AvgPoolCeilModeDivisorStopsAtThePadding) {
  gp_pool_window w = pool_ref::window(1, 4, 1, 3, 1, 2, 0, 1, 0, 1, 1, 1, true);
  ASSERT_EQ(w.ow, 3);
  std::vector<float> x = {1, 2, 3, 4}, y(3);
  gp_avg_pool(x.data(), y.data(), 1, w, 1);
  EXPECT_FLOAT_EQ(y[0], (0 + 1 + 2) / 3.0f);
  EXPECT_FLOAT_EQ(y[1], (2 + 3 + 4) / 3.0f);
  EXPECT_FLOAT_EQ(y[2], (4 + 0) / 2.0f);
  gp_avg_pool(x.data(), y.data(), 1, w, 0);
  EXPECT_FLOAT_EQ(y[0], (1 + 2) / 2.0f);
  EXPECT_FLOAT_EQ(y[2], 4.0f);
}

} // namespace
