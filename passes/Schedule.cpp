// gpipe-schedule and gpipe-check-schedule: each stage's action list (from
// the registered schedule generator), and the static check that all stages'
// transfers pair up and cannot deadlock.
#include "passes/Passes.h"
#include "passes/Utils.h"
#include "passes/schedules/Schedules.h"

#include "llvm/ADT/SmallPtrSet.h"

#include <map>
#include <tuple>

namespace gpipe {
#define GEN_PASS_DEF_SCHEDULE
#define GEN_PASS_DEF_CHECKSCHEDULE
#include "passes/Passes.h.inc"
} // namespace gpipe

using namespace mlir;
using namespace gpipe;
using pipeline::ActionAttr;
using pipeline::Phase;
using pipeline::ScheduleOp;

namespace {

/// One send or receive of one action of a stage's schedule.
struct Transfer {
  bool isSend;
  int64_t peer, tag, microbatch;
  Type type;
  Operation *op;
  ActionAttr action;
  bool perStep = false; // once per step (pipe.send/recv `per_step`)
  int64_t virtualPeer = -1; // the peer as the op names it (a virtual stage)
  bool chunked = false;     // the stages hold several chunks
  bool isFlush = false; // a flush action: waits until the stage's sends are
                        // received
};

std::string describe(const Transfer &t) {
  std::string s;
  llvm::raw_string_ostream os(s);
  if (t.isFlush)
    return "action S (a flush: it waits until the messages the stage sent "
           "are received)";
  os << "action " << t.action.getShortName() << " on "
     << (t.isSend ? "pipe.send to" : "pipe.recv from") << " stage " << t.peer;
  if (t.chunked)
    os << " (virtual stage " << t.virtualPeer << ")";
  os << " (tag " << t.tag << ", " << t.type << ")";
  return s;
}

} // namespace

