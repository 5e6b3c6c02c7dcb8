// gpipe-run: trains the pipeline gpipe-compile wrote to OUT: reads its
// pipeline.json, launches the stage executables (Launcher.cpp) and, with
// --save-onnx, writes the trained model (OnnxWriter.cpp).
#include "tools/CommandLine.h"
#include "tools/gpipe-run/Launcher.h"
#include "tools/gpipe-run/OnnxWriter.h"

#include "gpipe/manifest.h"

#include "llvm/Support/FileSystem.h"

#include <boost/program_options.hpp>

#include <iostream>

namespace po = boost::program_options;
using namespace gpipe;

int main(int argc, char **argv) {
  run::LaunchOptions o;
  std::string saveOnnxPath;
  po::options_description opts("Options");
  opts.add_options()("help,h", "print this help and exit")(
      "data", po::value(&o.data)->value_name("DIR"),
      "one <input>.npy per graph input (first axis = sample; float32 or "
      "int64 as the model declares; every file the same number of samples)")(
      "steps", po::value(&o.steps)->default_value(1)->value_name("N"),
      "optimizer steps; step s (1-based) takes samples [((s-1) mod nb)*B, +B), "
      "nb = samples / B (a last partial batch is dropped)")(
      "log-json", po::value(&o.logJson)->value_name("FILE"),
      "write one JSON object per step: {\"step\":s,\"loss\":l,\"ms\":t}")(
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
      "without writing the trained weights; 'continue' only prints it "
      "('skip' is not supported yet)")(
      "hostfile", po::value(&o.hostfile)->value_name("FILE"),
      "run the stages under mpirun on the hosts of this Open MPI hostfile "
      "(OUT and the data at the same paths on every host)")(
      "mpirun-arg", po::value(&o.mpirunArgs)->composing()->value_name("ARG"),
      "pass ARG to mpirun (repeatable), e.g. --mpirun-arg=--mca "
      "--mpirun-arg=btl_tcp_if_include --mpirun-arg=eth0")(
      "quiet,q", po::bool_switch(&o.quiet), "no per-step loss lines");
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
  if (o.onNan == "skip")
    return std::cerr << "gpipe-run: error: --on-nan skip (skipping the "
                        "update of a step with a NaN loss) is not supported "
                        "yet; use 'stop' or 'continue'\n",
           2;
  if (o.onNan != "stop" && o.onNan != "continue")
    return std::cerr << "gpipe-run: error: --on-nan must be 'stop' or "
                        "'continue', got '"
                     << o.onNan << "'\n",
           2;
  if (!o.hostfile.empty() && !llvm::sys::fs::is_regular_file(o.hostfile))
    return std::cerr << "gpipe-run: error: --hostfile " << o.hostfile
                     << ": no such file\n",
           2;

  std::string path = o.out + "/pipeline.json", err;
  manifest::Manifest m;
  if (!manifest::readManifest(path, m, err)) {
    if (!llvm::sys::fs::is_regular_file(path))
      err += "; is " + o.out + " a gpipe-compile output directory?";
    return run::fail(err);
  }
  if (o.weightsOut.empty())
    o.weightsOut = o.out + "/trained";
  if (int rc = run::launchStages(m, o))
    return rc;
  if (!saveOnnxPath.empty() &&
      !run::writeTrainedOnnx(o.out, m, o.weightsOut, saveOnnxPath, err))
    return run::fail(err);
  return 0;
}
