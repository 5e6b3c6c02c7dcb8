// gpipe-compile: compiles an ONNX training graph into stage executables.
#include "compiler/driver/Driver.h"
#include "tools/CommandLine.h"

#include <boost/program_options.hpp>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <sstream>

namespace po = boost::program_options;

static const char *kUsage =
    "usage: gpipe-compile MODEL.onnx -o OUT [options]\n\n"
    "Compiles an ONNX training graph (a model exported with its loss) into "
    "one\n"
    "native executable per pipeline stage, their initial weights and\n"
    "OUT/pipeline.json. Train with: gpipe-run OUT --data DIR --steps N\n";

int main(int argc, char **argv) {
  gpipe::CompileOptions o;
  std::string betas = "0.9,0.999";
  std::string partition;
  std::string rematStages, rematStashBytes;
  std::string memoryPerStage;
  int64_t batch = 0;
  po::options_description general("Options");
  general.add_options()("help,h", "print this help and exit")(
      "output,o", po::value(&o.outDir)->value_name("OUT"),
      "output directory (created). Only a successful compile changes it: "
      "the compiler's files from an earlier compile are replaced or "
      "removed, other files (trained/, logs) are kept")(
      "batch-size,b", po::value(&batch)->value_name("B"),
      "mini-batch size B: fixes a symbolic batch dimension of the graph "
      "inputs (default: the model's static batch)")(
      "stages,k", po::value(&o.stages)->default_value(1)->value_name("K"),
      "pipeline stages K: the graph is cut into K cost-balanced stages, one "
      "executable each")(
      "microbatches,m",
      po::value(&o.microbatches)->default_value(1)->value_name("M"),
      "micro-batches M per mini-batch (must divide the batch size)")(
      "target", po::value(&o.target)->default_value("cpu")->value_name("T"),
      "cpu (C++ with oneDNN and OpenMP) or cuda (CUDA with cuBLASLt, NCCL "
      "between stages)")(
      "cuda-arch",
      po::value(&o.cudaArch)->default_value("80,90")->value_name("LIST"),
      "CUDA target: SM versions to build for, comma-separated (80 = A100, "
      "90 = H100/H200); SASS for each plus PTX of the last")(
      "precision",
      po::value(&o.precision)->default_value("fp32")->value_name("P"),
      "CUDA target: fp32, or bf16 (bf16 GEMM operands with fp32 "
      "accumulation; fp32 master weights, gradients and optimizer state)")(
      "allow-tf32", po::bool_switch(&o.allowTf32),
      "CUDA target, fp32: let GEMMs round their inputs to TF32 (off by "
      "default: fp32 results match the CPU target)")(
      "nvcc", po::value(&o.nvcc)->value_name("PATH"),
      "CUDA compiler for the CUDA target (default: $NVCC, else the one the "
      "CUDA runtime was built with)")(
      "freeze", po::value(&o.freeze)->value_name("REGEX"),
      "parameters whose whole name matches REGEX (POSIX extended) are not "
      "trained: no gradient, no optimizer state, written back unchanged "
      "(torch's requires_grad = False), e.g. 'embed\\..*|ln_f\\..*'")(
      "loss", po::value(&o.lossName)->value_name("NAME"),
      "graph output to train (default: the only float32 scalar output)")(
      "seed", po::value(&o.seed)->value_name("N"),
      "seed of Dropout's random masks (default 0): counter-based, keyed by "
      "(seed, node, step, sample), so results do not depend on --stages, "
      "--microbatches or --remat")(
      "emit", po::value(&o.emit)->default_value("exe")->value_name("WHAT"),
      "exe: build the stage executables; cpp: stop after writing the C++ "
      "sources, weights and pipeline.json; mlir: write only the stage "
      "functions and schedules as MLIR (OUT/pipeline.mlir); import: write "
      "only the imported forward graph (OUT/pipeline.import.mlir). With mlir "
      "and import, "
      "-o - prints to stdout")(
      "remat", po::value(&o.remat)->default_value("auto")->value_name("R"),
      "rematerialization: stage (each stage keeps only its boundary inputs "
      "per in-flight micro-batch and recomputes its forward in the "
      "backward), none, segments (per stage, part of its stash: "
      "--remat-stash-bytes), or auto (with --memory-per-stage: segments "
      "planned to fit; else stage when K > 1 or M > 1, else none)")(
      "remat-stash-bytes", po::value(&rematStashBytes)->value_name("LIST"),
      "with --remat segments: per stage (comma-separated), the stash bytes "
      "per micro-batch it may keep, -1 for all of it; the rest is "
      "recomputed in its backward")(
      "remat-stages", po::value(&rematStages)->value_name("LIST"),
      "with --remat stage: only these stages (pieces with --virtual-stages, "
      "0-based, comma-separated) rematerialize; the others keep every value "
      "their backward needs")(
      "schedule",
      po::value(&o.schedule)->default_value("gpipe")->value_name("S"),
      "pipeline schedule: gpipe (all forwards, then all backwards in reverse, "
      "then the update; every stage stashes M micro-batches), 1f1b "
      "(PipeDream-flush: K-1-s warm-up forwards on stage s, then one forward "
      "and one backward in turn; stage s stashes at most K-s micro-batches) "
      "zbh1 (ZB-H1: 1F1B's memory, each backward split into B and W, the "
      "weight-gradient GEMMs, which run where the stage would wait), "
      "zbh2 (ZB-H2: as zbh1 with twice 1F1B's warm-up, stage s stashes at "
      "most 2(K-s)-1 micro-batches, for a smaller bubble), "
      "interleaved (interleaved 1F1B: --virtual-stages V >= 2 chunks per "
      "stage, stage s holds pieces s, s+K, ...; M a multiple of K), zbv "
      "(ZB-V: --virtual-stages 2, stage s holds pieces s and 2K-1-s, B and W "
      "split as zbh1) or bfpp (breadth-first: interleaved's placement, "
      "GPipe's order chunk by chunk)")(
      "virtual-stages",
      po::value(&o.virtualStages)->default_value(1)->value_name("V"),
      "model chunks per stage: the graph is cut into K*V cost-balanced "
      "pieces and each stage runs V of them (--schedule interleaved or "
      "bfpp; 2 for zbv; 1 for the other schedules)")(
      "data-parallel",
      po::value(&o.dataParallel)->default_value(1)->value_name("D"),
      "D replicas of the K-stage pipeline (D*K processes): --batch-size "
      "stays the global mini-batch, each replica trains on B/D of its rows "
      "in M micro-batches, and each stage's gradients are averaged across "
      "its D replicas before the update")(
      "shard-optimizer", po::bool_switch(&o.shardOptimizer),
      "with --data-parallel D (ZeRO-1): each stage's optimizer state split "
      "across its D replicas (a 1/D share each): the gradients are "
      "reduce-scattered, each replica updates its share of the parameters, "
      "and the parameters are all-gathered (CPU target, fp32)")(
      "partition", po::value(&partition)->value_name("NODES"),
      "split points by hand, comma-separated: the ONNX node (e.g. "
      "/fc2/Gemm) or module path (e.g. fc2, blocks.3: its first node) each "
      "stage after the first starts with, K-1 of them (K*V-1 with "
      "--virtual-stages), in graph order; default: the cost-balanced "
      "partition")(
      "memory-per-stage", po::value(&memoryPerStage)->value_name("SIZE"),
      "memory budget of each stage (bytes, or with a suffix: 512MiB, 24GiB, "
      "1.5GB): the partition keeps only cuts whose every stage's estimated "
      "memory (parameters, gradients, optimizer state, the stash times the "
      "schedule's in-flight micro-batches) fits, and each stage's planned "
      "arena is checked against it")(
      "batchnorm",
      po::value(&o.batchnorm)->default_value("microbatch")->value_name("B"),
      "BatchNormalization's running statistics: microbatch (each "
      "micro-batch normalizes with its own statistics and updates the running "
      "mean and variance, as torch called once per micro-batch) or deferred "
      "(normalization as before; the running statistics updated once per "
      "step from the whole mini-batch's, as torchgpipe's DeferredBatchNorm)")(
      "profile", po::bool_switch(&o.profile),
      "CPU target: time every unit of generated code; the stage programs "
      "then take --profile FILE (gpipe-run --profile FILE) and write the "
      "measured times there, the cost table of --costs")(
      "costs", po::value(&o.costs)->value_name("FILE"),
      "a cost table (gpipe-run --profile FILE of a --profile build, "
      "gpipe-profile): the partition balances the measured times of the "
      "ops instead of the analytic FLOP and byte model, and pipeline.json "
      "and --explain predict each stage's step time from them")(
      "auto", po::bool_switch(&o.autoConfig),
      "choose --microbatches (powers of 2 dividing the batch, up to 32), "
      "--schedule (every registered one that accepts them; 2 chunks per "
      "stage where it needs several) and --remat (none or stage) for the "
      "given --stages: every candidate is planned, its step predicted by "
      "simulating its schedule with each stage's predicted action times "
      "(--costs, else the analytic model), and the fastest whose every "
      "stage's arena plus the runtime's memory fits --memory-per-stage is "
      "compiled; --explain lists them all")(
      "explain", po::bool_switch(&o.explain),
      "print each stage's ops, parameters, FLOPs and memory plan")(
      "cxx", po::value(&o.cxx)->value_name("PATH"),
      "host C++ compiler for the CPU target (default: $CXX, else the one "
      "gpipe-compile was built with)")(
      "march",
      po::value(&o.cpuArch)->default_value("native")->value_name("ARCH"),
      "-march= of the CPU stage programs (e.g. x86-64-v3 for other machines)")(
      "compiler-launcher", po::value(&o.compilerLauncher)->value_name("PATH"),
      "program that runs each stage's compile, such as ccache (default: "
      "$GPIPE_COMPILER_LAUNCHER, else none): the stage is compiled with -c in "
      "its directory through it, then linked")(
      "verbose,v", po::bool_switch(&o.verbose), "print the build commands");
  po::options_description optim("Optimizer (torch.optim semantics)");
  optim.add_options()("optimizer",
                      po::value(&o.optimizer.kind)->default_value("sgd"),
                      "sgd, adam or adamw")(
      "lr", po::value(&o.optimizer.lr)->default_value(0.01, "0.01"),
      "learning rate")(
      "momentum", po::value(&o.optimizer.momentum)->default_value(0.0, "0"),
      "SGD momentum (dampening 0)")(
      "nesterov", po::bool_switch(&o.optimizer.nesterov),
      "SGD Nesterov momentum (needs --momentum > 0)")(
      "weight-decay",
      po::value(&o.optimizer.weightDecay)->default_value(0.0, "0"),
      "weight decay: added to the gradient (sgd, adam) or decoupled "
      "(adamw). Note torch's AdamW defaults to 0.01; here it is 0")(
      "betas", po::value(&betas)->default_value("0.9,0.999"),
      "Adam/AdamW betas B1,B2")(
      "eps", po::value(&o.optimizer.eps)->default_value(1e-8, "1e-8"),
      "Adam/AdamW epsilon");
  po::options_description visible;
  visible.add(general).add(optim);
  po::variables_map vm;
  if (!gpipe::parseCommandLine(argc, argv, "gpipe-compile", visible, "model",
                               o.modelPath, vm))
    return 2;
  if (vm.count("help")) {
    std::cout << kUsage << "\n" << general << "\n" << optim;
    return 0;
  }
  if (o.modelPath.empty()) {
    std::cerr << "gpipe-compile: error: no model given (see --help)\n";
    return 2;
  }
  if (o.outDir.empty()) {
    std::cerr << "gpipe-compile: error: -o OUT is required\n";
    return 2;
  }
  if (vm.count("batch-size"))
    o.batchSize = batch;
  if (o.autoConfig)
    for (const char *chosen : {"microbatches", "schedule", "virtual-stages",
                               "remat", "remat-stages", "partition"})
      if (vm.count(chosen) && !vm[chosen].defaulted()) {
        std::cerr << "gpipe-compile: error: --auto chooses --microbatches, "
                     "--schedule, --virtual-stages, --remat and the "
                     "partition: leave out --"
                  << chosen << "\n";
        return 2;
      }
  if (vm.count("memory-per-stage")) {
    // A number with an optional binary (KiB, MiB, GiB) or decimal (KB, MB,
    // GB) suffix.
    static const std::pair<const char *, double> kUnits[] = {
        {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0},
        {"KB", 1e3},     {"MB", 1e6},        {"GB", 1e9},
        {"B", 1.0},      {"", 1.0}};
    char *end = nullptr;
    double v = std::strtod(memoryPerStage.c_str(), &end);
    std::string unit = end ? std::string(end) : std::string();
    double scale = 0;
    for (auto &[name, factor] : kUnits)
      if (unit == name)
        scale = factor;
    if (end == memoryPerStage.c_str() || scale == 0 || !(v > 0) ||
        v * scale > 9.0e18) {
      std::cerr << "gpipe-compile: error: --memory-per-stage must be a "
                   "positive size such as 24GiB, 512MiB or 1000000, got '"
                << memoryPerStage << "'\n";
      return 2;
    }
    o.memoryPerStage = static_cast<int64_t>(v * scale);
  }
  // A comma-separated list of `--flag`: its items, none empty, or an error
  // naming the flag and what it takes.
  auto commaList = [](const char *flag, const std::string &text,
                      const char *items,
                      std::vector<std::string> &out) -> bool {
    std::istringstream in(text);
    for (std::string item; std::getline(in, item, ',');) {
      if (item.empty()) {
        out.clear();
        break;
      }
      out.push_back(item);
    }
    if (out.empty() || text.back() == ',') {
      std::cerr << "gpipe-compile: error: --" << flag << " takes " << items
                << " separated by commas, got '" << text << "'\n";
      return false;
    }
    return true;
  };
  // A comma-separated list of integers >= `least`; `items` names them in
  // the error.
  auto intList = [&](const char *flag, const std::string &text, long long least,
                     const char *items, std::vector<int64_t> &out) -> bool {
    std::vector<std::string> parts;
    bool ok = commaList(flag, text, items, parts);
    for (const std::string &item : parts) {
      char *end = nullptr;
      long long v = std::strtoll(item.c_str(), &end, 10);
      if (item.empty() || *end != '\0' || v < least) {
        std::cerr << "gpipe-compile: error: --" << flag << " takes " << items
                  << " separated by commas, got '" << text << "'\n";
        return false;
      }
      out.push_back(v);
    }
    return ok;
  };
  if (vm.count("remat-stash-bytes") &&
      !intList("remat-stash-bytes", rematStashBytes, -1, "byte counts (or -1)",
               o.rematStashBytes))
    return 2;
  if (vm.count("remat-stages") &&
      !intList("remat-stages", rematStages, 0, "stage numbers", o.rematStages))
    return 2;
  if (vm.count("partition") &&
      !commaList("partition", partition, "node names", o.partition))
    return 2;
  {
    std::istringstream in(betas);
    char comma = 0;
    std::string rest;
    if (!(in >> o.optimizer.beta1 >> comma >> o.optimizer.beta2) ||
        comma != ',' || (in >> rest)) {
      std::cerr << "gpipe-compile: error: --betas must be B1,B2 (e.g. "
                   "0.9,0.999), got '"
                << betas << "'\n";
      return 2;
    }
  }
  return gpipe::compile(o);
}
