// --auto (Auto.h): plan every candidate configuration, predict its step by
// simulating its schedule, keep the fastest that fits.
#include "compiler/driver/Auto.h"

#include "compiler/CppEmitter.h"
#include "compiler/driver/Diagnostics.h"
#include "compiler/driver/PassPipeline.h"
#include "passes/Pipeline.h"
#include "passes/schedules/Schedules.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <array>
#include <limits>

using namespace mlir;

namespace gpipe::driver {
namespace {

/// The step time of `table` (K stages, M micro-batches, V chunks) when
/// chunk c of stage s takes `perChunk[s][c]` = {forward, backward, weight,
/// update} seconds per step in all (one forward of it: a 1/M share) and a
/// forward's (backward's) output takes `transfer[s]` = {forward, backward}
/// seconds to reach a piece on another stage (the cost table's measured
/// links; 0 without): every stage runs its actions in order, each as soon
/// as the one before it and its input (the previous piece's forward, the
/// next piece's backward) are there. Infinity for a deadlock.
double simulateStep(const schedules::Schedule &sched,
                    const schedules::Table &table, int64_t k, int64_t m,
                    int64_t v,
                    llvm::ArrayRef<std::vector<std::array<double, 4>>> perChunk,
                    llvm::ArrayRef<std::array<double, 2>> transfer,
                    bool weightActions) {
  const int64_t pieces = k * v;
  // Which stage holds each piece.
  std::vector<int64_t> stageOf(pieces, 0);
  for (int64_t s = 0; s < k; ++s)
    for (int64_t c = 0; c < v; ++c)
      stageOf[sched.virtualStage(k, v, s, c)] = s;
  std::vector<std::vector<double>> fDone(pieces, std::vector<double>(m, -1)),
      bDone(pieces, std::vector<double>(m, -1));
  std::vector<size_t> next(k, 0);
  std::vector<double> clock(k, 0);
  const double share = 1.0 / double(m);
  for (bool progress = true; progress;) {
    progress = false;
    for (int64_t s = 0; s < k; ++s) {
      while (next[s] < table[s].size()) {
        pipeline::ActionAttr a = table[s][next[s]];
        const std::array<double, 4> &t = perChunk[s][a.getChunk()];
        int64_t piece = sched.virtualStage(k, v, s, a.getChunk());
        int64_t mb = a.getMicrobatch().value_or(0);
        double ready = clock[s], cost = 0;
        switch (a.getPhase()) {
        case pipeline::Phase::Forward:
          if (piece > 0) {
            if (fDone[piece - 1][mb] < 0)
              goto blocked;
            ready = std::max(ready, fDone[piece - 1][mb]);
          }
          cost = t[0] * share;
          break;
        case pipeline::Phase::Backward:
          if (piece + 1 < pieces) {
            if (bDone[piece + 1][mb] < 0)
              goto blocked;
            ready = std::max(ready, bDone[piece + 1][mb]);
          }
          cost = t[1] * share;
          break;
        case pipeline::Phase::Weight:
          cost = t[2] * share;
          break;
        case pipeline::Phase::Flush: // its wait is not modelled
          break;
        case pipeline::Phase::Update: // every chunk's
          for (const std::array<double, 4> &c : perChunk[s])
            cost += c[3] + (weightActions ? 0.0 : c[2]);
          break;
        }
        clock[s] = ready + cost;
        // When the output is at the piece that reads it.
        if (a.getPhase() == pipeline::Phase::Forward)
          fDone[piece][mb] =
              clock[s] + (piece + 1 < pieces && stageOf[piece + 1] != s
                              ? transfer[s][0]
                              : 0.0);
        else if (a.getPhase() == pipeline::Phase::Backward)
          bDone[piece][mb] =
              clock[s] +
              (piece > 0 && stageOf[piece - 1] != s ? transfer[s][1] : 0.0);
        ++next[s];
        progress = true;
      }
    blocked:;
    }
  }
  for (int64_t s = 0; s < k; ++s)
    if (next[s] < table[s].size())
      return std::numeric_limits<double>::infinity();
  return *std::max_element(clock.begin(), clock.end());
}

/// Plans `c` on a copy of `imported`: fills `cand` (rejected when a pass
/// fails, with its first error, or a stage does not fit).
void plan(ModuleOp imported, const CompileOptions &c, const CostTable &costs,
          int64_t budget, AutoCandidate &cand) {
  MLIRContext *ctx = imported.getContext();
  std::string firstError;
  // The candidate's errors are its reason, not the compile's.
  ScopedDiagnosticHandler quiet(ctx, [&](Diagnostic &d) {
    if (d.getSeverity() == DiagnosticSeverity::Error && firstError.empty())
      firstError = d.str();
    return success();
  });
  OwningOpRef<ModuleOp> module(imported.clone());
  PassManager pm(ctx);
  buildPassPipeline(pm, c, c.remat);
  PassManager lower(ctx);
  LoweringOptions lo;
  lo.target = c.target;
  lo.precision = c.precision;
  buildLoweringPipeline(lower, lo);
  if (failed(pm.run(*module)) || failed(lower.run(*module))) {
    cand.rejected = firstError.empty() ? "the plan failed" : firstError;
    return;
  }
  std::vector<std::string> taken;
  std::vector<std::vector<std::array<double, 4>>> perChunk;
  std::vector<std::array<double, 2>> transfer;
  for (int64_t s = 0; s < c.stages; ++s) {
    EmitOptions eo;
    eo.cuda = c.target == "cuda";
    eo.bf16 = c.precision == "bf16";
    eo.costs = &costs;
    FailureOr<EmittedStage> st =
        emitStageCpp(*module, s, "stage" + std::to_string(s), taken, "", eo);
    if (failed(st)) {
      cand.rejected =
          firstError.empty() ? "code generation failed" : firstError;
      return;
    }
    const std::vector<double> &t = st->predictedSeconds;
    perChunk.push_back(st->predictedChunkSeconds);
    // A micro-batch's sends of each phase, shared by the stage's chunks.
    std::array<int64_t, 2> sent = {0, 0};
    for (const EmittedTransfer &x : st->transfers)
      if (x.isSend && (x.phase == "forward" || x.phase == "backward"))
        sent[x.phase == "forward" ? 0 : 1] += x.bytes;
    const double chunks = double(std::max<int64_t>(1, c.virtualStages));
    transfer.push_back(
        {costs.transferSeconds(int64_t(double(sent[0]) / chunks)),
         costs.transferSeconds(int64_t(double(sent[1]) / chunks))});
    cand.stageSeconds.push_back(t[0] + t[1] + t[2] + t[3]);
    cand.stagePeakBytes.push_back(predictedPeakBytes(
        *st, runtimeBytesOf(costs, s, c.stages, *st), c.microbatches, c.stages,
        /*cuda=*/false));
    cand.stageArenaBytes.push_back(st->memory.arenaBytes);
    cand.stageStashSlots.push_back(st->memory.stashSlots);
    cand.stageStashBytes.push_back(st->memory.stashBytesPerMicrobatch);
  }
  const schedules::Schedule *sched = schedules::lookup(c.schedule);
  schedules::Table table =
      sched->generate(ctx, c.stages, c.microbatches, c.virtualStages);
  bool weightActions = llvm::any_of(table, [](const auto &actions) {
    return llvm::any_of(actions, [](pipeline::ActionAttr a) {
      return a.getPhase() == pipeline::Phase::Weight;
    });
  });
  cand.stepSeconds =
      simulateStep(*sched, table, c.stages, c.microbatches, c.virtualStages,
                   perChunk, transfer, weightActions);
  if (budget > 0)
    for (auto [s, bytes] : llvm::enumerate(cand.stagePeakBytes))
      if (bytes > budget) {
        cand.rejected = "stage " + std::to_string(s) + " needs " +
                        std::to_string(bytes >> 20) + " MiB";
        return;
      }
}

/// remat segments: from every stage keeping its whole stash, cuts the stash
/// of each stage whose measure (its planned arena, or with `withRuntime`
/// its predicted peak) is over `budget` by the excess spread over its stash
/// slots, and plans again, until every stage fits (at most 8 plans). Fills
/// c.rematStashBytes and `cand` (the last plan); on failure says why: the
/// plan's own error (`cand.rejected`, a pass's) or what does not fit (`why`).
LogicalResult fitSegments(ModuleOp imported, CompileOptions &c,
                          const CostTable &costs, int64_t budget,
                          bool withRuntime, AutoCandidate &cand,
                          std::string &why) {
  c.remat = "segments";
  c.rematStages.clear();
  c.rematStashBytes.assign(static_cast<size_t>(c.stages), -1);
  for (int round = 0; round < 8; ++round) {
    cand = AutoCandidate();
    plan(imported, c, costs, /*budget=*/0, cand);
    if (!cand.rejected.empty())
      return failure();
    bool over = false;
    for (int64_t s = 0; s < c.stages; ++s) {
      const int64_t bytes =
          withRuntime ? cand.stagePeakBytes[s] : cand.stageArenaBytes[s];
      if (bytes <= budget)
        continue;
      over = true;
      int64_t &allowed = c.rematStashBytes[s];
      if (allowed == 0) {
        why = "stage " + std::to_string(s) + "'s " +
              (withRuntime ? "predicted peak" : "planned arena") + " is " +
              std::to_string(bytes) +
              " bytes even recomputing its whole forward";
        return failure();
      }
      // The stash shrinks by the excess spread over its slots.
      const int64_t slots = std::max<int64_t>(1, cand.stageStashSlots[s]);
      const int64_t cut = (bytes - budget + slots - 1) / slots;
      const int64_t now = allowed < 0
                              ? cand.stageStashBytes[s]
                              : std::min(allowed, cand.stageStashBytes[s]);
      allowed = std::max<int64_t>(0, now - cut);
    }
    if (!over)
      return success();
  }
  why = "no per-stage stash fitted in 8 plans";
  return failure();
}

} // namespace

FailureOr<std::vector<AutoCandidate>>
chooseConfiguration(ModuleOp imported, const CompileOptions &o,
                    int64_t batchSize, const CostTable &costs) {
  const int64_t runtimeBytes = runtimeBytesOf(costs);
  std::vector<AutoCandidate> all;
  for (int64_t m = 1; m <= std::min<int64_t>(32, batchSize); m *= 2) {
    if (batchSize % m != 0)
      continue;
    for (const schedules::Schedule &sched : schedules::all()) {
      int64_t v = sched.minChunks > 1 ? 2 : 1;
      if (v > sched.maxChunks || !sched.check(o.stages, m, v).empty())
        continue;
      // remat none, then stage on every stage, then (one chunk per stage,
      // when none left stages over the budget) on those stages only.
      std::vector<int64_t> over;
      for (int variant = 0; variant < 4; ++variant) {
        const bool mixed = variant == 2, segments = variant == 3;
        if ((mixed || segments) &&
            (over.empty() || v > 1 ||
             (mixed && int64_t(over.size()) == o.stages)))
          continue;
        CompileOptions c = o;
        c.microbatches = m;
        c.schedule = sched.name.str();
        c.virtualStages = v;
        c.remat = variant == 0 ? "none" : "stage";
        if (mixed)
          c.rematStages = over;
        // The partition keeps to the budget less the runtime's own memory
        // (one chunk per stage: its estimate knows no chunks); with mixed
        // remat or segments, the cost-balanced partition (its estimate
        // knows one remat mode); the arenas are checked after either way.
        c.memoryPerStage =
            o.memoryPerStage > 0 && v == 1 && variant < 2
                ? std::max<int64_t>(1, o.memoryPerStage - runtimeBytes)
                : 0;
        AutoCandidate cand;
        if (segments) {
          // Per stage, part of the stash: fitSegments sets c's remat.
          std::string why;
          if (failed(fitSegments(imported, c, costs, o.memoryPerStage,
                                 /*withRuntime=*/true, cand, why)) &&
              cand.rejected.empty())
            cand.rejected = why;
        } else {
          plan(imported, c, costs, o.memoryPerStage, cand);
        }
        cand.microbatches = m;
        cand.schedule = c.schedule;
        cand.virtualStages = v;
        cand.remat = c.remat;
        cand.rematStages = c.rematStages;
        cand.rematStashBytes = c.rematStashBytes;
        cand.partitionBytes = c.memoryPerStage;
        if (variant == 0 && o.memoryPerStage > 0 && v == 1) {
          // Which stages remat none leaves over the budget, in the
          // cost-balanced partition.
          AutoCandidate probe;
          CompileOptions free = c;
          free.memoryPerStage = 0;
          plan(imported, free, costs, 0, probe);
          for (auto [s, bytes] : llvm::enumerate(probe.stagePeakBytes))
            if (bytes > o.memoryPerStage)
              over.push_back(static_cast<int64_t>(s));
        }
        all.push_back(std::move(cand));
      }
    }
  }
  std::stable_sort(all.begin(), all.end(),
                   [](const AutoCandidate &a, const AutoCandidate &b) {
                     if (a.rejected.empty() != b.rejected.empty())
                       return a.rejected.empty();
                     return a.rejected.empty() && a.stepSeconds < b.stepSeconds;
                   });
  if (all.empty() || !all.front().rejected.empty()) {
    int64_t least = std::numeric_limits<int64_t>::max();
    for (const AutoCandidate &c : all)
      if (!c.stagePeakBytes.empty())
        least = std::min(least, *std::max_element(c.stagePeakBytes.begin(),
                                                  c.stagePeakBytes.end()));
    errorLine() << o.modelPath << ": --auto: no configuration of " << o.stages
                << " stages fits --memory-per-stage "
                << (o.memoryPerStage >> 20) << " MiB";
    if (least != std::numeric_limits<int64_t>::max())
      llvm::errs() << " (the smallest plan's fullest stage needs "
                   << (least >> 20) << " MiB with " << (runtimeBytes >> 20)
                   << " MiB of runtime memory; raise the budget or add "
                      "stages)";
    llvm::errs() << "\n";
    return failure();
  }
  return all;
}

void explainChoice(const std::vector<AutoCandidate> &candidates,
                   const CompileOptions &o, const CostTable &costs) {
  llvm::raw_ostream &os = llvm::outs();
  std::string links = "transfers free";
  if (std::optional<std::pair<double, double>> m = costs.linkModel()) {
    llvm::raw_string_ostream ls(links);
    links.clear();
    ls << "transfers " << llvm::format("%.2f", 1e6 * m->first) << " us + "
       << llvm::format("%.2f", m->second / 1e9) << " GB/s, measured";
  }
  os << "--auto: " << candidates.size() << " configurations of " << o.stages
     << " stages planned ("
     << (o.costs.empty() ? "analytic costs" : "costs " + o.costs) << "; "
     << links << "; memory = arena + " << (runtimeBytesOf(costs) >> 20)
     << " MiB of runtime), fastest predicted first:\n"
     << "  M  schedule     V  remat    step ms  per-stage compute ms / peak "
        "MiB\n";
  for (const AutoCandidate &c : candidates) {
    std::string remat = c.remat;
    for (auto [k, s] : llvm::enumerate(c.rematStages))
      remat += (k ? "," : ":") + std::to_string(s);
    os << llvm::format("  %-2lld %-12s %lld  %-7s ", (long long)c.microbatches,
                       c.schedule.c_str(), (long long)c.virtualStages,
                       remat.c_str());
    if (c.stageSeconds.empty()) {
      os << "    -    rejected: " << c.rejected << "\n";
      continue;
    }
    os << llvm::format("%8.3f ", 1e3 * c.stepSeconds);
    for (auto [s, t] : llvm::enumerate(c.stageSeconds))
      os << (s ? ", " : " ") << llvm::format("%.2f", 1e3 * t) << " / "
         << (c.stagePeakBytes[s] >> 20);
    if (!c.rejected.empty())
      os << "  rejected: " << c.rejected;
    os << "\n";
  }
}

LogicalResult planSegmentRemat(ModuleOp imported, CompileOptions &o,
                               const CostTable &costs) {
  // Checked as the rest of a compile under --memory-per-stage is: each
  // stage's planned arena (--auto adds the runtime's memory). The partition
  // is the one segments get: its estimate is remat's.
  CompileOptions c = o;
  AutoCandidate cand;
  std::string why;
  if (failed(fitSegments(imported, c, costs, o.memoryPerStage,
                         /*withRuntime=*/false, cand, why))) {
    // A pass's own error (the partition's) as without --remat auto.
    if (!cand.rejected.empty())
      errorLine() << o.modelPath << ": " << cand.rejected << "\n";
    else
      errorLine() << o.modelPath << ": --remat auto: " << why
                  << ", over --memory-per-stage " << o.memoryPerStage
                  << " (raise the budget or add stages)\n";
    return failure();
  }
  o.remat = "segments";
  o.rematStages.clear();
  o.rematStashBytes = c.rematStashBytes;
  return success();
}

} // namespace gpipe::driver
