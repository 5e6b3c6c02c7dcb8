// Unit tests of compiler pieces: weight file names, broadcasting, memory plan.
#include "compiler/CppEmitter.h"
#include "dialects/nn/NNOps.h"
#include "dialects/pipe/PipeOps.h"
#include "passes/CostTable.h"
#include "passes/PartitionCuts.h"
#include "passes/Passes.h"
#include "passes/Pipeline.h"
#include "passes/schedules/Schedules.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"

#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <random>

using namespace mlir;

TEST(WeightFileName, SanitizesAndDeduplicates) {
  std::vector<std::string> taken;
  EXPECT_EQ(gpipe::weightFileName("fc1.weight", taken), "fc1.weight.npy");
  EXPECT_EQ(gpipe::weightFileName("a/b:c", taken), "a_b_c.npy");
  // "a_b_c" collides with the sanitized "a/b:c".
  EXPECT_EQ(gpipe::weightFileName("a_b_c", taken), "a_b_c.1.npy");
  EXPECT_EQ(gpipe::weightFileName(".hidden", taken), "p.hidden.npy");
  EXPECT_EQ(gpipe::weightFileName("", taken), "p.npy");
}

TEST(BroadcastShapes, NumpyRules) {
  using V = llvm::SmallVector<int64_t>;
  EXPECT_EQ(*gpipe::nn::broadcastShapes({4, 1, 3}, {5, 1}), (V{4, 5, 3}));
  EXPECT_EQ(*gpipe::nn::broadcastShapes({}, {2, 3}), (V{2, 3}));
  EXPECT_EQ(*gpipe::nn::broadcastShapes({2, 3}, {3}), (V{2, 3}));
  EXPECT_TRUE(failed(gpipe::nn::broadcastShapes({2, 3}, {2})));
  EXPECT_TRUE(failed(gpipe::nn::broadcastShapes({4, 3}, {5, 3})));
}

namespace {
/// A chain of `depth` tanh layers on [64, 256] with a loss, already through
/// autodiff-like gradient ops, to exercise slot reuse.
std::string chainIR(int depth) {
  std::string ir = "nn.parameter @w : tensor<256x256xf32>\n"
                   "func.func @step(%x: tensor<64x256xf32> {nn.input = \"x\"}, "
                   "%y: tensor<64xi64> {nn.input = \"y\"}) -> (tensor<f32> "
                   "{nn.loss}) {\n";
  ir += "  %w = nn.param @w : tensor<256x256xf32>\n";
  std::string prev = "%x";
  for (int i = 0; i < depth; ++i) {
    std::string h = "%h" + std::to_string(i), t = "%t" + std::to_string(i);
    ir += "  " + h + " = nn.gemm " + prev +
          ", %w : (tensor<64x256xf32>, tensor<256x256xf32>) -> "
          "tensor<64x256xf32>\n";
    ir += "  " + t + " = nn.tanh " + h + " : tensor<64x256xf32>\n";
    prev = t;
  }
  ir += "  %l = nn.softmax_cross_entropy " + prev +
        ", %y : tensor<64x256xf32>, tensor<64xi64>\n";
  ir += "  return %l : tensor<f32>\n}\n";
  return ir;
}
} // namespace

namespace {
/// Runs the driver's pass pipeline (one stage, one micro-batch) and emits
/// stage 0.
FailureOr<gpipe::EmittedStage> compileChain(MLIRContext &ctx,
                                            OwningOpRef<ModuleOp> &module,
                                            int depth,
                                            const std::string &remat) {
  ctx.loadDialect<gpipe::nn::NNDialect, gpipe::pipeline::PipeDialect,
                  func::FuncDialect>();
  module = parseSourceString<ModuleOp>(chainIR(depth), &ctx);
  if (!module)
    return failure();
  PassManager pm(&ctx);
  auto &fpm = pm.nest<func::FuncOp>();
  fpm.addPass(gpipe::createPartition());
  fpm.addPass(gpipe::createAutodiff());
  fpm.addPass(gpipe::createOptimizer());
  pm.addPass(gpipe::createOutlineStages());
  gpipe::RematOptions rm;
  rm.mode = remat;
  pm.addPass(gpipe::createRemat(rm));
  pm.addPass(gpipe::createSchedule());
  gpipe::buildLoweringPipeline(pm, gpipe::LoweringOptions());
  if (failed(pm.run(*module)))
    return failure();
  std::vector<std::string> taken;
  return gpipe::emitStageCpp(*module, 0, "t", taken);
}
} // namespace

