// A hand-written stage program of a toy GPipe pipeline, standing in for the
// code generator's output in the runtime's multi-stage tests.
//
// The model: logits = x * w0 * w1 * ... * w{L-1} (elementwise, x[B, D], each
// w[D]), loss = softmax cross-entropy(logits, y) averaged over the labels of
// the mini-batch that are not -100; SGD. This executable runs layers
// [TOY_FIRST, TOY_FIRST + TOY_LAYERS) as stage TOY_STAGE of TOY_STAGES, in
// micro-batches with the GPipe schedule F0..F{M-1} B{M-1}..B0 U, sending
// activations forward (tag m) and gradients back (tag 1000 + m).
//
// Fault injection for the tests (environment):
//   GPIPE_TOY_CRASH=S:N       stage S raises SIGSEGV in step N's first forward
//   GPIPE_TOY_HANG=S:N        stage S sleeps forever there instead
//   GPIPE_TOY_SHORT_SEND=S    stage S sends 4 bytes less than it should
#include "gpipe/runtime.h"

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unistd.h>
#include <vector>

namespace {

constexpr int64_t D = 4; // features = classes
#ifndef TOY_BATCH
#define TOY_BATCH 8
#endif
constexpr int64_t B = TOY_BATCH; // mini-batch
constexpr int64_t M = 2;         // micro-batches
constexpr int64_t R = B / M;
constexpr float kLr = 0.5f;
constexpr int kStage = TOY_STAGE, kStages = TOY_STAGES;
constexpr int kFirst = TOY_FIRST, kLayers = TOY_LAYERS;
constexpr bool kFirstStage = kStage == 0, kLastStage = kStage == kStages - 1;
constexpr int32_t kXInput = 0;
constexpr int32_t kYInput = kFirstStage ? 1 : 0;

// Arena layout (bytes).
constexpr int64_t kActBytes = R * D * 4;
constexpr int64_t kW = 0;                       // w[j][D]
constexpr int64_t kGW = kW + kLayers * D * 4;   // grad w[j][D]
constexpr int64_t kAct = kGW + kLayers * D * 4; // act[m][j][R*D], j <= L
constexpr int64_t kLabels = kAct + M * (kLayers + 1) * kActBytes; // [m][R]
constexpr int64_t kGrad = kLabels + M * R * 8;                    // g[R*D]
constexpr int64_t kArena = kGrad + kActBytes;

float *f32(gp_step_ctx *ctx, int64_t off) {
  return reinterpret_cast<float *>(ctx->arena + off);
}
float *act(gp_step_ctx *ctx, int64_t m, int j) {
  return f32(ctx, kAct + (m * (kLayers + 1) + j) * kActBytes);
}
int64_t *labels(gp_step_ctx *ctx, int64_t m) {
  return reinterpret_cast<int64_t *>(ctx->arena + kLabels + m * R * 8);
}

bool faultHere(const char *var, const gp_step_ctx *ctx) {
  const char *v = std::getenv(var);
  int s = -1;
  long long n = -1;
  return v && std::sscanf(v, "%d:%lld", &s, &n) == 2 && s == kStage &&
         n == ctx->step;
}

int64_t sendBytes() {
  const char *v = std::getenv("GPIPE_TOY_SHORT_SEND");
  return v && std::atoi(v) == kStage ? kActBytes - 4 : kActBytes;
}

void forward(gp_step_ctx *ctx, int64_t m) {
  if (m == 0 && faultHere("GPIPE_TOY_CRASH", ctx))
    std::raise(SIGSEGV);
  if (m == 0 && faultHere("GPIPE_TOY_HANG", ctx))
    for (;;)
      ::pause();
  float *a0 = act(ctx, m, 0);
  if (kFirstStage)
    gp_load_input(ctx, kXInput, m, a0);
  else
    gp_recv(ctx, kStage - 1, static_cast<int32_t>(m), a0, kActBytes);
  for (int j = 0; j < kLayers; ++j) {
    const float *in = act(ctx, m, j), *w = f32(ctx, kW + j * D * 4);
    float *o = act(ctx, m, j + 1);
    for (int64_t r = 0; r < R; ++r)
      for (int64_t d = 0; d < D; ++d)
        o[r * D + d] = in[r * D + d] * w[d];
  }
  float *logits = act(ctx, m, kLayers);
  if (!kLastStage) {
    gp_send(ctx, kStage + 1, static_cast<int32_t>(m), logits, sendBytes());
    return;
  }
  int64_t *y = labels(ctx, m);
  gp_load_input(ctx, kYInput, m, y);
  gp_check_labels(ctx, y, R, D, 1, -100, "y");
  int64_t norm = gp_count_labels(ctx, kYInput, 1, -100);
  float share = 0;
  gp_softmax_xent_fwd(logits, y, R, D, 1, -100, static_cast<double>(norm),
                      &share, nullptr);
  ctx->loss += share;
}

void backward(gp_step_ctx *ctx, int64_t m) {
  float *g = f32(ctx, kGrad);
  if (kLastStage) {
    const float one = 1.0f;
    int64_t norm = gp_count_labels(ctx, kYInput, 1, -100);
    gp_softmax_xent_bwd(act(ctx, m, kLayers), labels(ctx, m), R, D, 1, -100,
                        static_cast<double>(norm), &one, g);
  } else {
    gp_recv(ctx, kStage + 1, static_cast<int32_t>(1000 + m), g, kActBytes);
  }
  for (int j = kLayers - 1; j >= 0; --j) {
    const float *in = act(ctx, m, j), *w = f32(ctx, kW + j * D * 4);
    float *gw = f32(ctx, kGW + j * D * 4);
    for (int64_t r = 0; r < R; ++r)
      for (int64_t d = 0; d < D; ++d) {
        gw[d] += g[r * D + d] * in[r * D + d];
        g[r * D + d] *= w[d];
      }
  }
  if (!kFirstStage)
    gp_send(ctx, kStage - 1, static_cast<int32_t>(1000 + m), g, sendBytes());
}

void update(gp_step_ctx *ctx) {
  for (int64_t i = 0; i < kLayers * D; ++i) {
    f32(ctx, kW)[i] -= kLr * f32(ctx, kGW)[i];
    f32(ctx, kGW)[i] = 0.0f;
  }
}

} // namespace

