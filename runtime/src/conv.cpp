// CPU convolutions (gp_conv_*): oneDNN primitives, built once per distinct
// shape and reused every step. The arena holds plain NCW/NCHW tensors; each
// primitive runs in the memory layouts oneDNN picks for it (blocked ones such
// as nChw8c, where its direct JIT kernels are several times faster than the
// im2col GEMM it uses on plain layouts), with reorders into and out of a
// scratch area around the call, as PyTorch does. GPIPE_CPU_CONV_LAYOUT=plain
// keeps every operand plain (no reorders).
#include "gpipe/runtime.h"

#include "internal.h"

#include <oneapi/dnnl/dnnl.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

using dnnl::memory;
using tag = dnnl::memory::format_tag;

/// The shape as a map key: the fields of the spatial dims in use, and the
/// layout policy the primitives were built for.
struct ShapeKey {
  std::vector<int64_t> v;
  ShapeKey(const gp_conv_shape &s, bool blocked) {
    v = {s.spatial, s.N, s.C, s.F, s.groups, blocked};
    for (int i = 0; i < s.spatial; ++i)
      v.insert(v.end(), {s.in[i], s.kernel[i], s.out[i], s.stride[i],
                         s.dilation[i], s.pad_begin[i], s.pad_end[i]});
  }
  bool operator<(const ShapeKey &o) const { return v < o.v; }
};

/// One operand of a primitive: its plain layout (the arena's) and the one the
/// primitive wants, with the reorder between them when they differ.
struct Operand {
  memory::desc plain, impl;
  std::unique_ptr<dnnl::reorder> toImpl, toPlain;
  bool reordered() const { return impl != plain; }
};

/// One shape's memory descriptors and primitives (each call wraps the
/// arena's pointers in memory objects). The primitives are built on first
/// use: a forward-only stage never pays for the backward ones.
struct ConvPrims {
  memory::desc x, w, b, y;
  memory::dims strides, dilates, padL, padR;
  std::unique_ptr<dnnl::convolution_forward::primitive_desc> fwdPd, fwdPdBias;
  std::unique_ptr<dnnl::convolution_forward> fwd, fwdBias;
  std::unique_ptr<dnnl::convolution_backward_data> bwdData;
  std::unique_ptr<dnnl::convolution_backward_weights> bwdWeights;
  // Per primitive: its source (or diff_dst), weights (or its second input)
  // and result operands.
  Operand fwdX, fwdW, fwdY, bdDy, bdW, bdDx, bwX, bwDy, bwDw;
};

struct ConvState {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::map<ShapeKey, std::unique_ptr<ConvPrims>> prims;
  std::mutex mutex;
  /// oneDNN picks the operands' layouts (GPIPE_CPU_CONV_LAYOUT, read by
  /// cpuConvConfigure before the first convolution).
  bool blocked = true;
  /// Reordered operands of the running call, one area per role (two inputs,
  /// one result): calls are serialised by `mutex`, so every shape shares them.
  struct Scratch {
    void *data = nullptr;
    size_t bytes = 0;
  } scratch[3];
  ~ConvState() {
    for (Scratch &s : scratch)
      std::free(s.data);
  }
  void *scratchFor(int role, size_t bytes) {
    Scratch &s = scratch[role];
    if (s.bytes < bytes) {
      std::free(s.data);
      s.bytes = (bytes + 4095) / 4096 * 4096;
      s.data = std::aligned_alloc(4096, s.bytes);
      if (!s.data) {
        std::fprintf(stderr,
                     "gpipe: error: out of memory for a convolution's "
                     "reordered operand (%zu bytes)\n",
                     bytes);
        std::exit(1);
      }
    }
    return s.data;
  }
};

ConvState &state() {
  static ConvState s;
  return s;
}

