// CPU convolutions (gp_conv_*): oneDNN primitives on the arena's plain
// NCW/NCHW tensors, built once per distinct shape and reused every step.
#include "gpipe/runtime.h"

#include <oneapi/dnnl/dnnl.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace {

using dnnl::memory;
using tag = dnnl::memory::format_tag;

/// The shape as a map key: the fields of the spatial dims in use.
struct ShapeKey {
  std::vector<int64_t> v;
  explicit ShapeKey(const gp_conv_shape &s) {
    v = {s.spatial, s.N, s.C, s.F, s.groups};
    for (int i = 0; i < s.spatial; ++i)
      v.insert(v.end(), {s.in[i], s.kernel[i], s.out[i], s.stride[i],
                         s.dilation[i], s.pad_begin[i], s.pad_end[i]});
  }
  bool operator<(const ShapeKey &o) const { return v < o.v; }
};

/// One shape's memory descriptors and primitives (each call wraps the
/// arena's pointers in memory objects: the data is never copied). The
/// primitives are built on first use: a forward-only stage never pays for
/// the backward ones.
struct ConvPrims {
  memory::desc x, w, b, y;
  memory::dims strides, dilates, padL, padR;
  std::unique_ptr<dnnl::convolution_forward::primitive_desc> fwdPd, fwdPdBias;
  std::unique_ptr<dnnl::convolution_forward> fwd, fwdBias;
  std::unique_ptr<dnnl::convolution_backward_data> bwdData;
  std::unique_ptr<dnnl::convolution_backward_weights> bwdWeights;
};

struct ConvState {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::map<ShapeKey, std::unique_ptr<ConvPrims>> prims;
  std::mutex mutex;
};

ConvState &state() {
  static ConvState s;
  return s;
}

[[noreturn]] void fail(const char *what, const dnnl::error &e) {
  std::fprintf(stderr, "gpipe: error: internal: oneDNN convolution %s: %s\n",
               what, e.what());
  std::abort();
}

/// The shape's primitives; the caller holds the state's mutex (each
/// gp_conv_* call does, for the lazy set-up and the execution alike).
ConvPrims &primsFor(const gp_conv_shape &s) {
  ConvState &st = state();
  std::unique_ptr<ConvPrims> &slot = st.prims[ShapeKey(s)];
  if (slot)
    return *slot;
  auto p = std::make_unique<ConvPrims>();
  int sp = s.spatial;
  memory::dims xd = {s.N, s.C}, yd = {s.N, s.F}, wd;
  if (s.groups > 1)
    wd = {s.groups, s.F / s.groups, s.C / s.groups};
  else
    wd = {s.F, s.C};
  for (int i = 0; i < sp; ++i) {
    xd.push_back(s.in[i]);
    yd.push_back(s.out[i]);
    wd.push_back(s.kernel[i]);
    p->strides.push_back(s.stride[i]);
    p->dilates.push_back(s.dilation[i] - 1); // oneDNN counts the gaps
    p->padL.push_back(s.pad_begin[i]);
    p->padR.push_back(s.pad_end[i]);
  }
  tag act = sp == 1 ? tag::ncw : tag::nchw;
  tag wt = s.groups > 1 ? (sp == 1 ? tag::goiw : tag::goihw)
                        : (sp == 1 ? tag::oiw : tag::oihw);
  auto f32 = memory::data_type::f32;
  p->x = memory::desc(xd, f32, act);
  p->y = memory::desc(yd, f32, act);
  p->w = memory::desc(wd, f32, wt);
  p->b = memory::desc({s.F}, f32, tag::x);
  try {
    using fwd = dnnl::convolution_forward;
    auto algo = dnnl::algorithm::convolution_direct;
    auto prop = dnnl::prop_kind::forward_training;
    p->fwdPd = std::make_unique<fwd::primitive_desc>(
        fwd::desc(prop, algo, p->x, p->w, p->y, p->strides, p->dilates, p->padL,
                  p->padR),
        st.engine);
    p->fwdPdBias = std::make_unique<fwd::primitive_desc>(
        fwd::desc(prop, algo, p->x, p->w, p->b, p->y, p->strides, p->dilates,
                  p->padL, p->padR),
        st.engine);
  } catch (const dnnl::error &e) {
    fail("forward setup", e);
  }
  slot = std::move(p);
  return *slot;
}

memory mem(const memory::desc &d, const ConvState &st, const void *ptr) {
  return memory(d, st.engine, const_cast<void *>(ptr));
}

} // namespace

extern "C" {

void gp_conv_fwd(const gp_conv_shape *s, const float *x, const float *w,
                 const float *bias, float *y) {
  ConvState &st = state();
  std::lock_guard<std::mutex> lock(st.mutex);
  ConvPrims &p = primsFor(*s);
  try {
    std::unique_ptr<dnnl::convolution_forward> &prim = bias ? p.fwdBias : p.fwd;
    if (!prim)
      prim = std::make_unique<dnnl::convolution_forward>(bias ? *p.fwdPdBias
                                                              : *p.fwdPd);
    std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, mem(p.x, st, x)},
                                            {DNNL_ARG_WEIGHTS, mem(p.w, st, w)},
                                            {DNNL_ARG_DST, mem(p.y, st, y)}};
    if (bias)
      args.emplace(DNNL_ARG_BIAS, mem(p.b, st, bias));
    prim->execute(st.stream, args);
    st.stream.wait();
  } catch (const dnnl::error &e) {
    fail("forward", e);
  }
}

void gp_conv_bwd_data(const gp_conv_shape *s, const float *dy, const float *w,
                      float *dx) {
  ConvState &st = state();
  std::lock_guard<std::mutex> lock(st.mutex);
  ConvPrims &p = primsFor(*s);
  try {
    if (!p.bwdData) {
      using bwd = dnnl::convolution_backward_data;
      bwd::primitive_desc pd(bwd::desc(dnnl::algorithm::convolution_direct, p.x,
                                       p.w, p.y, p.strides, p.dilates, p.padL,
                                       p.padR),
                             st.engine, *p.fwdPd);
      p.bwdData = std::make_unique<bwd>(pd);
    }
    p.bwdData->execute(st.stream, {{DNNL_ARG_DIFF_DST, mem(p.y, st, dy)},
                                   {DNNL_ARG_WEIGHTS, mem(p.w, st, w)},
                                   {DNNL_ARG_DIFF_SRC, mem(p.x, st, dx)}});
    st.stream.wait();
  } catch (const dnnl::error &e) {
    fail("backward data", e);
  }
}

void gp_conv_bwd_weights(const gp_conv_shape *s, const float *x,
                         const float *dy, float *dw) {
  ConvState &st = state();
  std::lock_guard<std::mutex> lock(st.mutex);
  ConvPrims &p = primsFor(*s);
  try {
    if (!p.bwdWeights) {
      using bwd = dnnl::convolution_backward_weights;
      bwd::primitive_desc pd(bwd::desc(dnnl::algorithm::convolution_direct, p.x,
                                       p.w, p.y, p.strides, p.dilates, p.padL,
                                       p.padR),
                             st.engine, *p.fwdPd);
      p.bwdWeights = std::make_unique<bwd>(pd);
    }
    p.bwdWeights->execute(st.stream,
                          {{DNNL_ARG_SRC, mem(p.x, st, x)},
                           {DNNL_ARG_DIFF_DST, mem(p.y, st, dy)},
                           {DNNL_ARG_DIFF_WEIGHTS, mem(p.w, st, dw)}});
    st.stream.wait();
  } catch (const dnnl::error &e) {
    fail("backward weights", e);
  }
}

} // extern "C"