TEST(MemoryPlan, StashAndSlotReuse) {
  const int depth = 10;
  const int64_t tensor = 64 * 256 * 4, labels = 64 * 8;
  MLIRContext ctx;
  OwningOpRef<ModuleOp> module;
  FailureOr<gpipe::EmittedStage> stage =
      compileChain(ctx, module, depth, "none");
  ASSERT_TRUE(succeeded(stage));
  const gpipe::MemoryPlan &m = stage->memory;
  // Without remat the backward reads x, the labels and every tanh output.
  EXPECT_EQ(m.stashBytesPerMicrobatch, (depth + 1) * tensor + labels);
  EXPECT_EQ(m.stashBytes, m.stashBytesPerMicrobatch);
  EXPECT_EQ(m.parameterBytes, 256 * 256 * 4);
  EXPECT_EQ(m.gradientBytes, 256 * 256 * 4);
  // The sizes are multiples of 64: the parts add up to the arena exactly.
  EXPECT_EQ(m.arenaBytes, m.parameterBytes + m.gradientBytes + m.stashBytes +
                              m.transientBytes);
  // Slots are reused: the backward keeps a few gradients alive at once (the
  // weight, shared by every layer, sums its gradient over them), far fewer
  // than the 2*depth activation gradients and depth weight gradients it
  // computes.
  const int64_t weight = 256 * 256 * 4;
  EXPECT_LE(m.transientBytes, 3 * weight + 3 * tensor);
  EXPECT_EQ(stage->forwardFlops,
            depth * (2LL * 64 * 256 * 256 + 8LL * 64 * 256) + 6LL * 64 * 256);
  EXPECT_EQ(stage->schedule, (std::vector<std::string>{"F0", "B0", "U"}));
}

TEST(MemoryPlan, RematKeepsOnlyBoundaryInputs) {
  const int depth = 10;
  const int64_t tensor = 64 * 256 * 4, labels = 64 * 8;
  MLIRContext ctx;
  OwningOpRef<ModuleOp> module;
  FailureOr<gpipe::EmittedStage> stage =
      compileChain(ctx, module, depth, "stage");
  ASSERT_TRUE(succeeded(stage));
  EXPECT_EQ(stage->memory.stashBytesPerMicrobatch, tensor + labels);
  // The backward recomputes the forward first.
  EXPECT_GT(stage->backwardFlops, stage->forwardFlops);
}

