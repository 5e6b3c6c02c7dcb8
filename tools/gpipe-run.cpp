// gpipe-run: launches the stage executables of a compiled pipeline and trains.
#include "compiler/ExternalData.h"
#include "npy.h" // the runtime's .npy reader
#include "tools/CommandLine.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/raw_ostream.h"

#include <boost/program_options.hpp>
#include <onnx/onnx_pb.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>

namespace po = boost::program_options;

extern char **environ;

namespace {

int fail(const std::string &msg) {
  std::cerr << "gpipe-run: error: " << msg << "\n";
  return 1;
}

struct ParamEntry {
  std::string name, file;
  std::vector<int64_t> shape;
};

struct Pipeline {
  std::string executable;
  std::string weights;
  std::string sourceModel;
  std::vector<ParamEntry> params;
  int64_t numStages = 0;
};

/// Reads OUT/pipeline.json; returns an error message or "".
std::string readPipeline(const std::string &out, Pipeline &p) {
  std::string path = out + "/pipeline.json";
  auto buf = llvm::MemoryBuffer::getFile(path);
  if (!buf)
    return path + ": cannot read (" + buf.getError().message() + "); is " +
           out + " a gpipe-compile output directory?";
  llvm::Expected<llvm::json::Value> json =
      llvm::json::parse((*buf)->getBuffer());
  if (!json)
    return path + ": invalid JSON: " + llvm::toString(json.takeError());
  const llvm::json::Object *root = json->getAsObject();
  if (!root || root->getString("format") != "gpipe-pipeline")
    return path + ": not a gpipe pipeline description";
  if (auto src = root->getString("source_model"))
    p.sourceModel = src->str();
  const llvm::json::Array *stages = root->getArray("stages");
  if (!stages || stages->empty())
    return path + ": no stages";
  p.numStages = stages->size();
  if (p.numStages != 1)
    return path + ": " + std::to_string(p.numStages) +
           " stages; this gpipe-run launches single-stage pipelines only";
  const llvm::json::Object *stage = (*stages)[0].getAsObject();
  if (!stage || !stage->getString("executable") || !stage->getArray("params"))
    return path + ": stage 0 lacks 'executable' or 'params'";
  p.executable = stage->getString("executable")->str();
  p.weights = stage->getString("weights").value_or("weights").str();
  for (const llvm::json::Value &v : *stage->getArray("params")) {
    const llvm::json::Object *o = v.getAsObject();
    if (!o || !o->getString("name") || !o->getString("file") ||
        !o->getArray("shape"))
      return path + ": malformed parameter entry in stage 0";
    ParamEntry e{o->getString("name")->str(), o->getString("file")->str(), {}};
    for (const llvm::json::Value &d : *o->getArray("shape"))
      e.shape.push_back(d.getAsInteger().value_or(-1));
    p.params.push_back(std::move(e));
  }
  return "";
}

/// Writes the compiled model with every trained parameter replaced, under the
/// same initializer names; atomically (FILE.tmp, then rename).
int saveOnnx(const std::string &out, const Pipeline &p,
             const std::string &trainedDir, const std::string &dest) {
  std::string modelPath = out + "/model.onnx";
  std::ifstream in(modelPath, std::ios::binary);
  onnx::ModelProto model;
  if (!in || !model.ParseFromIstream(&in))
    return fail(modelPath + ": cannot read the compiled model");
  std::map<std::string, const ParamEntry *> byName;
  for (const ParamEntry &e : p.params)
    byName[e.name] = &e;
  std::string srcDir = llvm::sys::path::parent_path(p.sourceModel).str();
  for (onnx::TensorProto &t : *model.mutable_graph()->mutable_initializer()) {
    auto it = byName.find(t.name());
    if (it == byName.end()) {
      // Untrained initializers keep their value; inline external data so the
      // saved model stands on its own.
      if (t.data_location() == onnx::TensorProto::EXTERNAL) {
        std::string data, err;
        if (!gpipe::readExternalData(t, srcDir, data, err))
          return fail(err);
        t.clear_external_data();
        t.set_data_location(onnx::TensorProto::DEFAULT);
        t.set_raw_data(data);
      }
      continue;
    }
    std::string file = trainedDir + "/" + it->second->file;
    gpipe::NpyFile npy;
    std::string err;
    if (!npy.open(file, GP_F32, err))
      return fail(err);
    if (npy.shape() != it->second->shape)
      return fail(file + ": shape " + gpipe::shapeToString(npy.shape()) +
                  " differs from parameter '" + t.name() + "' " +
                  gpipe::shapeToString(it->second->shape));
    t.clear_float_data();
    t.clear_external_data();
    t.set_data_location(onnx::TensorProto::DEFAULT);
    t.set_raw_data(reinterpret_cast<const char *>(npy.data()), npy.dataBytes());
  }
  std::string tmp = dest + ".tmp";
  {
    std::ofstream os(tmp, std::ios::binary | std::ios::trunc);
    if (!os || !model.SerializeToOstream(&os) || !os.flush())
      return llvm::sys::fs::remove(tmp), fail("cannot write " + tmp);
  }
  if (std::error_code ec = llvm::sys::fs::rename(tmp, dest))
    return fail("cannot move " + tmp + " to " + dest + ": " + ec.message());
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  std::string out, data, logJson, saveOnnxPath, weightsOut;
  int64_t steps = 1, threads = 1;
  bool quiet = false;
  po::options_description opts("Options");
  opts.add_options()("help,h", "print this help and exit")(
      "data", po::value(&data)->value_name("DIR"),
      "one <input>.npy per graph input (first axis = sample; float32 or "
      "int64 as the model declares)")(
      "steps", po::value(&steps)->default_value(1)->value_name("N"),
      "optimizer steps; step s (1-based) takes samples [((s-1) mod nb)*B, +B), "
      "nb = samples / B (a last partial batch is dropped)")(
      "log-json", po::value(&logJson)->value_name("FILE"),
      "write one JSON object per step: {\"step\":s,\"loss\":l,\"ms\":t}")(
      "save-onnx", po::value(&saveOnnxPath)->value_name("FILE"),
      "write the input model with every trained parameter (float32 "
      "initializer) replaced by its trained value, same names")(
      "weights-out", po::value(&weightsOut)->value_name("DIR"),
      "where the trained weights go (default OUT/trained)")(
      "threads", po::value(&threads)->default_value(1)->value_name("T"),
      "CPU threads per stage (BLAS)")("quiet,q", po::bool_switch(&quiet),
                                      "no per-step loss lines");
  po::variables_map vm;
  if (!gpipe::parseCommandLine(argc, argv, "gpipe-run", opts, "out", out, vm))
    return 2;
  if (vm.count("help")) {
    std::cout << "usage: gpipe-run OUT --data DIR --steps N [options]\n\n"
                 "Trains the pipeline that gpipe-compile wrote to OUT.\n\n"
              << opts;
    return 0;
  }
  if (out.empty())
    return std::cerr << "gpipe-run: error: no pipeline directory given\n", 2;
  if (steps < 0)
    return std::cerr << "gpipe-run: error: --steps must be >= 0\n", 2;
  if (threads < 1 || threads > 4096)
    return std::cerr << "gpipe-run: error: --threads must be in [1, 4096]\n", 2;

  Pipeline p;
  if (std::string err = readPipeline(out, p); !err.empty())
    return fail(err);
  std::string exe = out + "/" + p.executable;
  if (!llvm::sys::fs::can_execute(exe))
    return fail(exe + ": stage 0 executable is missing or not executable "
                      "(was the pipeline compiled with --emit exe?)");
  if (weightsOut.empty())
    weightsOut = out + "/trained";

  std::vector<std::string> args = {exe,
                                   "--weights-in",
                                   out + "/" + p.weights,
                                   "--weights-out",
                                   weightsOut,
                                   "--steps",
                                   std::to_string(steps),
                                   "--threads",
                                   std::to_string(threads)};
  if (!data.empty())
    args.insert(args.end(), {"--data", data});
  if (!logJson.empty())
    args.insert(args.end(), {"--log-json", logJson});
  if (quiet)
    args.push_back("--quiet");
  std::vector<llvm::StringRef> argRefs(args.begin(), args.end());
  // BLAS and OpenMP threads are pinned before the libraries start their
  // pools; idle OpenMP threads sleep rather than spin, so they do not compete
  // with OpenBLAS's threads for the cores (the user's OMP_WAIT_POLICY wins).
  std::vector<std::string> env;
  bool waitPolicySet = false;
  for (char **e = environ; *e; ++e) {
    llvm::StringRef var(*e);
    if (var.starts_with("OPENBLAS_NUM_THREADS=") ||
        var.starts_with("OMP_NUM_THREADS="))
      continue;
    waitPolicySet |= var.starts_with("OMP_WAIT_POLICY=");
    env.push_back(*e);
  }
  env.push_back("OPENBLAS_NUM_THREADS=" + std::to_string(threads));
  env.push_back("OMP_NUM_THREADS=" + std::to_string(threads));
  if (!waitPolicySet)
    env.push_back("OMP_WAIT_POLICY=PASSIVE");
  std::vector<llvm::StringRef> envRefs(env.begin(), env.end());

  std::string err;
  bool failedToRun = false;
  int rc = llvm::sys::ExecuteAndWait(exe, argRefs, envRefs, {}, 0, 0, &err,
                                     &failedToRun);
  if (failedToRun)
    return fail("cannot start stage 0 (" + exe + "): " + err);
  if (rc == -2)
    return fail("stage 0 (" + exe + ") crashed: " + err);
  if (rc != 0)
    return fail("stage 0 (" + exe + ") exited with code " + std::to_string(rc));
  if (!saveOnnxPath.empty())
    return saveOnnx(out, p, weightsOut, saveOnnxPath);
  return 0;
}