int main(int argc, char **argv) {
  static const int64_t xShape[] = {R, D}, yShape[] = {R}, wShape[] = {D};
  std::vector<gp_tensor_desc> inputs;
  if (kFirstStage)
    inputs.push_back({"x", nullptr, GP_F32, 2, xShape, 0});
  if (kLastStage)
    inputs.push_back({"y", nullptr, GP_I64, 1, yShape, 0});
  std::vector<std::string> names, files;
  for (int j = 0; j < kLayers; ++j) {
    names.push_back("layer" + std::to_string(kFirst + j) + ".w");
    files.push_back(names.back() + ".npy");
  }
  std::vector<gp_tensor_desc> params;
  for (int j = 0; j < kLayers; ++j)
    params.push_back({names[j].c_str(), files[j].c_str(), GP_F32, 1, wShape,
                      kW + j * D * 4});
  std::vector<gp_action> actions;
  for (int32_t m = 0; m < M; ++m)
    actions.push_back({GP_FORWARD, m});
  for (int32_t m = M - 1; m >= 0; --m)
    actions.push_back({GP_BACKWARD, m});
  actions.push_back({GP_UPDATE, -1});

  gp_program p{};
  p.name = "toy";
  p.stage = kStage;
  p.num_stages = kStages;
  p.microbatches = M;
  p.batch_size = B;
  p.num_inputs = static_cast<int32_t>(inputs.size());
  p.inputs = inputs.data();
  p.num_params = kLayers;
  p.params = params.data();
  p.arena_bytes = kArena;
  p.num_actions = static_cast<int32_t>(actions.size());
  p.actions = actions.data();
  p.forward = forward;
  p.backward = backward;
  p.update = update;
  p.has_loss = kLastStage;
  return gp_main(argc, argv, &p);
}
