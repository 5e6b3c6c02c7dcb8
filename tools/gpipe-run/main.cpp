// gpipe-run: trains the pipeline gpipe-compile wrote to OUT: reads its
// pipeline.json, launches the stage executables (Launcher.cpp) and, with
// --save-onnx, writes the trained model (OnnxWriter.cpp).
#include "tools/CommandLine.h"
#include "tools/gpipe-run/Launcher.h"
#include "tools/gpipe-run/OnnxWriter.h"

#include "gpipe/checkpoint.h"
#include "gpipe/manifest.h"
#include "npy.h"

#include "llvm/Support/FileSystem.h"

#include <boost/program_options.hpp>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>

namespace po = boost::program_options;
using namespace gpipe;

namespace {

/// The samples of the data files: rows of the first graph input's file.
bool dataSamples(const manifest::Manifest &m, const std::string &data,
                 int64_t &samples, std::string &err) {
  if (m.inputs.empty()) {
    err = "--epochs needs graph inputs, and this pipeline has none";
    return false;
  }
  const manifest::Input &in = m.inputs[0];
  NpyFile f;
  if (!f.open(data + "/" + in.name + ".npy",
              in.dtype == "int64" ? GP_I64 : GP_F32, err))
    return false;
  samples = f.shape().empty() ? 0 : f.shape()[0];
  return true;
}

/// --resume: the newest checkpoint, checked against this pipeline.
bool findResumePoint(const manifest::Manifest &m, run::LaunchOptions &o,
                     bool quiet, std::string &err) {
  std::string path;
  if (!checkpoint::findLatest(o.checkpointDir, path, err)) {
    err = "--resume: " + err;
    return false;
  }
  if (path.empty()) {
    err = "--resume: no complete checkpoint in " + o.checkpointDir +
          " (a checkpoint is a step-<S> directory with a manifest.json)";
    return false;
  }
  checkpoint::Manifest c;
  if (!checkpoint::read(path, c, err))
    return false;
  if (c.optimizer != m.optimizer.kind && c.optimizer != "unknown") {
    err = "--resume: " + path + " was trained with optimizer " + c.optimizer +
          ", this pipeline was compiled with " + m.optimizer.kind;
    return false;
  }
  if (c.data.batchSize != m.batchSize) {
    err = "--resume: " + path + " was trained with mini-batches of " +
          std::to_string(c.data.batchSize) + " samples, this pipeline takes " +
          std::to_string(m.batchSize);
    return false;
  }
  if (c.data.shuffle != o.shuffle ||
      (o.shuffle && c.data.seed != static_cast<uint64_t>(o.seed))) {
    err =
        "--resume: " + path + " was trained reading the data " +
        (c.data.shuffle ? "with --shuffle --seed " + std::to_string(c.data.seed)
                        : std::string("in file order (no --shuffle)")) +
        "; resume with the same, or the run would not continue the "
        "interrupted one";
    return false;
  }
  o.resumeFrom = path;
  if (!quiet) {
    std::cerr << "gpipe-run: resuming from " << path << " (step " << c.step
              << ", saved by " << c.stages << " stage(s))";
    if (c.step >= o.steps)
      std::cerr << "; --steps " << o.steps << " is reached: nothing to train";
    std::cerr << "\n";
  }
  return true;
}

} // namespace