// Every registered schedule, for K in 1..8, M in 1..16 and V (chunks per
// stage) in what it accepts up to 4: each stage runs F and B of every
// (chunk, micro-batch) once, B after F, W (if any) once per micro-batch
// after its B, the update last; its stash stays within the bound the
// schedule states (GPipe M, 1F1B and ZB-H1 min(K-s, M) micro-batches;
// interleaved min((K-1-s)*2 + (V-1)*K + 1, M*V) forwards over its chunks);
// and all stages together run to their end with buffered sends (F<i> of
// virtual stage p waits for virtual stage p-1's F<i>, B<i> for p+1's B<i>),
// so the deadlock check of gpipe-check-schedule can only confirm it. The
// requirements a schedule refuses are the ones it states.
TEST(Schedules, EveryScheduleIsCompleteBoundedAndRuns) {
  using gpipe::pipeline::ActionAttr;
  using gpipe::pipeline::Phase;
  mlir::MLIRContext ctx;
  ctx.loadDialect<gpipe::pipeline::PipeDialect>();
  int runs = 0;
  for (const gpipe::schedules::Schedule &sched : gpipe::schedules::all())
    for (int64_t v = 1; v <= 4; ++v)
      for (int64_t k = 1; k <= 8; ++k)
        for (int64_t m = 1; m <= 16; ++m) {
          SCOPED_TRACE(sched.name.str() + " K " + std::to_string(k) + " M " +
                       std::to_string(m) + " V " + std::to_string(v));
          std::string why = sched.check(k, m, v);
          const bool interleaved = sched.name == "interleaved";
          const bool zbv = sched.name == "zbv";
          const bool bfpp = sched.name == "bfpp";
          const bool zbh2 = sched.name == "zbh2";
          const bool weights = sched.name == "zbh1" || zbh2 || zbv;
          const bool ok = interleaved ? v >= 2 && k >= 2 && m % k == 0
                          : zbv       ? v == 2
                          : bfpp      ? v >= 2
                                      : v == 1;
          EXPECT_EQ(why.empty(), ok) << why;
          if (!why.empty())
            continue;
          ++runs;
          gpipe::schedules::Table table = sched.generate(&ctx, k, m, v);
          ASSERT_EQ(static_cast<int64_t>(table.size()), k);
          // Each (stage, chunk)'s virtual stage: every one of 0..KV-1 once.
          std::vector<int> placed(k * v, 0);
          for (int64_t s = 0; s < k; ++s)
            for (int64_t c = 0; c < v; ++c) {
              int64_t p = sched.virtualStage(k, v, s, c);
              ASSERT_GE(p, 0);
              ASSERT_LT(p, k * v);
              ++placed[p];
            }
          for (int count : placed)
            ASSERT_EQ(count, 1);
          bool anyWeight = false;
          for (int64_t s = 0; s < k; ++s) {
            const auto &acts = table[s];
            ASSERT_FALSE(acts.empty());
            EXPECT_EQ(acts.back().getPhase(), Phase::Update);
            EXPECT_EQ(acts.back().getChunk(), 0);
            std::vector<int> f(m * v, 0), b(m * v, 0), w(m * v, 0);
            int64_t live = 0, peak = 0;
            for (size_t i = 0; i + 1 < acts.size(); ++i) {
              ActionAttr a = acts[i];
              ASSERT_NE(a.getPhase(), Phase::Update);
              int64_t mb = *a.getMicrobatch();
              ASSERT_LT(mb, m);
              ASSERT_LT(a.getChunk(), v);
              int64_t key = a.getChunk() * m + mb;
              if (a.getPhase() == Phase::Forward) {
                ++f[key];
                peak = std::max(peak, ++live);
              } else if (a.getPhase() == Phase::Backward) {
                EXPECT_EQ(f[key], 1) << a.getShortName() << " before its F";
                ++b[key];
                --live;
              } else {
                EXPECT_EQ(b[key], 1) << a.getShortName() << " before its B";
                ++w[key];
                anyWeight = true;
              }
            }
            for (int64_t i = 0; i < m * v; ++i) {
              EXPECT_EQ(f[i], 1);
              EXPECT_EQ(b[i], 1);
              EXPECT_EQ(w[i], weights ? 1 : 0);
            }
            const int64_t bound =
                sched.name == "gpipe" ? m
                : bfpp                ? m * v
                : interleaved
                    ? std::min((k - 1 - s) * 2 + (v - 1) * k + 1, m * v)
                : zbv  ? std::min(2 * k, 2 * m)
                : zbh2 ? std::min(2 * (k - s) - 1, m)
                       : std::min(k - s, m);
            EXPECT_LE(peak, bound) << "stage " << s;
          }
          EXPECT_EQ(anyWeight, weights);
          // Buffered sends: run every stage as far as its inputs allow.
          const int64_t n = k * v;
          std::vector<size_t> pos(k, 0);
          std::vector<std::vector<bool>> fDone(n, std::vector<bool>(m)),
              bDone(n, std::vector<bool>(m));
          for (bool progress = true; progress;) {
            progress = false;
            for (int64_t s = 0; s < k; ++s)
              while (pos[s] < table[s].size()) {
                ActionAttr a = table[s][pos[s]];
                int64_t mb = a.getMicrobatch().value_or(0);
                int64_t p = sched.virtualStage(k, v, s, a.getChunk());
                if (a.getPhase() == Phase::Forward) {
                  if (p > 0 && !fDone[p - 1][mb])
                    break;
                  fDone[p][mb] = true;
                } else if (a.getPhase() == Phase::Backward) {
                  if (p + 1 < n && !bDone[p + 1][mb])
                    break;
                  bDone[p][mb] = true;
                }
                ++pos[s];
                progress = true;
              }
          }
          for (int64_t s = 0; s < k; ++s)
            EXPECT_EQ(pos[s], table[s].size()) << "stage " << s << " stuck";
        }
  // 3 one-chunk schedules x 8 x 16, and the chunked schedules' V.
  EXPECT_GT(runs, 3 * 8 * 16);
}

