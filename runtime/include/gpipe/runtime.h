// The C-like API that generated stage programs call; plain C++17, no MLIR.
#ifndef GPIPE_RUNTIME_H
#define GPIPE_RUNTIME_H

#include <cmath>
#include <cstdint>

// glibc's libmvec holds vector variants of expf, logf, erff and tanhf, which
// <math.h> declares only under -ffast-math. Declaring them here lets GCC
// vectorize the loops that call them (the generated elementwise loops, the
// runtime's softmax and cross-entropy) without -ffast-math's other licences:
// infinities and NaNs keep their meaning (attention masks are -inf). Stage
// programs link -lmvec (GPIPE_RUNTIME_LINK_FLAGS).
#if defined(__GNUC__) && !defined(__clang__) && !defined(__CUDACC__) &&        \
    defined(__x86_64__) && defined(__GLIBC__)
#if __GLIBC_PREREQ(2, 35)
extern "C" {
__attribute__((__simd__("notinbranch"))) float expf(float) noexcept;
__attribute__((__simd__("notinbranch"))) float logf(float) noexcept;
__attribute__((__simd__("notinbranch"))) float erff(float) noexcept;
__attribute__((__simd__("notinbranch"))) float tanhf(float) noexcept;
}
#endif
#endif

extern "C" {

//===----------------------------------------------------------------------===//
// Program description, emitted by the code generator for each stage.
//===----------------------------------------------------------------------===//

enum gp_dtype : int32_t { GP_F32 = 0, GP_I64 = 1 };

/// The runtime a stage program was generated for: the CPU runtime
/// (libgpipe_runtime.a) or the CUDA one (libgpipe_runtime_cuda.a). Each
/// refuses a program of the other target.
enum gp_target : int32_t { GP_TARGET_CPU = 0, GP_TARGET_CUDA = 1 };

/// One tensor the runtime must fill (graph input) or load/store (parameter).
/// `offset` is the byte offset of its storage inside the stage arena.
struct gp_tensor_desc {
  const char *name; // ONNX name ("x", "fc1.weight")
  const char *file; // parameters: weight file name inside the weights dir
  gp_dtype dtype;
  int32_t rank;
  const int64_t *shape; // inputs: shape[0] is the mini-batch size B
  int64_t offset;       // byte offset in the arena
};

/// Per-step context handed to the generated stage functions.
struct gp_step_ctx {
  unsigned char
      *arena;   // program->arena_bytes bytes, 64-byte aligned, zeroed once
  int64_t step; // 1-based optimizer step number
  int64_t first_sample; // index (in the data files) of the first row of the
                        // micro-batch being run (forward/backward), else of
                        // the mini-batch
  int64_t microbatch;   // micro-batch being run, 0..M-1
  double loss;          // the loss stage's forward adds each micro-batch's
                        // share; the mini-batch loss after all forwards
  void *runtime;        // owned by gp_main (data files, transport)
  int32_t eval;         // 1: an evaluation forward (--eval-data), as torch's
                        // module.eval(): Dropout passes its input through,
                        // BatchNorm normalizes with the running statistics
                        // and leaves them alone; no backward or update runs
  int32_t skip_update;  // 1: update() only clears the gradient accumulators
                        // (--on-nan skip: every stage skips this step's
                        // optimizer update together)
};

/// One entry of a stage's schedule.
enum gp_action_kind : int32_t {
  GP_FORWARD = 0,
  GP_BACKWARD = 1,
  GP_UPDATE = 2,
  GP_WEIGHT = 3, // a micro-batch's deferred weight-gradient GEMMs (W)
  GP_FLUSH = 4   // wait until the stage's sends are received (S; no
                 // micro-batch, chunk 0)
};
struct gp_action {
  gp_action_kind kind;
  int32_t microbatch; // forward/backward/weight: which micro-batch; update: -1
  int32_t chunk;      // forward/backward/weight: which model chunk (0 when
                      // the stage holds one); update: 0 (it updates all)
};

/// One model chunk's functions (a stage holding several: interleaved
/// schedules). They share the stage's arena.
struct gp_chunk {
  void (*forward)(gp_step_ctx *ctx, int64_t microbatch);
  void (*backward)(gp_step_ctx *ctx, int64_t microbatch);
  void (*weight)(gp_step_ctx *ctx, int64_t first, int64_t count); // or null
};

/// One tensor crossing the stage's boundary, as the compiler checked it and
/// wrote it in pipeline.json ("boundaries").
struct gp_transfer {
  int32_t is_send; // 1: this stage sends it, 0: receives it
  int32_t phase;   // 0: in the forward, 1: the backward, 2: the update
  int32_t peer;    // the other stage
  int32_t tag;     // the boundary tensor's tag
  int64_t bytes;
  int32_t per_step; // 1: once per step (the first forward or backward
                    // that has it), 0: in every micro-batch's action
};

/// One optimizer state tensor of a parameter (same shape as the parameter),
/// saved and restored by checkpoints under (param, slot): slot is torch's
/// state key, "momentum_buffer" (SGD with momentum), "exp_avg" or
/// "exp_avg_sq" (Adam, AdamW).
struct gp_state_desc {
  const char *param; // the parameter's ONNX name, as in gp_program::params
  const char *slot;
  int64_t offset; // byte offset in the arena (float32, the param's shape)
  // -1; with --shard-optimizer, the parameter's first float among the
  // gradient accumulators: `offset` is then the slot's region, which holds
  // this replica's share of the accumulators' floats (the parameter's
  // elements in the share at their place in it).
  int64_t elem;
};

/// The stage program. gp_main runs `actions` in order once per optimizer
/// step: forward(ctx, m) / backward(ctx, m) for micro-batch m, update(ctx).
/// The generated functions move tensors with gp_send / gp_recv and read graph
/// inputs with gp_load_input themselves, in the order the compiler checked.
struct gp_program {
  const char *name;             // "stage1"
  int32_t stage;                // this stage's index = its MPI rank
  int32_t num_stages;           // K
  int32_t microbatches;         // M
  int64_t batch_size;           // B, the mini-batch (B/M rows per micro-batch)
  int32_t num_inputs;           // graph inputs this stage reads
  const gp_tensor_desc *inputs; // shape[0] is the micro-batch size B/M;
                                // offset is unused (gp_load_input copies)
  int32_t num_params;
  const gp_tensor_desc *params;
  int64_t arena_bytes;
  int32_t num_actions;
  const gp_action *actions;
  void (*forward)(gp_step_ctx *ctx, int64_t microbatch);
  void (*backward)(gp_step_ctx *ctx, int64_t microbatch);
  void (*update)(gp_step_ctx *ctx);
  int32_t has_loss;     // 1 on the stage that computes the loss (prints it)
  const char *build_id; // also in pipeline.json: which compile made it (null:
                        // not generated; --pipeline then skips the build id
                        // and boundary checks)
  int32_t num_transfers;
  const gp_transfer *transfers; // in the order of pipeline.json's boundaries
  gp_target target;             // which runtime it needs
  int64_t scratch_bytes; // CUDA: device scratch of the kernels (bf16 copies
                         // of GEMM operands), allocated once beside the arena
  void (*init)(gp_step_ctx *ctx); // null, or run once after the parameters
                                  // are loaded (e.g. their bf16 shadows)
  int32_t buffered_sends; // 1: the schedule needs sends that return at once
                          // (CPU: MPI_Bsend into a buffer sized for two
                          // steps of sends; CUDA: host-staged channels, each
                          // with a worker thread); 0: blocking sends
  int32_t num_states;     // optimizer state tensors (checkpoints)
  const gp_state_desc *states;
  // Zero-bubble schedules: the weight-gradient GEMMs that the backwards of
  // micro-batches first..first+count-1 left (GP_WEIGHT actions; the step
  // loop runs consecutive W actions of consecutive micro-batches as one
  // call, whose GEMMs then cover all their rows at once); null when the
  // schedule has none (the update then computes them over all micro-batches).
  void (*weight)(gp_step_ctx *ctx, int64_t first, int64_t count);
  // Interleaved schedules: the stage holds num_chunks > 1 model chunks and
  // an action of chunk c runs chunks[c]'s function (forward, backward and
  // weight above are chunk 0's); update runs every chunk's update. 0 or 1:
  // one chunk, chunks null.
  int32_t num_chunks;
  const gp_chunk *chunks;
  // gpipe-compile --profile: the timed units of generated code (each calls
  // gp_profile_add with its index); 0 and null in other builds.
  int32_t num_profile_units;
  const struct gp_profile_unit *profile_units;
  // gpipe-compile --data-parallel D: the program is one replica's stage (of
  // D replicas of the pipeline; batch_size is a replica's share, B/D); 0 or
  // 1: one pipeline.
  int32_t data_parallel;
  // gpipe-compile --shard-optimizer (ZeRO-1): the replicas the optimizer
  // state is split across (each holds the state of its share of the
  // gradient accumulators' floats); 0: not split.
  int32_t shard_optimizer;
  // --shard-optimizer: the gradient accumulators' floats, which the replicas
  // share ([n * r / D, n * (r + 1) / D) each); 0 otherwise.
  int64_t shard_floats;
};

/// gpipe-compile --profile (CPU target): one op of a timed unit, as the
/// cost table (--profile FILE of the stage program) names it.
struct gp_profile_op {
  const char *node;      // the ONNX node (or parameter) the op comes from
  const char *op;        // "nn.gemm"
  const char *signature; // "nn.gemm(f32[32x64], f32[64x64]) -> f32[32x64]"
  double estimate;       // the compiler's analytic seconds (splits the
                         // unit's measured time between its ops)
};
/// One timed unit: a fused group of ops (or one op, or a deferred
/// weight-gradient GEMM) of a stage function.
struct gp_profile_unit {
  const char *function; // "forward", "backward", "weight" or "update"
  int32_t chunk;
  int32_t num_ops;
  const gp_profile_op *ops;
};
/// CLOCK_MONOTONIC nanoseconds, for gp_profile_add.
int64_t gp_profile_now(void);
/// Adds the time since `t0` (gp_profile_now) to unit `unit`.
void gp_profile_add(int32_t unit, int64_t t0);

/// Entry point of every stage executable: parses the command line, joins the
/// other stages (MPI, when num_stages > 1), loads weights and data, runs the
/// steps, logs, writes the trained weights of this stage's parameters.
///   --data DIR          one <input name>.npy per graph input (first axis =
///   sample)
///   --steps N           optimizer steps (mini-batches taken in order,
///   wrapping)
///   --weights-in DIR    initial parameters (<desc.file>, .npy float32)
///   --weights-out DIR   trained parameters written there at the end
///   --log-json FILE     one JSON object per step: {"step":1,"loss":..,"ms":..}
///                       (written by the loss stage only)
///   --threads T         BLAS and OpenMP threads of this stage (default 1;
///                       CPU target)
///   --device N          CUDA target: the GPU to use (default: the rank on
///                       its node modulo the visible GPUs)
///   --status-file FILE  "exit <code>" at the end, "signal <n>" on a crash
///   --pipeline FILE     the pipeline.json compiled with this executable: the
///                       stage checks it describes this program (build id,
///                       stages, micro-batches, its schedule and boundaries)
///   --quiet             no per-step lines on stdout
/// Returns the process exit code; every error prints one line
/// "gpipe: error: stage S: ..." naming the file / input / flag / peer, and
/// returns non-zero (after MPI_Abort when other stages are running).
int gp_main(int argc, char **argv, const gp_program *program);

/// Copies micro-batch `microbatch` of graph input `input` (an index into
/// program->inputs) of the current mini-batch to `dst`.
void gp_load_input(gp_step_ctx *ctx, int32_t input, int64_t microbatch,
                   void *dst);

/// Point-to-point transfers between stages (MPI ranks). `tag` identifies the
/// boundary tensor; `bytes` must agree on both sides, or the run ends with an
/// error naming both stages and the tag. CPU: blocking MPI. CUDA: enqueued on
/// the communication stream (NCCL, or host-staged MPI between stages that
/// share a GPU), ordered after the compute that produced `buf` and before
/// the compute that reads a received one.
void gp_send(gp_step_ctx *ctx, int32_t peer, int32_t tag, const void *buf,
             int64_t bytes);
void gp_recv(gp_step_ctx *ctx, int32_t peer, int32_t tag, void *buf,
             int64_t bytes);

/// Adds the scalar loss at `loss` (arena) to the step's loss (ctx->loss once
/// the step's work is done): the loss stage calls it once per micro-batch.
void gp_report_loss(gp_step_ctx *ctx, const float *loss);
/// gpipe-compile --data-parallel D > 1: the update's first call, once the
/// step's gradients are summed: the arena's gradient accumulators [offset,
/// offset + bytes) become the mean of the stage's D replicas' (summed in
/// replica order: the same bits on every replica and every run).
void gp_reduce_gradients(gp_step_ctx *ctx, int64_t offset, int64_t bytes);
/// The same in two halves, so that the averaging overlaps the update's
/// weight-gradient GEMMs: gp_reduce_start starts averaging [offset, offset
/// + bytes) (the update starts each gradient once it is final and writes
/// none of them again before gp_reduce_wait), gp_reduce_wait waits for all
/// that were started. The same bits as gp_reduce_gradients.
void gp_reduce_start(gp_step_ctx *ctx, int64_t offset, int64_t bytes);
void gp_reduce_wait(gp_step_ctx *ctx);

/// --shard-optimizer: a parameter the update gathers, by where its gradient
/// accumulator lies among the accumulators' floats.
typedef struct gp_shard_param {
  int64_t offset; // the parameter in the arena
  int64_t elem;   // its accumulator's first float, from the first one's
  int64_t n;      // floats
} gp_shard_param;
/// Of `total` accumulator floats, replica r's share is [total * r / D,
/// total * (r + 1) / D). For the parameter whose accumulator is floats
/// [elem, elem + n): sets [i0, i1) to the elements in the share (i0 == i1:
/// none) and returns the first one's index in the share (its state).
int64_t gp_shard_slice(gp_step_ctx *ctx, int64_t total, int64_t elem, int64_t n,
                       int64_t *i0, int64_t *i1);
/// The update's first call: this replica's share of the accumulators
/// [offset, offset + bytes) becomes the replicas' mean (the same sum in
/// replica order as gp_reduce_gradients); the rest is left as it was.
void gp_shard_reduce(gp_step_ctx *ctx, int64_t offset, int64_t bytes);
/// The update's last call before the accumulators are cleared: every
/// replica's share of the `count` parameters (each replica changed its
/// share) gathered into every replica's copy, through the accumulators
/// [offset, offset + bytes) as the buffer.
void gp_shard_gather(gp_step_ctx *ctx, int64_t offset, int64_t bytes,
                     const gp_shard_param *params, int32_t count);

/// Checks micro-batch `microbatch` of graph input `input` (int64 labels, in
/// the data file) as gp_check_labels does, reading the file itself: for
/// targets whose arena the host cannot read.
void gp_check_input_labels(const gp_step_ctx *ctx, int32_t input,
                           int64_t microbatch, int64_t classes,
                           int32_t has_ignore, int64_t ignore_index);

/// Checks micro-batch `microbatch` of graph input `input` (int64 indices into
/// a table of `rows` rows, e.g. token ids, in the data file) before a gather
/// reads them: each must be in [-rows, rows). Otherwise prints "gpipe: error:
/// stage K: graph input '<input>', sample N, element E (step S): index I is
/// outside [-R, R)" and ends the process with exit code 1, as
/// gp_check_input_labels does.
void gp_check_input_indices(const gp_step_ctx *ctx, int32_t input,
                            int64_t microbatch, int64_t rows);

/// Labels of graph input `input` in the whole current mini-batch (all M
/// micro-batches) that are not ignore_index (all of them when has_ignore == 0):
/// the divisor of a mean-reduced loss split into micro-batches.
int64_t gp_count_labels(gp_step_ctx *ctx, int32_t input, int32_t has_ignore,
                        int64_t ignore_index);

//===----------------------------------------------------------------------===//
// Kernels. All tensors are dense row-major float32 unless stated.
//===----------------------------------------------------------------------===//

/// C[M,N] = alpha * op(A) * op(B) + beta * C, row-major, op = transpose if set.
/// lda/ldb/ldc are the row strides of A, B, C as stored.
void gp_gemm(int transA, int transB, int64_t M, int64_t N, int64_t K,
             float alpha, const float *A, int64_t lda, const float *B,
             int64_t ldb, float beta, float *C, int64_t ldc);

/// How a GEMM multiplies.
enum gp_math : int32_t {
  GP_MATH_F32 = 0,  // fp32 inputs, fp32 products (no TF32)
  GP_MATH_TF32 = 1, // fp32 inputs rounded to TF32 by the tensor cores
  GP_MATH_BF16 = 2  // bf16 inputs, fp32 accumulation and output
};

/// gp_gemm and more (CUDA: through cuBLASLt; CPU: oneDNN): C[M,N] =
/// alpha*op(A)*op(B) + beta*C
/// (+ bias[N] on every row when bias != nullptr: the bias epilogue; then
/// max(., 0) when relu != 0: the relu epilogue), row-major as gp_gemm. `math`
/// picks the products (gp_math). With GP_MATH_BF16, A16 and B16 may point at
/// bf16 copies of A and B (same layout and strides), e.g. the bf16 shadows of
/// parameters; a null one is rounded from the fp32 operand into the runtime's
/// scratch (program->scratch_bytes) first. C stays fp32.
void gp_gemm_ex(int transA, int transB, int64_t M, int64_t N, int64_t K,
                float alpha, const float *A, int64_t lda, const float *B,
                int64_t ldb, float beta, float *C, int64_t ldc,
                const float *bias, int32_t relu, int32_t math, const void *A16,
                const void *B16);

/// Batched products C[b] = op(A[b]) * op(B[b]) for every index b of the
/// batch shape batch_shape[batch_rank] (row-major over it), op as gp_gemm. C
/// is dense: [batch..., M, N], overwritten. A and B are dense matrices
/// (A: M x K, or K x M when transA; B: K x N, or N x K when transB) at
/// element offsets sum_d b_d * a_stride[d] (b_stride[d]) from A (B): a stride
/// 0 broadcasts that operand along dim d. `math` as gp_gemm_ex (CPU: bf16
/// rounds the operands, TF32 is fp32; CUDA, bf16: the operands are rounded
/// into the runtime's scratch, which must hold both operands' spans).
void gp_batch_gemm(int transA, int transB, int64_t M, int64_t N, int64_t K,
                   const float *A, const float *B, float *C, int32_t batch_rank,
                   const int64_t *batch_shape, const int64_t *a_stride,
                   const int64_t *b_stride, int32_t math);

/// out[i] = bf16(in[i]) (round to nearest even), n elements; out is bf16.
void gp_cast_bf16(const float *in, void *out, int64_t n);

/// out[i] = sum of in over the broadcast dimensions, i.e. the reverse of
/// numpy broadcasting `out_shape` -> `in_shape`. Both shapes have `rank`
/// entries (out_shape left-padded with 1s); out_shape[d] is in_shape[d] or 1.
void gp_reduce_to(const float *in, const int64_t *in_shape, float *out,
                  const int64_t *out_shape, int32_t rank);

/// out[i] = the maximum of in over the broadcast dimensions (shapes as
/// gp_reduce_to); a NaN among the reduced elements gives NaN (torch's amax).
void gp_reduce_max(const float *in, const int64_t *in_shape, float *out,
                   const int64_t *out_shape, int32_t rank);

/// Softmax along the middle axis of x viewed as [outer, n, inner]:
/// y[o, k, j] = exp(x[o, k, j] - m) / sum_k' exp(x[o, k', j] - m), m the
/// row's maximum (the sum in double). y may alias x.
/// Inverted dropout of n elements whose indices in the mini-batch's tensor
/// start at `base`: y[i] = x[i] / (1 - ratio) where the counter-based draw
/// for (key, ctx->step, base + i) is >= ratio, else 0; y = x when ctx->eval.
/// The same call with x = dy is the gradient (the mask is redrawn, never
/// stored). In place is allowed.
void gp_dropout(const gp_step_ctx *ctx, uint64_t key, float ratio,
                const float *x, float *y, int64_t n, int64_t base);

void gp_softmax(const float *x, float *y, int64_t outer, int64_t n,
                int64_t inner);

/// The softmax's gradient from its output y and the incoming gradient dy,
/// same view: dx = y * (dy - sum_k(dy * y)) (the sum in double). dx may alias
/// dy.
void gp_softmax_bwd(const float *y, const float *dy, float *dx, int64_t outer,
                    int64_t n, int64_t inner);

/// Log-softmax along the middle axis of x viewed as [outer, n, inner]:
/// y[o, k, j] = x[o, k, j] - (m + log(sum_k' exp(x[o, k', j] - m))), m the
/// row's maximum (the sum in double). y may alias x.
void gp_log_softmax(const float *x, float *y, int64_t outer, int64_t n,
                    int64_t inner);

/// The log-softmax's gradient from its output y and the incoming gradient
/// dy, same view: dx = dy - exp(y) * sum_k(dy) (the sum in double). dx may
/// alias dy.
void gp_log_softmax_bwd(const float *y, const float *dy, float *dx,
                        int64_t outer, int64_t n, int64_t inner);

/// Layer normalization of x viewed as [rows, n], each row over its n
/// elements: mean[r], inv_std[r] = 1 / sqrt(var + eps) (the biased variance;
/// two passes, the sums in double), y = (x - mean) * inv_std * scale + bias
/// (scale and bias [n]; bias may be null). y may alias x.
void gp_layer_norm(const float *x, const float *scale, const float *bias,
                   float *y, float *mean, float *inv_std, int64_t rows,
                   int64_t n, float eps);

/// The layer normalization's input gradient, same view, from the input and
/// the saved statistics: with g = dy * scale and xhat = (x - mean) * inv_std,
/// dx = inv_std * (g - mean_row(g) - xhat * mean_row(g * xhat)) (the sums in
/// double). dx may alias dy.
void gp_layer_norm_bwd(const float *x, const float *mean, const float *inv_std,
                       const float *scale, const float *dy, float *dx,
                       int64_t rows, int64_t n);

/// The scale's gradient: dscale[j] = sum over the rows r of dy[r, j] *
/// xhat[r, j], in double and in a fixed order (deterministic: no atomics; CPU:
/// in row order, CUDA: partial sums over strided rows, then a fixed tree).
void gp_layer_norm_scale_bwd(const float *x, const float *mean,
                             const float *inv_std, const float *dy,
                             float *dscale, int64_t rows, int64_t n);

/// Batch normalization in training mode of x viewed as [n, c, s] (s: the
/// product of the spatial dimensions, 1 for [n, c]): per channel k, over its
/// n * s elements, mean[k] and var[k] (the biased variance; two passes, sums in
/// double), y = (x - mean[k]) / sqrt(var[k] + eps) * scale[k] + bias[k].
/// y may alias x.
void gp_batch_norm(const float *x, const float *scale, const float *bias,
                   float *y, float *mean, float *var, int64_t n, int64_t c,
                   int64_t s, float eps);

/// BatchNorm in evaluation (ctx->eval): y = (x - running_mean[k]) /
/// sqrt(running_var[k] + eps) * scale[k] + bias[k], same view as
/// gp_batch_norm. y may alias x.
void gp_batch_norm_eval(const float *x, const float *running_mean,
                        const float *running_var, const float *scale,
                        const float *bias, float *y, int64_t n, int64_t c,
                        int64_t s, float eps);

/// Its gradients, from the forward input, the saved mean and var, the scale
/// and dy (same view): with inv_std = 1 / sqrt(var + eps), xhat = (x - mean) *
/// inv_std and count = n * s, per channel k: dbias[k] = sum(dy),
/// dscale[k] = sum(dy * xhat) (double, a fixed order: deterministic),
/// dx = scale[k] * inv_std * (dy - dbias[k] / count - xhat * dscale[k] /
/// count). dx may alias dy. Any of dx, dscale, dbias may be null (not wanted).
void gp_batch_norm_bwd(const float *x, const float *mean, const float *var,
                       const float *scale, const float *dy, float *dx,
                       float *dscale, float *dbias, int64_t n, int64_t c,
                       int64_t s, float eps);

/// Updates the running statistics as torch's BatchNorm does in training, in
/// ONNX's convention for momentum: with `count` elements per channel behind
/// mean and var (the biased variance),
///   microbatches == 1: running_mean = momentum * running_mean +
///     (1 - momentum) * mean; running_var = momentum * running_var +
///     (1 - momentum) * var * count / (count - 1)   (unbiased; count >= 2).
///   microbatches == M > 1 (deferred: statistics over the whole mini-batch):
///     saves micro-batch `microbatch`'s mean and var into state
///     (float [M][2][c]: state[m][0][k] = mean, state[m][1][k] = var); when
///     microbatch == M - 1, combines the M of them in double: mean_all =
///     average of the means, var_all = average of the vars + average of
///     (mean_m - mean_all)^2 (the biased variance of all M * count
///     elements), then applies the formula above with mean_all, var_all and
///     count_total = M * count. Earlier micro-batches leave running_* as they
///     are.
///   state may be null when microbatches == 1.
void gp_batch_norm_update(float *running_mean, float *running_var,
                          const float *mean, const float *var, float *state,
                          int64_t c, int64_t count, float momentum,
                          int64_t microbatches, int64_t microbatch);

/// The window of a 1-D or 2-D pooling over planes of ih x iw elements (1-D:
/// ih = 1, kh = 1, sh = 1, no padding along h): window size, stride,
/// padding before (ph, pw) and after (ph_end, pw_end), dilation, and the
/// output plane's oh x ow.
struct gp_pool_window {
  int64_t ih, iw, oh, ow, kh, kw, sh, sw, ph, pw, ph_end, pw_end, dh, dw;
};

/// Max pooling of `nc` planes: y the window's maximum, idx the flat index
/// (h * iw + w) of its first maximum in row-major scan order (NaN wins;
/// padding never does), as torch.
void gp_max_pool(const float *x, float *y, int64_t *idx, int64_t nc,
                 gp_pool_window w);

/// Its gradient: dx (nc planes of in_plane) zeroed, then dy added at idx,
/// outputs in order (overlapping windows accumulate).
void gp_max_pool_bwd(const int64_t *idx, const float *dy, float *dx, int64_t nc,
                     int64_t in_plane, int64_t out_plane);

/// Average pooling of `nc` planes (dilation 1): the divisor counts the
/// window's input elements, or with count_include_pad its padding too, the
/// window clipped to the padded input's end (torch's avg_pool).
void gp_avg_pool(const float *x, float *y, int64_t nc, gp_pool_window w,
                 int32_t count_include_pad);

/// Its gradient: dx zeroed, then each dy / divisor added over its window.
void gp_avg_pool_bwd(const float *dy, float *dx, int64_t nc, gp_pool_window w,
                     int32_t count_include_pad);

/// Scaled dot-product attention of `batch` independent blocks (the leading
/// axes of q, k, v flattened): per block, with q [Tq, d], k [Tk, d], v [Tk,
/// dv] row-major, s = scale * q k^T, s[i, j] = -inf where mask[i, j] != 0
/// (mask [Tq, Tk], shared by every block; null: no mask), out = softmax(s) v
/// [Tq, dv] and lse[i] = m_i + log(sum_j exp(s[i, j] - m_i)), m_i the row's
/// maximum (the sum in double). A fully masked row gives NaN (as gp_softmax).
void gp_attention_fwd(const float *q, const float *k, const float *v,
                      const float *mask, float *out, float *lse, int64_t batch,
                      int64_t Tq, int64_t Tk, int64_t d, int64_t dv,
                      float scale);

/// Its gradient from the forward's operands, out, lse and dout (same views):
/// P = exp(s - lse) recomputed, D = rowsum(dout * out), dv = P^T dout,
/// dP = dout v^T, dS = P * (dP - D), dq = scale * dS k, dk = scale * dS^T q.
void gp_attention_bwd(const float *q, const float *k, const float *v,
                      const float *mask, const float *out, const float *lse,
                      const float *dout, float *dq, float *dk, float *dv,
                      int64_t batch, int64_t Tq, int64_t Tk, int64_t d,
                      int64_t dv_dim, float scale);

/// Embedding lookup (ONNX Gather on axis 0): out[i, :] = table[idx[i], :] for
/// i in [0, n), rows of `width` floats from a table of `rows` rows; an index
/// in [-rows, 0) counts from the end; one outside [-rows, rows) gives a row
/// of zeros.
void gp_gather(const float *table, const int64_t *idx, float *out, int64_t n,
               int64_t rows, int64_t width);

/// The gather's gradient: dtable = 0, then dtable[idx[i], :] += dout[i, :] for
/// i = 0, 1, ..., n-1 in that order (repeated indices add up; indices
/// outside [-rows, rows) are skipped). Deterministic on both targets: each
/// column's sums run over the positions in order.
void gp_scatter_add(const float *dout, const int64_t *idx, float *dtable,
                    int64_t n, int64_t rows, int64_t width);

/// Copies a block view: for o in [0,outer): copy `count` floats-or-elements
/// (elem_bytes each) from src + o*src_stride to dst + o*dst_stride (strides in
/// elements). Used for Concat (and its gradient, slicing).
void gp_copy_blocks(void *dst, int64_t dst_stride, const void *src,
                    int64_t src_stride, int64_t outer, int64_t count,
                    int64_t elem_bytes);

/// Softmax cross-entropy over logits[N, C] with int64 labels[N]: the sum over
/// the non-ignored samples (ignore_index used only when has_ignore != 0)
/// divided by `norm`, or by their count when norm <= 0 (a plain mean).
/// Writes the scalar loss to *loss and, if log_prob != nullptr, log-softmax.
/// If every label is ignored the loss is NaN (as torch).
void gp_softmax_xent_fwd(const float *logits, const int64_t *labels, int64_t N,
                         int64_t C, int32_t has_ignore, int64_t ignore_index,
                         double norm, float *loss, float *log_prob);

/// Checks the labels of a loss before it runs: each must be in [0, classes),
/// or equal ignore_index when has_ignore != 0. Otherwise prints
/// "gpipe: error: stage K: graph input '<input>', sample N (step S): label L is
/// outside [0, C)" (N = ctx->first_sample + row) and ends the process with
/// exit code 1, tearing down the other stages (nothing has been written).
/// CPU target only: the labels are read in host memory (a CUDA stage checks
/// its labels with gp_check_input_labels).
void gp_check_labels(const gp_step_ctx *ctx, const int64_t *labels, int64_t n,
                     int64_t classes, int32_t has_ignore, int64_t ignore_index,
                     const char *input);

/// dlogits = dloss * (softmax(logits) - onehot(labels)) / norm (norm <= 0:
/// the count of non-ignored samples), zero rows for ignored samples; `dloss`
/// points at the scalar upstream gradient.
void gp_softmax_xent_bwd(const float *logits, const int64_t *labels, int64_t N,
                         int64_t C, int32_t has_ignore, int64_t ignore_index,
                         double norm, const float *dloss, float *dlogits);

/// Negative log-likelihood over log-probabilities log_prob[N, C] with int64
/// labels[N]: the sum of -log_prob[i, labels[i]] over the non-ignored samples
/// divided as gp_softmax_xent_fwd's (norm 1: a sum), into *loss.
/// A convolution's shapes (nn.conv and its gradients), spatial dims 1 or 2:
/// x [N, C, in...], w [F, C/groups, kernel...], y [N, F, out...], row-major
/// (NCW / NCHW, weights OIW / OIHW). Generated code passes a static one per
/// op; the runtime builds its primitives (oneDNN, cuDNN) once per distinct
/// shape and reuses them.
struct gp_conv_shape {
  int32_t spatial; // 1 or 2
  int64_t N, C, F, groups;
  int64_t in[2], kernel[2], out[2];
  int64_t stride[2], dilation[2], pad_begin[2], pad_end[2];
};

/// y = conv(x, w) + bias (bias [F], may be null).
void gp_conv_fwd(const gp_conv_shape *s, const float *x, const float *w,
                 const float *bias, float *y);
/// dx from dy and w (dx is overwritten).
void gp_conv_bwd_data(const gp_conv_shape *s, const float *dy, const float *w,
                      float *dx);
/// dw from x and dy, summed over N and the output positions (overwritten).
void gp_conv_bwd_weights(const gp_conv_shape *s, const float *x,
                         const float *dy, float *dw);

void gp_nll_fwd(const float *log_prob, const int64_t *labels, int64_t N,
                int64_t C, int32_t has_ignore, int64_t ignore_index,
                double norm, float *loss);

/// dlog_prob = 0 except -dloss / norm (norm <= 0: the count of non-ignored
/// samples) at each non-ignored sample's label; `dloss` points at the scalar
/// upstream gradient. Every label ignored: all zeros.
void gp_nll_bwd(const int64_t *labels, int64_t N, int64_t C, int32_t has_ignore,
                int64_t ignore_index, double norm, const float *dloss,
                float *dlog_prob);

/// torch.optim.SGD (1.13 semantics, dampening 0, maximize false):
///   g += wd*p;  if momentum: buf = (step==1) ? g : momentum*buf + g;
///   g = nesterov ? g + momentum*buf : buf;  p -= lr*g.
/// `buf` may be null when momentum == 0.
void gp_sgd_update(float *p, const float *g, float *buf, int64_t n, float lr,
                   float momentum, float weight_decay, int32_t nesterov,
                   int64_t step);

/// torch.optim.Adam / AdamW (decoupled != 0), amsgrad false:
///   AdamW: p *= 1 - lr*wd;  Adam: g += wd*p
///   m = b1*m + (1-b1)*g;  v = b2*v + (1-b2)*g*g
///   p -= (lr / (1-b1^step)) * m / (sqrt(v) / sqrt(1-b2^step) + eps)
void gp_adam_update(float *p, const float *g, float *m, float *v, int64_t n,
                    float lr, float beta1, float beta2, float eps,
                    float weight_decay, int32_t decoupled, int64_t step);

} // extern "C"

#endif // GPIPE_RUNTIME_H