/// Checks every stage's schedule of `module`; emits located errors.
LogicalResult gpipe::checkSchedules(ModuleOp module) {
  const int64_t n = pipeline::getNumStages(module);
  if (n < 1 || n > (int64_t(1) << 16))
    return module.emitError("pipe.stages must be in [1, 65536], got ") << n;
  SmallVector<ScheduleOp> all(module.getOps<ScheduleOp>());
  const int64_t k = static_cast<int64_t>(all.size());
  if (k == 0)
    return module.emitError("stage 0 has no pipe.schedule");
  // Stages 0..k-1, each holding at least one of the n pieces.
  SmallVector<ScheduleOp> schedules(k);
  for (ScheduleOp sched : all) {
    int64_t s = static_cast<int64_t>(sched.getStage());
    if (s < 0 || s >= std::min(k, n))
      return sched.emitError("schedule of stage ")
             << s << " but the module has " << std::min(k, n) << " stages";
    if (schedules[s])
      return sched.emitError("stage ") << s << " has two schedules";
    schedules[s] = sched;
  }
  // Where each virtual stage (the functions' pipe.stage) runs.
  SmallVector<int64_t> stageOf(n, -1);
  bool chunked = false;
  for (int64_t s = 0; s < k; ++s) {
    ScheduleOp sched = schedules[s];
    chunked |= sched.getNumChunks() > 1;
    for (int64_t c = 0; c < sched.getNumChunks(); ++c) {
      FlatSymbolRefAttr ref = sched.getFunction(Phase::Forward, c);
      auto func =
          SymbolTable::lookupNearestSymbolFrom<func::FuncOp>(sched, ref);
      if (!func)
        return sched.emitError("no function ") << ref;
      std::optional<int64_t> v = pipeline::getStage(func);
      if (!v || *v < 0 || *v >= n)
        return sched.emitError("chunk ")
               << c << "'s function " << ref
               << " is not one of the module's " << n
               << " virtual stages (pipe.stages)";
      if (stageOf[*v] >= 0)
        return sched.emitError("virtual stage ")
               << *v << " is placed on stage " << stageOf[*v] << " and on "
               << "stage " << s;
      stageOf[*v] = s;
    }
  }
  for (int64_t v = 0; v < n; ++v)
    if (stageOf[v] < 0)
      return module.emitError(chunked ? "virtual stage " : "stage ")
             << v << " has no pipe.schedule"
             << (chunked ? " (no stage's schedule names its functions)" : "");

  // Expand each schedule into its transfers.
  SmallVector<SmallVector<Transfer>> transfers(k);
  for (int64_t s = 0; s < k; ++s) {
    ScheduleOp sched = schedules[s];
    // Functions run by an earlier action: their per-step transfers are done.
    llvm::SmallPtrSet<Operation *, 3> ran;
    for (ActionAttr a : sched.getActionList()) {
      if (a.getPhase() == Phase::Flush) {
        Transfer t{false, 0, 0, -1, Type(), sched.getOperation(), a};
        t.isFlush = true;
        transfers[s].push_back(t);
        continue;
      }
      // The update runs every chunk's update, the last chunk first; W runs
      // deferred weight-gradient GEMMs, no function: no transfers.
      for (FlatSymbolRefAttr ref : sched.getActionFunctions(a)) {
        auto func =
            SymbolTable::lookupNearestSymbolFrom<func::FuncOp>(sched, ref);
        if (!func)
          return sched.emitError("no function ") << ref;
        const int64_t microbatch = a.getMicrobatch().value_or(-1);
        const bool first = ran.insert(func.getOperation()).second;
        WalkResult walk = func.walk([&](Operation *op) {
          Transfer t{false, 0, 0, microbatch, Type(), op, a};
          bool perStep = false;
          if (auto send = dyn_cast<pipeline::SendOp>(op)) {
            t = {true,
                 static_cast<int64_t>(send.getPeer()),
                 static_cast<int64_t>(send.getTag()),
                 microbatch,
                 send.getValue().getType(),
                 op,
                 a};
            perStep = send.getPerStep();
          } else if (auto recv = dyn_cast<pipeline::RecvOp>(op)) {
            t = {false,
                 static_cast<int64_t>(recv.getPeer()),
                 static_cast<int64_t>(recv.getTag()),
                 microbatch,
                 recv.getValue().getType(),
                 op,
                 a};
            perStep = recv.getPerStep();
          } else {
            return WalkResult::advance();
          }
          // A per-step transfer runs in the function's first action only,
          // for no micro-batch in particular.
          if (perStep) {
            if (!first)
              return WalkResult::advance();
            t.microbatch = -1;
            t.perStep = true;
          }
          if (t.peer >= n) {
            op->emitError("stage ")
                << s << " names stage " << t.peer << " but there are " << n
                << (chunked ? " virtual stages" : " stages");
            return WalkResult::interrupt();
          }
          t.virtualPeer = t.peer;
          t.peer = stageOf[t.peer];
          t.chunked = chunked;
          transfers[s].push_back(t);
          return WalkResult::advance();
        });
        if (walk.wasInterrupted())
          return failure();
      }
    }
  }

  // Matching: per (sender, receiver, tag), the sends and the receives pair
  // up in order, with equal types and micro-batches.
  std::map<std::tuple<int64_t, int64_t, int64_t>, SmallVector<const Transfer *>>
      sends, recvs;
  for (int64_t s = 0; s < k; ++s)
    for (const Transfer &t : transfers[s])
      if (!t.isFlush)
        (t.isSend ? sends
                : recvs)[{t.isSend ? s : t.peer, t.isSend ? t.peer : s, t.tag}]
          .push_back(&t);
  auto check = [&](auto &mine, auto &theirs, bool isSend) -> LogicalResult {
    for (auto &[key, list] : mine) {
      auto [from, to, tag] = key;
      auto it = theirs.find(key);
      size_t matched = it == theirs.end() ? 0 : it->second.size();
      if (list.size() > matched) {
        const Transfer &t = *list[matched];
        int64_t me = isSend ? from : to;
        return schedules[me]
                   .emitError("stage ")
                   .append(me, ", ", describe(t), ": no matching ",
                           isSend ? "pipe.recv" : "pipe.send", " in stage ",
                           t.peer, " (", list.size(), " ",
                           isSend ? "sends" : "receives",
                           " of this tag per "
                           "step, ",
                           matched, " ", isSend ? "receives" : "sends", ")")
                   .attachNote(t.op->getLoc())
               << "this transfer";
      }
      if (!isSend)
        continue;
      for (size_t i = 0; i < list.size(); ++i) {
        const Transfer &snd = *list[i], &rcv = *it->second[i];
        if (snd.type != rcv.type)
          return rcv.op->emitError("stage ")
                 << to << " receives " << rcv.type << " with tag " << tag
                 << " but stage " << from << " sends " << snd.type;
        if (snd.perStep != rcv.perStep)
          return rcv.op->emitError("stage ")
                 << to << " receives tag " << tag
                 << (rcv.perStep ? " once per step" : " per micro-batch")
                 << " but stage " << from << " sends it "
                 << (snd.perStep ? "once per step" : "per micro-batch");
        if (snd.microbatch != rcv.microbatch)
          return schedules[to].emitError("stage ")
                 << to << ", " << describe(rcv) << " gets micro-batch "
                 << snd.microbatch << " (sent in stage " << from << "'s action "
                 << snd.action.getShortName()
                 << "): the stages run micro-batches in "
                    "different orders";
      }
    }
    return success();
  };
  if (failed(check(sends, recvs, true)) || failed(check(recvs, sends, false)))
    return failure();

  // Deadlock. Blocking (rendezvous) sends: a transfer completes only when
  // both sides have reached it. Buffered sends: a send completes at once; a
  // receive completes once its send has been issued; a flush completes once
  // every send the stage issued has been received (with blocking sends it
  // has nothing to wait for).
  const bool buffered = pipeline::getSends(module) == pipeline::Sends::Buffered;
  SmallVector<size_t> pos(k, 0);
  // Buffered: per (sender, receiver, tag), how many sends were issued and
  // how many of them were received.
  std::map<std::tuple<int64_t, int64_t, int64_t>, std::pair<size_t, size_t>>
      issued;
  for (bool progress = true; progress;) {
    progress = false;
    for (int64_t s = 0; s < k; ++s) {
      if (pos[s] >= transfers[s].size())
        continue;
      const Transfer &t = transfers[s][pos[s]];
      if (t.isFlush) {
        bool delivered = true;
        for (auto &[key, count] : issued)
          if (std::get<0>(key) == s && count.second < count.first)
            delivered = false;
        if (delivered) {
          ++pos[s];
          progress = true;
        }
        continue;
      }
      if (buffered) {
        if (t.isSend) {
          ++issued[{s, t.peer, t.tag}].first;
          ++pos[s];
          progress = true;
        } else if (auto &[sent, received] = issued[{t.peer, s, t.tag}];
                   received < sent) {
          ++received;
          ++pos[s];
          progress = true;
        }
        continue;
      }
      if (!t.isSend)
        continue;
      int64_t q = t.peer;
      if (pos[q] < transfers[q].size()) {
        const Transfer &r = transfers[q][pos[q]];
        if (!r.isSend && !r.isFlush && r.peer == s && r.tag == t.tag) {
          ++pos[s];
          ++pos[q];
          progress = true;
        }
      }
    }
  }
  SmallVector<int64_t> blocked;
  for (int64_t s = 0; s < k; ++s)
    if (pos[s] < transfers[s].size())
      blocked.push_back(s);
  if (blocked.empty())
    return success();
  int64_t first = blocked.front();
  InFlightDiagnostic diag = schedules[first].emitError("the schedule deadlocks")
                            << (buffered ? " even with buffered sends" : "")
                            << ": stage " << first << " blocks in "
                            << describe(transfers[first][pos[first]]);
  for (int64_t s : blocked)
    diag.attachNote(transfers[s][pos[s]].op->getLoc())
        << "stage " << s << " blocks in " << describe(transfers[s][pos[s]]);
  return failure();
}