// The partition's cut search against brute force: on random chains of 1..9
// units with integer costs (exact sums), for k in 1..4, with and without a
// per-group limit (here a "memory" per unit and a budget, group j's memory
// also scaled by a per-group factor as a schedule's in-flight count would),
// balancedCuts finds a cut of the smallest possible bottleneck among those
// that fit, its groups fit, and it reports no cut exactly when none fits.
TEST(Partition, CutsEqualBruteForce) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> costOf(0, 9), memOf(1, 5);
  int checked = 0, infeasible = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const size_t n = 1 + trial % 9;
    std::vector<double> cost(n), mem(n);
    for (size_t i = 0; i < n; ++i) {
      cost[i] = costOf(rng);
      mem[i] = memOf(rng);
    }
    for (int64_t k = 1; k <= 4; ++k)
      for (int limited = 0; limited < 2; ++limited) {
        const double budget = limited ? 4 + trial % 7 : 0;
        auto groupMem = [&](int64_t g, size_t b, size_t e) {
          double m = 0;
          for (size_t i = b; i < e; ++i)
            m += mem[i];
          return m * (1 + 0.5 * double(g % 2));
        };
        auto fits = [&](int64_t g, size_t b, size_t e) {
          return !limited || groupMem(g, b, e) <= budget;
        };
        // Brute force: every choice of k-1 cut positions among 1..n-1.
        double bestBrute = -1;
        std::vector<size_t> starts(k);
        std::function<void(int64_t, size_t)> walk = [&](int64_t g,
                                                        size_t from) {
          if (g == k) {
            double worst = 0;
            for (int64_t j = 0; j < k; ++j) {
              size_t b = starts[j], e = j + 1 < k ? starts[j + 1] : n;
              if (!fits(j, b, e))
                return;
              double sum = 0;
              for (size_t i = b; i < e; ++i)
                sum += cost[i];
              worst = std::max(worst, sum);
            }
            if (bestBrute < 0 || worst < bestBrute)
              bestBrute = worst;
            return;
          }
          for (size_t b = from; b + (k - g) <= n; ++b) {
            starts[g] = b;
            walk(g + 1, b + 1);
          }
        };
        if (static_cast<size_t>(k) <= n) {
          starts[0] = 0;
          walk(1, 1);
        }
        std::optional<llvm::SmallVector<size_t>> got =
            gpipe::balancedCuts(cost, k, fits);
        SCOPED_TRACE("n " + std::to_string(n) + " k " + std::to_string(k) +
                     (limited ? " budget " + std::to_string(budget) : ""));
        ASSERT_EQ(got.has_value(), bestBrute >= 0);
        if (!got) {
          ++infeasible;
          continue;
        }
        ASSERT_EQ(got->size(), static_cast<size_t>(k));
        EXPECT_EQ((*got)[0], 0u);
        double worst = 0;
        for (int64_t j = 0; j < k; ++j) {
          size_t b = (*got)[j], e = j + 1 < k ? (*got)[j + 1] : n;
          ASSERT_LT(b, e) << "group " << j << " is empty";
          EXPECT_TRUE(fits(j, b, e)) << "group " << j << " does not fit";
          double sum = 0;
          for (size_t i = b; i < e; ++i)
            sum += cost[i];
          worst = std::max(worst, sum);
        }
        EXPECT_EQ(worst, bestBrute);
        ++checked;
      }
  }
  // Both outcomes were exercised.
  EXPECT_GT(checked, 1000);
  EXPECT_GT(infeasible, 50);
}

