// Checks that pipeline.json (read with gpipe/manifest.h) describes the
// running stage program.
#include "gpipe/manifest.h"
#include "internal.h"

namespace gpipe {
namespace {

/// gp_transfer::phase as pipeline.json writes it.
std::string phaseName(int32_t phase) {
  return phase == 0 ? "forward" : phase == 1 ? "backward" : "update";
}

std::string actionName(const gp_action &a) {
  if (a.kind == GP_UPDATE)
    return "U";
  if (a.kind == GP_FLUSH)
    return "S";
  return (a.kind == GP_FORWARD  ? "F"
          : a.kind == GP_WEIGHT ? "W"
                                : "B") +
         std::to_string(a.microbatch) +
         (a.chunk != 0 ? "c" + std::to_string(a.chunk) : std::string());
}

} // namespace

bool checkPipelineFile(const gp_program &p, const std::string &path,
                       std::string &err) {
  manifest::Manifest m;
  if (!manifest::readManifest(path, m, err))
    return false;
  auto mismatch = [&](const std::string &what) {
    err = path + " does not describe this executable: " + what +
          " (run the stage executables with the pipeline.json compiled with "
          "them)";
    return false;
  };
  if (m.version != 2)
    return mismatch("not a version 2 gpipe pipeline description");
  if (p.build_id && m.buildId != p.build_id)
    return mismatch("build id " + (m.buildId.empty() ? "(none)" : m.buildId) +
                    ", this executable's is " + p.build_id);
  if (static_cast<int64_t>(m.stages.size()) != p.num_stages)
    return mismatch("it lists " + std::to_string(m.stages.size()) +
                    " stages, this executable is one of " +
                    std::to_string(p.num_stages));
  // --data-parallel D: the file's batch is the global one, D times the
  // replica's the executable runs.
  const int64_t replicas = p.data_parallel > 1 ? p.data_parallel : 1;
  if (m.dataParallel != replicas)
    return mismatch("--data-parallel " + std::to_string(m.dataParallel) +
                    ", this executable is one of " + std::to_string(replicas) +
                    " replicas");
  if (m.shardOptimizer != (p.shard_optimizer > 1))
    return mismatch(
        std::string("--shard-optimizer ") + (m.shardOptimizer ? "on" : "off") +
        ", this executable's is " + (p.shard_optimizer > 1 ? "on" : "off"));
  if (m.microbatches != p.microbatches ||
      m.batchSize != p.batch_size * replicas)
    return mismatch("batch " + std::to_string(m.batchSize) + " in " +
                    std::to_string(m.microbatches) +
                    " micro-batches, this executable runs batch " +
                    std::to_string(p.batch_size * replicas) + " in " +
                    std::to_string(p.microbatches));
  const manifest::Stage &me = m.stages[static_cast<size_t>(p.stage)];
  if (me.rank != p.stage)
    return mismatch("its stage entry " + std::to_string(p.stage) +
                    " has rank " + std::to_string(me.rank));
  // The schedule: the compiled action list, entry by entry.
  if (static_cast<int64_t>(me.schedule.size()) != p.num_actions)
    return mismatch("its schedule does not have this executable's " +
                    std::to_string(p.num_actions) + " actions");
  for (int32_t i = 0; i < p.num_actions; ++i)
    if (me.schedule[static_cast<size_t>(i)] != actionName(p.actions[i]))
      return mismatch("schedule action " + std::to_string(i) + " is " +
                      me.schedule[static_cast<size_t>(i)] +
                      ", this executable runs " + actionName(p.actions[i]));
  // The boundaries: every transfer this program makes, in order (programs
  // without a build id, written by hand, declare none).
  if (!p.build_id)
    return true;
  if (static_cast<int64_t>(me.boundaries.size()) != p.num_transfers)
    return mismatch("its boundaries do not list this executable's " +
                    std::to_string(p.num_transfers) + " transfers");
  for (int32_t i = 0; i < p.num_transfers; ++i) {
    const manifest::Boundary &b = me.boundaries[static_cast<size_t>(i)];
    const gp_transfer &t = p.transfers[i];
    bool same = b.direction == (t.is_send ? "send" : "recv") &&
                b.phase == phaseName(t.phase) && b.peer == t.peer &&
                b.tag == t.tag && b.bytes == t.bytes;
    if (!same)
      return mismatch(
          "boundary " + std::to_string(i) + " (" + b.direction + " " + b.phase +
          " peer " + std::to_string(b.peer) + " tag " + std::to_string(b.tag) +
          ") differs from this executable's " + (t.is_send ? "send" : "recv") +
          " " + phaseName(t.phase) + " peer " + std::to_string(t.peer) +
          " tag " + std::to_string(t.tag));
  }
  return true;
}

} // namespace gpipe