/// `op` wants `impl` where the arena has `plain`: the reorders between them.
void setOperand(Operand &op, const memory::desc &plain,
                const memory::desc &impl, const dnnl::engine &engine) {
  op.plain = plain;
  op.impl = impl;
  if (!op.reordered())
    return;
  op.toImpl = std::make_unique<dnnl::reorder>(
      dnnl::reorder::primitive_desc(engine, plain, engine, impl));
  op.toPlain = std::make_unique<dnnl::reorder>(
      dnnl::reorder::primitive_desc(engine, impl, engine, plain));
}

/// An input in the primitive's layout: the arena's tensor itself, or its
/// reordered copy in scratch area `role`.
memory input(const Operand &op, ConvState &st, const void *ptr, int role) {
  memory plain(op.plain, st.engine, const_cast<void *>(ptr));
  if (!op.reordered())
    return plain;
  memory impl(op.impl, st.engine, st.scratchFor(role, op.impl.get_size()));
  op.toImpl->execute(st.stream, plain, impl);
  return impl;
}

/// A result in the primitive's layout: the arena's tensor itself, or scratch
/// area `role` (finish() reorders it into the arena).
memory output(const Operand &op, ConvState &st, void *ptr, int role) {
  if (!op.reordered())
    return memory(op.plain, st.engine, ptr);
  return memory(op.impl, st.engine, st.scratchFor(role, op.impl.get_size()));
}

void finish(const Operand &op, ConvState &st, memory &result, void *ptr) {
  if (op.reordered()) {
    memory plain(op.plain, st.engine, ptr);
    op.toPlain->execute(st.stream, result, plain);
  }
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
  std::unique_ptr<ConvPrims> &slot = st.prims[ShapeKey(s, st.blocked)];
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
    // With `any`, oneDNN picks each operand's layout for its fastest kernel.
    memory::desc x = p->x, w = p->w, y = p->y;
    if (st.blocked) {
      x = memory::desc(xd, f32, tag::any);
      w = memory::desc(wd, f32, tag::any);
      y = memory::desc(yd, f32, tag::any);
    }
    p->fwdPd = std::make_unique<fwd::primitive_desc>(
        fwd::desc(prop, algo, x, w, y, p->strides, p->dilates, p->padL,
                  p->padR),
        st.engine);
    p->fwdPdBias = std::make_unique<fwd::primitive_desc>(
        fwd::desc(prop, algo, x, w, p->b, y, p->strides, p->dilates, p->padL,
                  p->padR),
        st.engine);
    // The biased and unbiased forms pick the same layouts (checked).
    if (p->fwdPd->src_desc() != p->fwdPdBias->src_desc() ||
        p->fwdPd->weights_desc() != p->fwdPdBias->weights_desc() ||
        p->fwdPd->dst_desc() != p->fwdPdBias->dst_desc())
      p->fwdPdBias = std::make_unique<fwd::primitive_desc>(
          fwd::desc(prop, algo, p->fwdPd->src_desc(), p->fwdPd->weights_desc(),
                    p->b, p->fwdPd->dst_desc(), p->strides, p->dilates, p->padL,
                    p->padR),
          st.engine);
    setOperand(p->fwdX, p->x, p->fwdPd->src_desc(), st.engine);
    setOperand(p->fwdW, p->w, p->fwdPd->weights_desc(), st.engine);
    setOperand(p->fwdY, p->y, p->fwdPd->dst_desc(), st.engine);
  } catch (const dnnl::error &e) {
    fail("forward setup", e);
  }
  slot = std::move(p);
  return *slot;
}

memory mem(const memory::desc &d, const ConvState &st, const void *ptr) {
  return memory(d, st.engine, const_cast<void *>(ptr));
}

/// `d`'s dims with layout `any` when oneDNN picks the layouts, else `d`.
memory::desc anyLike(const ConvState &st, const memory::desc &d) {
  if (!st.blocked)
    return d;
  return memory::desc(d.dims(), d.data_type(), tag::any);
}