// The cost table's link model: latency and bandwidth fitted to measured
// transfers; with one size, that size's time per byte and no latency;
// without links, transfers are free.
TEST(CostTable, LinkModelFitsLatencyAndBandwidth) {
  gpipe::CostTable t;
  EXPECT_FALSE(t.linkModel().has_value());
  EXPECT_EQ(t.transferSeconds(1 << 20), 0.0);
  const double latency = 2e-6, bandwidth = 10e9;
  for (int64_t bytes : {int64_t(8), int64_t(1) << 16, int64_t(1) << 20})
    t.links.push_back({bytes, latency + double(bytes) / bandwidth});
  auto m = t.linkModel();
  ASSERT_TRUE(m.has_value());
  EXPECT_NEAR(m->first, latency, 1e-9);
  EXPECT_NEAR(m->second / bandwidth, 1.0, 1e-6);
  EXPECT_NEAR(t.transferSeconds(1 << 18), latency + double(1 << 18) / bandwidth,
              1e-9);
  gpipe::CostTable one;
  one.links.push_back({1 << 20, 1e-4});
  auto m1 = one.linkModel();
  ASSERT_TRUE(m1.has_value());
  EXPECT_EQ(m1->first, 0.0);
  EXPECT_NEAR(one.transferSeconds(1 << 19), 0.5e-4, 1e-12);
}

// The runtime memory a stage is predicted with: the table's stages in the
// same place of their pipeline; a middle stage without any, the smaller of
// first and last; 1-stage profiles only, their largest.
TEST(CostTable, RuntimeBytesByPlace) {
  gpipe::CostTable t;
  EXPECT_EQ(t.runtimeBytesFor(0, 2), 0);
  t.runtimeBytes = 50;
  t.runtimeAlone = 30;
  EXPECT_EQ(t.runtimeBytesFor(0, 1), 30);
  EXPECT_EQ(t.runtimeBytesFor(1, 4), 50); // no pipeline stage measured
  t.runtimeFirst = 40;
  t.runtimeLast = 50;
  EXPECT_EQ(t.runtimeBytesFor(0, 4), 40);
  EXPECT_EQ(t.runtimeBytesFor(3, 4), 50);
  EXPECT_EQ(t.runtimeBytesFor(1, 4), 40);
  t.runtimeMiddle = 35;
  EXPECT_EQ(t.runtimeBytesFor(2, 4), 35);
}