namespace {

struct SchedulePass : gpipe::impl::ScheduleBase<SchedulePass> {
  using ScheduleBase::ScheduleBase;
  void runOnOperation() override {
    ModuleOp module = getOperation();
    const schedules::Schedule *generator = schedules::lookup(schedule);
    if (!generator) {
      module.emitError("unknown schedule '")
          << schedule << "' (registered: " << schedules::names() << ")";
      return signalPassFailure();
    }
    int64_t m = pipeline::getNumMicrobatches(module);
    int64_t n = pipeline::getNumStages(module);
    if (n < 1 || m < 1 || n > (int64_t(1) << 16) || m > (int64_t(1) << 20)) {
      module.emitError("pipe.stages and pipe.microbatches must be in [1, "
                       "2^16] and [1, 2^20], got ")
          << n << " and " << m;
      return signalPassFailure();
    }
    const int64_t v = virtualStages;
    if (v < 1 || n % v != 0) {
      module.emitError("virtual-stages (")
          << v << ") must be >= 1 and divide the module's pipe.stages (" << n
          << ", the pieces gpipe-partition cut)";
      return signalPassFailure();
    }
    const int64_t k = n / v;
    if (std::string why = generator->check(k, m, v); !why.empty()) {
      module.emitError(why);
      return signalPassFailure();
    }
    schedules::Table table = generator->generate(module.getContext(), k, m, v);
    OpBuilder b = OpBuilder::atBlockEnd(module.getBody());
    for (int64_t s = 0; s < k; ++s) {
      SmallVector<Attribute> fns[3];
      const Phase phases[] = {Phase::Forward, Phase::Backward, Phase::Update};
      for (int64_t c = 0; c < v; ++c) {
        int64_t piece = generator->virtualStage(k, v, s, c);
        for (int i = 0; i < 3; ++i) {
          func::FuncOp f = findStageFunc(module, piece, phases[i]);
          if (!f) {
            module.emitError("stage ")
                << piece << " lacks its functions; run gpipe-outline-stages "
                << "first";
            return signalPassFailure();
          }
          fns[i].push_back(FlatSymbolRefAttr::get(f));
        }
      }
      // The stash holds the most micro-batches the schedule keeps in flight
      // in one chunk.
      int64_t slots = std::max<int64_t>(ScheduleOp::maxInFlight(table[s]), 1);
      auto op = ScheduleOp::create(
          b, module.getLoc(), b.getI64IntegerAttr(s), b.getArrayAttr(fns[0]),
          b.getArrayAttr(fns[1]), b.getArrayAttr(fns[2]),
          b.getArrayAttr(
              SmallVector<Attribute>(table[s].begin(), table[s].end())),
          b.getI64IntegerAttr(slots));
      if (failed(op.verify()))
        return signalPassFailure();
    }
    pipeline::setScheduleName(module, schedule);
    pipeline::setSends(module, generator->sends);
    if (failed(checkSchedules(module)))
      signalPassFailure();
  }
};

struct CheckSchedulePass : gpipe::impl::CheckScheduleBase<CheckSchedulePass> {
  void runOnOperation() override {
    if (failed(checkSchedules(getOperation())))
      signalPassFailure();
  }
};

} // namespace