int main(int argc, char **argv) {
  run::LaunchOptions o;
  std::string saveOnnxPath;
  int64_t epochs = 0;
  bool resume = false;
  po::options_description opts("Options");
  opts.add_options()("help,h", "print this help and exit")(
      "data", po::value(&o.data)->value_name("DIR"),
      "one <input>.npy per graph input (first axis = sample; float32 or "
      "int64 as the model declares; every file the same number of samples)")(
      "steps", po::value(&o.steps)->default_value(1)->value_name("N"),
      "the step training ends at, counted from its start (also after "
      "--resume); step s (1-based) takes positions [((s-1) mod nb)*B, +B) of "
      "epoch (s-1) div nb's sample order (file order, or --shuffle's), nb = "
      "samples / B")(
      "log-json", po::value(&o.logJson)->value_name("FILE"),
      "write one JSON object per step: {\"step\":s,\"loss\":l,\"ms\":t} "
      "(and {\"step\":s,\"eval_loss\":l,\"ms\":t} per evaluation); "
      "appended to after --resume")(
      "save-onnx", po::value(&saveOnnxPath)->value_name("FILE"),
      "write the input model with every trained parameter (float32 "
      "initializer) replaced by its trained value, same names")(
      "weights-out", po::value(&o.weightsOut)->value_name("DIR"),
      "where the trained weights go (default OUT/trained)")(
      "threads", po::value(&o.threads)->default_value(1)->value_name("T"),
      "CPU threads per stage process (oneDNN GEMMs and OpenMP loops)")(
      "comm-timeout",
      po::value(&o.commTimeout)->default_value(300.0, "300")->value_name("S"),
      "CUDA target: end the run, naming the stage and the transfer, when a "
      "step's transfers make no progress for S seconds (a dead or stuck "
      "peer)")(
      "timeout",
      po::value(&o.timeout)->default_value(300.0, "300")->value_name("S"),
      "end the run, naming the stage, when a stage sends no heartbeat for S "
      "seconds (stopped, frozen) or no stage makes progress for S seconds "
      "(a deadlock, a hung stage, a lost peer); 0: no watchdog")(
      "on-nan", po::value(&o.onNan)->default_value("stop")->value_name("WHAT"),
      "a NaN or infinite loss: 'stop' ends the run at that step, naming it, "
      "without writing the trained weights; 'skip' skips that step's "
      "optimizer update on every stage and goes on (CPU target); 'continue' "
      "only prints it")(
      "hostfile", po::value(&o.hostfile)->value_name("FILE"),
      "run the stages under mpirun on the hosts of this Open MPI hostfile "
      "(OUT and the data at the same paths on every host)")(
      "mpirun-arg", po::value(&o.mpirunArgs)->composing()->value_name("ARG"),
      "pass ARG to mpirun (repeatable), e.g. --mpirun-arg=--mca "
      "--mpirun-arg=btl_tcp_if_include --mpirun-arg=eth0")(
      "epochs", po::value(&epochs)->value_name("E"),
      "train E epochs: --steps E * (samples / B) (not with --steps)")(
      "shuffle", po::bool_switch(&o.shuffle),
      "read each epoch's samples in a permutation drawn from (--seed, "
      "epoch) instead of file order")(
      "seed", po::value(&o.seed)->default_value(0)->value_name("N"),
      "the --shuffle seed")(
      "checkpoint-dir", po::value(&o.checkpointDir)->value_name("DIR"),
      "save checkpoints (parameters, optimizer state, step) under DIR: "
      "after the last step, and every --checkpoint-every steps")(
      "checkpoint-every", po::value(&o.checkpointEvery)->value_name("N"),
      "also save after every N-th step")(
      "keep", po::value(&o.keep)->default_value(0)->value_name("K"),
      "keep only the newest K checkpoints (0: all)")(
      "resume", po::bool_switch(&resume),
      "continue from the newest complete checkpoint in --checkpoint-dir; "
      "--steps still counts from the start of training")(
      "eval-data", po::value(&o.evalData)->value_name("DIR"),
      "after the last step (and every --eval-every steps) print and log the "
      "forward-only loss over DIR's mini-batches (<input>.npy files like "
      "--data's; dropout off, BatchNorm's running statistics: torch's eval "
      "mode); the weights are not touched")(
      "eval-every", po::value(&o.evalEvery)->value_name("N"),
      "also evaluate after every N-th step")(
      "log-every", po::value(&o.logEvery)->default_value(1)->value_name("N"),
      "when stdout is not a terminal, print the loss line of every N-th "
      "step (and of the last); on a terminal one progress line is updated "
      "in place")(
      "profile", po::value(&o.profile)->value_name("FILE"),
      "(a gpipe-compile --profile build) write every stage's measured time "
      "per unit of generated code, summed over the steps after the first, "
      "to FILE: the cost table of gpipe-compile --costs")(
      "trace", po::value(&o.trace)->value_name("FILE"),
      "write a Chrome trace (open it in ui.perfetto.dev) of every stage's "
      "actions and transfer waits")(
      "quiet,q", po::bool_switch(&o.quiet),
      "no per-step loss lines, no progress line, no stage report");
  po::variables_map vm;
  if (!gpipe::parseCommandLine(argc, argv, "gpipe-run", opts, "out", o.out, vm))
    return 2;
  if (vm.count("help")) {
    std::cout << "usage: gpipe-run OUT --data DIR --steps N [options]\n\n"
                 "Trains the pipeline that gpipe-compile wrote to OUT: a "
                 "1-stage pipeline runs\nits executable directly, a K-stage "
                 "one runs under mpirun (K ranks; the\nmpirun in PATH, or "
                 "$GPIPE_MPIRUN).\n\n"
              << opts;
    return 0;
  }
  if (o.out.empty())
    return std::cerr << "gpipe-run: error: no pipeline directory given\n", 2;
  if (o.steps < 0)
    return std::cerr << "gpipe-run: error: --steps must be >= 0\n", 2;
  auto usage = [](const std::string &msg) {
    std::cerr << "gpipe-run: error: " << msg << "\n";
    return 2;
  };
  if (vm.count("epochs") && !vm["steps"].defaulted())
    return usage("--epochs and --steps both say how long to train: give one");
  if (vm.count("epochs") && epochs < 1)
    return usage("--epochs must be >= 1");
  if (vm.count("epochs") && o.data.empty())
    return usage("--epochs needs --data");
  if (o.seed < 0)
    return usage("--seed must be >= 0");
  if (vm.count("checkpoint-every") && o.checkpointEvery < 1)
    return usage("--checkpoint-every must be >= 1");
  if (o.keep < 0)
    return usage("--keep must be >= 0");
  if (vm.count("eval-every") && o.evalEvery < 1)
    return usage("--eval-every must be >= 1");
  if (vm.count("eval-every") && o.evalData.empty())
    return usage("--eval-every needs --eval-data");
  if (!o.evalData.empty() && !llvm::sys::fs::is_directory(o.evalData))
    return usage("--eval-data " + o.evalData + ": no such directory");
  if ((vm.count("checkpoint-every") || !vm["keep"].defaulted() || resume) &&
      o.checkpointDir.empty())
    return usage(std::string(resume ? "--resume"
                             : vm.count("checkpoint-every")
                                 ? "--checkpoint-every"
                                 : "--keep") +
                 " needs --checkpoint-dir");
  if (o.logEvery < 1)
    return std::cerr << "gpipe-run: error: --log-every must be >= 1\n", 2;
  if (o.threads < 1 || o.threads > 4096)
    return std::cerr << "gpipe-run: error: --threads must be in [1, 4096]\n", 2;
  if (!(o.commTimeout > 0.0) || o.commTimeout > 1e6)
    return std::cerr << "gpipe-run: error: --comm-timeout must be in (0, 1e6] "
                        "seconds\n",
           2;
  if (!(o.timeout == 0.0 || (o.timeout >= 2.0 && o.timeout <= 1e6)))
    return std::cerr << "gpipe-run: error: --timeout must be 0 (off) or in "
                        "[2, 1e6] seconds\n",
           2;
  if (o.onNan != "stop" && o.onNan != "skip" && o.onNan != "continue")
    return std::cerr << "gpipe-run: error: --on-nan must be 'stop', 'skip' "
                        "or 'continue', got '"
                     << o.onNan << "'\n",
           2;
  if (!o.hostfile.empty() && !llvm::sys::fs::is_regular_file(o.hostfile))
    return std::cerr << "gpipe-run: error: --hostfile " << o.hostfile
                     << ": no such file\n",
           2;

  // Checked before training: a trace file that cannot be written would
  // otherwise only fail at the end.
  for (auto [what, file] : {std::pair{"trace", &o.trace},
                             std::pair{"profile", &o.profile}}) {
    if (file->empty())
      continue;
    std::FILE *f = std::fopen(file->c_str(), "w");
    if (!f)
      return run::fail(std::string("cannot write ") + what + " file " +
                       *file + ": " + std::strerror(errno));
    std::fclose(f);
  }

  std::string path = o.out + "/pipeline.json", err;
  manifest::Manifest m;
  if (!manifest::readManifest(path, m, err)) {
    if (!llvm::sys::fs::is_regular_file(path))
      err += "; is " + o.out + " a gpipe-compile output directory?";
    return run::fail(err);
  }
  if (!o.profile.empty() && !m.profile)
    return run::fail("--profile " + o.profile + ": " + o.out +
                     " has no timers (compile it with gpipe-compile "
                     "--profile)");
  if (o.weightsOut.empty())
    o.weightsOut = o.out + "/trained";
  if (o.onNan == "skip" && m.target == "cuda")
    return std::cerr << "gpipe-run: error: --on-nan skip needs the CPU "
                        "target: a CUDA stage knows the step's loss only "
                        "after its update is queued\n",
           2;
  if (vm.count("epochs")) {
    int64_t samples = 0;
    if (!dataSamples(m, o.data, samples, err))
      return run::fail(err);
    o.steps = epochs * (samples / std::max<int64_t>(m.batchSize, 1));
  }
  if (resume && !findResumePoint(m, o, o.quiet, err))
    return run::fail(err);
  if (int rc = run::launchStages(m, o))
    return rc;
  if (!saveOnnxPath.empty() &&
      !run::writeTrainedOnnx(o.out, m, o.weightsOut, saveOnnxPath, err))
    return run::fail(err);
  return 0;
}