namespace {
// A cost table of one header per entry (its stage, its pipeline's stages,
// the build, the target, more header fields) and one timed unit each,
// loaded as gpipe-compile --costs would.
struct TableHeader {
  int stage = 0, stages = 1;
  std::string build = "b", target = "cpu", extra;
};
gpipe::CostTable loadTable(const std::vector<TableHeader> &headers) {
  llvm::SmallString<128> path;
  EXPECT_FALSE(llvm::sys::fs::createTemporaryFile("costs", "jsonl", path));
  {
    std::ofstream f(path.c_str());
    for (const TableHeader &h : headers)
      f << "{\"gpipe_profile\":1,\"stage\":" << h.stage
        << ",\"stages\":" << h.stages << ",\"build_id\":\"" << h.build
        << "\",\"target\":\"" << h.target
        << "\",\"microbatches\":2,\"batch_size\":8,\"steps\":2,"
           "\"runtime_bytes\":1000"
        << h.extra << "}\n"
        << "{\"stage\":" << h.stage
        << ",\"unit\":0,\"function\":\"forward\",\"chunk\":0,"
           "\"calls\":2,\"seconds\":0.001,\"ops\":[{\"node\":\"n\","
           "\"op\":\"nn.tanh\",\"signature\":\"nn.tanh(tensor<4x4xf32>) -> "
           "tensor<4x4xf32>\",\"estimate\":1e-08}]}\n";
  }
  std::string err;
  std::optional<gpipe::CostTable> t = gpipe::loadCostTable(path, err);
  llvm::sys::fs::remove(path);
  EXPECT_TRUE(t.has_value()) << err;
  return t.value_or(gpipe::CostTable());
}
} // namespace

// With the place's runtime memory by part and the stage's traits: start
// plus the larger of the stage's own load piece and the steady rest, less
// the math libraries' part for a stage that calls none of them.
TEST(CostTable, RuntimeBytesFromTheSplit) {
  gpipe::CostTable t;
  t.runtimeFirst = 36;
  t.runtimeLast = 27;
  t.splitFirst = {/*start=*/20, /*load=*/16, /*library=*/6, /*steady=*/7};
  t.splitLast = {/*start=*/20, /*load=*/0, /*library=*/6, /*steady=*/7};
  gpipe::CostTable::StageTraits big{/*loadBytes=*/16, true},
      small{/*loadBytes=*/1, true}, noLibrary{/*loadBytes=*/0, false};
  EXPECT_EQ(t.runtimeBytesFor(0, 4), 36); // no traits: the place's bytes
  EXPECT_EQ(t.runtimeBytesFor(0, 4, &big), 36);
  EXPECT_EQ(t.runtimeBytesFor(0, 4, &small), 27);
  EXPECT_EQ(t.runtimeBytesFor(3, 4, &noLibrary), 21);
  EXPECT_EQ(t.runtimeBytesFor(3, 4, &big), 36);
  // A middle stage takes the smaller place (last here), split and all.
  EXPECT_EQ(t.runtimeBytesFor(1, 4, &small), 27);
  EXPECT_EQ(t.runtimeBytesFor(2, 4, &noLibrary), 21);
  // The stage's own library memory (by its ops' signatures) replaces the
  // place's: 20 + (7 - 6 + 9).
  gpipe::CostTable::StageTraits byOps{/*loadBytes=*/1, true, /*library=*/9};
  EXPECT_EQ(t.runtimeBytesFor(3, 4, &byOps), 30);
  // A place without its split (an older runtime's table): its bytes.
  t.splitLast = gpipe::CostTable::RuntimeSplit();
  EXPECT_EQ(t.runtimeBytesFor(3, 4, &noLibrary), 27);
}

// A table's headers give each place its split, part by part the largest;
// a place where one header lacks it has none.
TEST(CostTable, RuntimeSplitFromHeaders) {
  const char *first = ",\"start_bytes\":20,\"load_bytes\":16,"
                      "\"library_bytes\":6,\"steady_bytes\":7";
  const char *last = ",\"start_bytes\":21,\"load_bytes\":0,"
                     "\"library_bytes\":5,\"steady_bytes\":9";
  gpipe::CostTable t =
      loadTable({{0, 2, "b", "cpu", first}, {1, 2, "b", "cpu", last}});
  EXPECT_EQ(t.splitFirst.start, 20);
  EXPECT_EQ(t.splitFirst.load, 16);
  EXPECT_EQ(t.splitLast.library, 5);
  EXPECT_EQ(t.splitLast.steady, 9);
  gpipe::CostTable::StageTraits none{0, false};
  EXPECT_EQ(t.runtimeBytesFor(1, 2, &none), 25);
  // Two builds' last stages: each part the larger; the first stages' split
  // is unknown when one of them lacks it.
  const char *last2 = ",\"start_bytes\":19,\"load_bytes\":3,"
                      "\"library_bytes\":8,\"steady_bytes\":8";
  t = loadTable({{0, 2, "b", "cpu", first},
                 {1, 2, "b", "cpu", last},
                 {0, 2, "c", "cpu", ""},
                 {1, 2, "c", "cpu", last2}});
  EXPECT_FALSE(t.splitFirst.known());
  EXPECT_EQ(t.splitLast.start, 21);
  EXPECT_EQ(t.splitLast.load, 3);
  EXPECT_EQ(t.splitLast.library, 8);
  EXPECT_EQ(t.splitLast.steady, 9);
}

