// Internal state and helpers shared by the runtime's sources (gp_main, the
// data and transport entry points, the kernels' error path). Not installed;
// keeps <mpi.h> out of every header: only transport.cpp includes it.
#ifndef GPIPE_RUNTIME_INTERNAL_H
#define GPIPE_RUNTIME_INTERNAL_H

#include "gpipe/runtime.h"
#include "npy.h"

#include <cstdint>
#include <string>
#include <vector>

namespace gpipe {

/// One graph input of this stage: its mapped data file and row geometry.
struct InputData {
  std::string path;
  NpyFile file;
  int64_t rowBytes = 0; // bytes per sample (row of the first axis)
};

/// What gp_main owns for the duration of a run; ctx->runtime points here.
struct Runtime {
  const gp_program *program = nullptr;
  int32_t stage = 0;
  int64_t batchSize = 0;         // B
  int64_t microRows = 0;         // B / M
  int64_t miniFirst = 0;         // first data row of the current mini-batch
  std::vector<InputData> inputs; // parallel to program->inputs
};

/// Prints "gpipe: error: stage S: MSG" (or "gpipe: error: MSG" when stage < 0)
/// on stderr and flushes it.
void printError(int32_t stage, const std::string &msg);

/// Ends the process after an error: prints MSG as above, writes
/// "exit CODE" to the status file, then MPI_Abort (other stages are running)
/// or exit(CODE). `ctx` may be null or carry no runtime (unit tests).
[[noreturn]] void fatal(const gp_step_ctx *ctx, int code,
                        const std::string &msg);

/// Maps and checks this stage's data files (data.cpp): one <name>.npy per
/// program input under DIR, row shape and dtype as declared, at least B rows,
/// equal row counts. Sets the number of whole mini-batches; on failure sets
/// `err` (a message naming the file, without the "gpipe: error:" prefix).
bool openInputs(Runtime &rt, const std::string &dataDir, int64_t &numBatches,
                std::string &err);

/// Checks that the pipeline.json at PATH describes `p` (describe.cpp):
/// format, build id, stages, batch and micro-batches, and this stage's entry
/// (index, rank, schedule, boundaries). On failure sets `err`.
bool checkPipelineFile(const gp_program &p, const std::string &path,
                       std::string &err);

//===----------------------------------------------------------------------===//
// Status file (status.cpp): "exit <code>" at the end, "signal <n>" on a crash.
//===----------------------------------------------------------------------===//

/// Remembers PATH in a static buffer; false if it is too long.
bool statusSetPath(const std::string &path);
/// Installs the crash handlers (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT) that
/// write "signal <n>" and re-raise; no-op without a status path. Called after
/// MPI_Init, so they replace Open MPI's own.
void statusInstallHandlers();
/// Writes "exit <code>\n" (no-op without a status file). Async-signal-safe.
void statusWriteExit(int code);
/// Restores the signal handlers statusInstallHandlers replaced and forgets
/// the path.
void statusReset();

//===----------------------------------------------------------------------===//
// Transport (transport.cpp): MPI between the stages.
//===----------------------------------------------------------------------===//

/// MPI_Init (thread level FUNNELED), errors returned rather than fatal on
/// MPI_COMM_WORLD. Sets `rank` and `size`. On failure sets `err`.
bool transportInit(int *argc, char ***argv, int &rank, int &size,
                   std::string &err);
/// Whether MPI is initialised and not yet finalised.
bool transportActive();
/// Gathers `n` int64 values from every rank (rank-major into `all`).
bool transportAllGather(const int64_t *mine, int n, std::vector<int64_t> &all,
                        std::string &err);
/// Blocks forever in a barrier that the failing rank never joins (it aborts).
void transportWaitForAbort();
/// MPI_Finalize.
void transportFinalize();
/// MPI_Abort(MPI_COMM_WORLD, code) when other ranks exist, else MPI_Finalize
/// and exit(code).
[[noreturn]] void transportAbort(int code);

} // namespace gpipe

#endif // GPIPE_RUNTIME_INTERNAL_H