/// The weight gradient of a convolution whose output maps are tiny (at most
/// kSmallMap positions: ResNet's last stages on 32 x 32 inputs) as one GEMM
/// over the whole batch, dW[F, C*k] = dY[F, N*P] * cols[N*P, C*k] (cols the
/// input's im2col). oneDNN 2.6 takes its GEMM path per sample there, N
/// rank-P updates of dW that stream it N times (80 ms for ResNet-18's
/// 512 x 512 x 3 x 3 layer at N = 32 on one AVX2 core, against ~3 ms).
/// Ungrouped only; returns false when the shape is not one of these.
constexpr int64_t kSmallMap = 4;

bool smallMapWeightGrad(const gp_conv_shape &s, ConvState &st, const float *x,
                        const float *dy, float *dw) {
  const int64_t oh = s.spatial == 2 ? s.out[0] : 1, ow = s.out[s.spatial - 1];
  const int64_t ih = s.spatial == 2 ? s.in[0] : 1, iw = s.in[s.spatial - 1];
  const int64_t kh = s.spatial == 2 ? s.kernel[0] : 1,
                kw = s.kernel[s.spatial - 1];
  const int h = s.spatial == 2 ? 0 : -1, w = s.spatial - 1;
  const int64_t P = oh * ow;
  if (s.groups != 1 || P > kSmallMap)
    return false;
  const int64_t CK = s.C * kh * kw, NP = s.N * P;
  auto *cols = static_cast<float *>(
      st.scratchFor(0, static_cast<size_t>(NP * CK) * sizeof(float)));
  auto *dyT = static_cast<float *>(
      st.scratchFor(1, static_cast<size_t>(s.F * NP) * sizeof(float)));
  const int64_t sh = h < 0 ? 1 : s.stride[h], sw = s.stride[w];
  const int64_t dh = h < 0 ? 1 : s.dilation[h], dwl = s.dilation[w];
  const int64_t ph = h < 0 ? 0 : s.pad_begin[h], pw = s.pad_begin[w];
  for (int64_t n = 0; n < s.N; ++n)
    for (int64_t oy = 0; oy < oh; ++oy)
      for (int64_t ox = 0; ox < ow; ++ox) {
        float *row = cols + ((n * oh + oy) * ow + ox) * CK;
        for (int64_t c = 0; c < s.C; ++c)
          for (int64_t ky = 0; ky < kh; ++ky) {
            const int64_t iy = oy * sh - ph + ky * dh;
            for (int64_t kx = 0; kx < kw; ++kx) {
              const int64_t ix = ox * sw - pw + kx * dwl;
              const bool in = iy >= 0 && iy < ih && ix >= 0 && ix < iw;
              row[(c * kh + ky) * kw + kx] =
                  in ? x[((n * s.C + c) * ih + iy) * iw + ix] : 0.0f;
            }
          }
      }
  for (int64_t f = 0; f < s.F; ++f)
    for (int64_t n = 0; n < s.N; ++n)
      std::memcpy(dyT + f * NP + n * P, dy + (n * s.F + f) * P,
                  static_cast<size_t>(P) * sizeof(float));
  gp_gemm(0, 0, s.F, CK, NP, 1.0f, dyT, NP, cols, CK, 0.0f, dw, CK);
  return true;
}

} // namespace

bool gpipe::cpuConvConfigure(std::string &err) {
  ConvState &st = state();
  std::lock_guard<std::mutex> lock(st.mutex);
  const char *v = std::getenv("GPIPE_CPU_CONV_LAYOUT");
  std::string layout = v ? v : "";
  if (layout != "" && layout != "blocked" && layout != "plain") {
    err = "GPIPE_CPU_CONV_LAYOUT='" + layout +
          "' is not a convolution layout (expected blocked or plain)";
    return false;
  }
  st.blocked = layout != "plain";
  return true;
}