// Units that called the math libraries give their ops' signatures what the
// libraries held after them, the largest over the table.
TEST(CostTable, LibraryBytesBySignature) {
  llvm::SmallString<128> path;
  ASSERT_FALSE(llvm::sys::fs::createTemporaryFile("lib", "jsonl", path));
  {
    std::ofstream f(path.c_str());
    auto unit = [&](int stage, int u, const char *sig, const char *lib) {
      f << "{\"stage\":" << stage << ",\"unit\":" << u
        << ",\"function\":\"forward\",\"chunk\":0,\"calls\":2,"
           "\"seconds\":0.001,\"ops\":[{\"node\":\"n"
        << u << "\",\"op\":\"nn.gemm\",\"signature\":\"" << sig
        << "\",\"estimate\":1e-08}]" << lib << "}\n";
    };
    for (int s = 0; s < 2; ++s) {
      f << "{\"gpipe_profile\":1,\"stage\":" << s
        << ",\"stages\":2,\"build_id\":\"b\",\"target\":\"cpu\","
           "\"microbatches\":2,\"batch_size\":8,\"steps\":2,"
           "\"runtime_bytes\":50}\n";
      unit(s, 0, "g(a)", s ? ",\"library_bytes\":7" : ",\"library_bytes\":3");
      unit(s, 1, "g(b)", ""); // no library call in the warm-up step
      unit(s, 2, "w(x, y) -> r1", ",\"library_bytes\":5");
    }
  }
  std::string err;
  std::optional<gpipe::CostTable> t = gpipe::loadCostTable(path, err);
  llvm::sys::fs::remove(path);
  ASSERT_TRUE(t.has_value()) << err;
  EXPECT_EQ(t->libraryBySignature.lookup("g(a)"), 7);
  EXPECT_FALSE(t->libraryBySignature.count("g(b)"));
  // Also by the operands alone: an op of other results but the same
  // operands (a 1 x 1 and a 3 x 3 weight gradient of one input) shares it.
  EXPECT_EQ(t->libraryBySignature.lookup("w(x, y) -> r1"), 5);
  EXPECT_EQ(
      t->libraryBySignature.lookup(gpipe::libraryOperandsKey("w(x, y) -> r2")),
      5);
  EXPECT_EQ(gpipe::libraryOperandsKey("w(x, y) -> r2"), "w(x, y)");
}

// A table is a CUDA one when every header says target "cuda" (its
// runtime_bytes are then GPU memory, which only CUDA predictions use).
TEST(CostTable, CudaOnlyWhenEveryHeaderIs) {
  auto load = [](const std::vector<std::string> &targets) {
    std::vector<TableHeader> headers;
    for (size_t s = 0; s < targets.size(); ++s)
      headers.push_back({int(s), int(targets.size()), "b", targets[s], ""});
    return loadTable(headers).cuda;
  };
  EXPECT_TRUE(load({"cuda"}));
  EXPECT_TRUE(load({"cuda", "cuda"}));
  EXPECT_FALSE(load({"cpu"}));
  EXPECT_FALSE(load({"cuda", "cpu"}));
  EXPECT_FALSE(load({"cpu", "cuda"}));
}