extern "C" {

void gp_conv_fwd(const gp_conv_shape *s, const float *x, const float *w,
                 const float *bias, float *y) {
  gpipe::LibraryTouch touch; // --profile's memory split
  ConvState &st = state();
  std::lock_guard<std::mutex> lock(st.mutex);
  ConvPrims &p = primsFor(*s);
  try {
    std::unique_ptr<dnnl::convolution_forward> &prim = bias ? p.fwdBias : p.fwd;
    if (!prim)
      prim = std::make_unique<dnnl::convolution_forward>(bias ? *p.fwdPdBias
                                                              : *p.fwdPd);
    memory out = output(p.fwdY, st, y, 2);
    std::unordered_map<int, memory> args = {
        {DNNL_ARG_SRC, input(p.fwdX, st, x, 0)},
        {DNNL_ARG_WEIGHTS, input(p.fwdW, st, w, 1)},
        {DNNL_ARG_DST, out}};
    if (bias)
      args.emplace(DNNL_ARG_BIAS, mem(p.b, st, bias));
    prim->execute(st.stream, args);
    finish(p.fwdY, st, out, y);
    st.stream.wait();
  } catch (const dnnl::error &e) {
    fail("forward", e);
  }
}

void gp_conv_bwd_data(const gp_conv_shape *s, const float *dy, const float *w,
                      float *dx) {
  gpipe::LibraryTouch touch; // --profile's memory split
  ConvState &st = state();
  std::lock_guard<std::mutex> lock(st.mutex);
  ConvPrims &p = primsFor(*s);
  try {
    if (!p.bwdData) {
      using bwd = dnnl::convolution_backward_data;
      bwd::primitive_desc pd(bwd::desc(dnnl::algorithm::convolution_direct,
                                       anyLike(st, p.x), anyLike(st, p.w),
                                       anyLike(st, p.y), p.strides, p.dilates,
                                       p.padL, p.padR),
                             st.engine, *p.fwdPd);
      setOperand(p.bdDy, p.y, pd.diff_dst_desc(), st.engine);
      setOperand(p.bdW, p.w, pd.weights_desc(), st.engine);
      setOperand(p.bdDx, p.x, pd.diff_src_desc(), st.engine);
      p.bwdData = std::make_unique<bwd>(pd);
    }
    memory out = output(p.bdDx, st, dx, 2);
    p.bwdData->execute(st.stream,
                       {{DNNL_ARG_DIFF_DST, input(p.bdDy, st, dy, 0)},
                        {DNNL_ARG_WEIGHTS, input(p.bdW, st, w, 1)},
                        {DNNL_ARG_DIFF_SRC, out}});
    finish(p.bdDx, st, out, dx);
    st.stream.wait();
  } catch (const dnnl::error &e) {
    fail("backward data", e);
  }
}

void gp_conv_bwd_weights(const gp_conv_shape *s, const float *x,
                         const float *dy, float *dw) {
  gpipe::LibraryTouch touch; // --profile's memory split
  ConvState &st = state();
  std::lock_guard<std::mutex> lock(st.mutex);
  if (smallMapWeightGrad(*s, st, x, dy, dw))
    return;
  ConvPrims &p = primsFor(*s);
  try {
    if (!p.bwdWeights) {
      using bwd = dnnl::convolution_backward_weights;
      bwd::primitive_desc pd(bwd::desc(dnnl::algorithm::convolution_direct,
                                       anyLike(st, p.x), anyLike(st, p.w),
                                       anyLike(st, p.y), p.strides, p.dilates,
                                       p.padL, p.padR),
                             st.engine, *p.fwdPd);
      setOperand(p.bwX, p.x, pd.src_desc(), st.engine);
      setOperand(p.bwDy, p.y, pd.diff_dst_desc(), st.engine);
      setOperand(p.bwDw, p.w, pd.diff_weights_desc(), st.engine);
      p.bwdWeights = std::make_unique<bwd>(pd);
    }
    memory out = output(p.bwDw, st, dw, 2);
    p.bwdWeights->execute(st.stream,
                          {{DNNL_ARG_SRC, input(p.bwX, st, x, 0)},
                           {DNNL_ARG_DIFF_DST, input(p.bwDy, st, dy, 1)},
                           {DNNL_ARG_DIFF_WEIGHTS, out}});
    finish(p.bwDw, st, out, dw);
    st.stream.wait();
  } catch (const dnnl::error &e) {
    fail("backward weights", e);
  }
}

} // extern "C"
