// Building the stage programs: finds the host C++ compiler or nvcc and the
// runtime, and runs one compiler process per stage.
#include "compiler/driver/Toolchain.h"
#include "compiler/driver/Diagnostics.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/Program.h"

using namespace mlir;

#ifndef GPIPE_RUNTIME_INCLUDE_DIR
#error "GPIPE_RUNTIME_INCLUDE_DIR must be defined by the build"
#endif

namespace gpipe::driver {

/// The SM versions of --cuda-arch ("80,90" -> {80, 90}).
FailureOr<std::vector<int>> cudaArchitectures(const std::string &list) {
  std::vector<int> archs;
  llvm::SmallVector<llvm::StringRef> parts;
  llvm::StringRef(list).split(parts, ',');
  for (llvm::StringRef part : parts) {
    part = part.trim();
    part.consume_front("sm_");
    int arch = 0;
    if (part.getAsInteger(10, arch) || arch < 50 || arch > 200) {
      (void)fail("--cuda-arch must be a comma-separated list of SM versions "
                 "such as 80,90 (sm_80 also works), got '" +
                 list + "'");
      return failure();
    }
    if (!llvm::is_contained(archs, arch))
      archs.push_back(arch);
  }
  return archs;
}

namespace {

/// The compiler a flag names (--cxx, --nvcc), else an environment variable
/// ($CXX, $NVCC), else the one the runtime was built with (for nvcc: empty
/// when gpipe-compile was built without the CUDA target).
std::string findCompiler(const std::string &flag, const char *envVar,
                         const char *built) {
  if (!flag.empty())
    return flag;
  if (auto env = llvm::sys::Process::GetEnv(envVar))
    return *env;
  return built;
}

struct RuntimePaths {
  std::string includeDir, library;
};

/// Where the stage programs' runtime is: $GPIPE_RUNTIME_DIR (a prefix with
/// include/gpipe/runtime.h and lib/gpipe/libgpipe_runtime.a, or
/// libgpipe_runtime_cuda.a for the CUDA target), else next to an installed
/// gpipe-compile (<prefix>/bin/../{include,lib/gpipe}), else the build tree
/// gpipe-compile was built in.
FailureOr<RuntimePaths> findRuntime(bool cuda) {
  std::string lib = cuda ? "libgpipe_runtime_cuda.a" : "libgpipe_runtime.a";
  auto complete =
      [&](const std::string &prefix) -> std::optional<RuntimePaths> {
    RuntimePaths p{prefix + "/include", prefix + "/lib/gpipe/" + lib};
    if (llvm::sys::fs::exists(p.includeDir + "/gpipe/runtime.h") &&
        llvm::sys::fs::exists(p.library))
      return p;
    return std::nullopt;
  };
  if (auto env = llvm::sys::Process::GetEnv("GPIPE_RUNTIME_DIR")) {
    if (auto p = complete(*env))
      return *p;
    (void)fail("GPIPE_RUNTIME_DIR=" + *env +
               " has no include/gpipe/runtime.h and lib/gpipe/" + lib);
    return failure();
  }
  static int anchor;
  std::string exe = llvm::sys::fs::getMainExecutable(nullptr, &anchor);
  llvm::StringRef bin = llvm::sys::path::parent_path(exe);
  if (auto p = complete(llvm::sys::path::parent_path(bin).str()))
    return *p;
  RuntimePaths built{GPIPE_RUNTIME_INCLUDE_DIR,
                     cuda ? GPIPE_RUNTIME_CUDA_LIBRARY : GPIPE_RUNTIME_LIBRARY};
  if (!built.library.empty() && llvm::sys::fs::exists(built.library))
    return built;
  (void)fail("cannot find the runtime library (" + lib +
             "): install gpipe-compile or set GPIPE_RUNTIME_DIR");
  return failure();
}

} // namespace

/// Compiles and links the stage programs with the host C++ compiler (CPU) or
/// nvcc (CUDA), all at once (one compiler process per stage).
LogicalResult buildExecutables(const CompileOptions &o, const std::string &dir,
                               const std::vector<std::string> &names) {
  bool cuda = o.target == "cuda";
  std::string cxx = cuda ? findCompiler(o.nvcc, "NVCC", GPIPE_CUDA_COMPILER)
                         : findCompiler(o.cxx, "CXX", GPIPE_HOST_CXX);
  if (cuda && cxx.empty())
    return fail("--target cuda: this gpipe-compile was built without the "
                "CUDA target (no nvcc, cuBLASLt or NCCL at build time); use "
                "--target cpu, or rebuild where the CUDA toolkit is installed");
  auto found = llvm::sys::findProgramByName(cxx);
  if (!found)
    return fail(
        cuda
            ? "cannot find the CUDA compiler '" + cxx + "' (set --nvcc or NVCC)"
            : "cannot find the C++ compiler '" + cxx + "' (set --cxx or CXX)");
  FailureOr<RuntimePaths> runtime = findRuntime(cuda);
  if (failed(runtime))
    return failure();
  llvm::SmallVector<llvm::StringRef> linkFlags;
  llvm::StringRef(cuda ? GPIPE_RUNTIME_CUDA_LINK_FLAGS
                       : GPIPE_RUNTIME_LINK_FLAGS)
      .split(linkFlags, ';', -1, false);
  struct Job {
    std::string name, log;
    llvm::sys::ProcessInfo process;
  };
  std::vector<Job> jobs;
  std::string startError;
  for (const std::string &name : names) {
    std::vector<std::string> args;
    if (cuda) {
      args = {*found, "-std=c++17", "-O3", "-I" + runtime->includeDir};
      // SASS for every architecture, plus PTX of the newest for later GPUs.
      std::vector<int> archs = *cudaArchitectures(o.cudaArch);
      for (int a : archs)
        args.push_back("-gencode=arch=compute_" + std::to_string(a) +
                       ",code=sm_" + std::to_string(a));
      args.push_back("-gencode=arch=compute_" + std::to_string(archs.back()) +
                     ",code=compute_" + std::to_string(archs.back()));
      args.insert(args.end(), {dir + "/" + name + ".cu", "-o", dir + "/" + name,
                               runtime->library});
    } else {
      args = {
        *found,
        "-std=c++17",
        "-O3",
        "-march=" + o.cpuArch,
#if defined(__x86_64__)
        // GCC's znver1 tuning (what -march=native picks on many AMD
        // EPYC guests) prefers 128-bit vectors; AVX2 loops run twice
        // as wide.
        "-mprefer-vector-width=256",
#endif
        // The libm calls in the elementwise loops vectorize (libmvec,
        // gpipe/runtime.h); nothing reads errno.
        "-fno-math-errno",
        // A fused loop reads and writes several arena buffers; GCC's default
        // of 10 run-time alias checks leaves most of them scalar (clang
        // ignores the option with a warning).
        "--param=vect-max-version-for-alias-checks=64",
        "-fopenmp",
        "-I" + runtime->includeDir,
        dir + "/" + name + ".cpp",
        "-o",
        dir + "/" + name,
        runtime->library
      };
    }
    for (llvm::StringRef f : linkFlags)
      args.push_back(f.str());
    std::vector<llvm::StringRef> argRefs(args.begin(), args.end());
    Job job{name, dir + "/" + name + ".build.log", {}};
    std::optional<llvm::StringRef> redirects[] = {
        std::nullopt, llvm::StringRef(job.log), llvm::StringRef(job.log)};
    if (o.verbose) {
      llvm::errs() << "gpipe-compile: building " << name << ":";
      for (auto &a : args)
        llvm::errs() << " " << a;
      llvm::errs() << "\n";
    }
    bool failedToStart = false;
    job.process =
        llvm::sys::ExecuteNoWait(*found, argRefs, std::nullopt, redirects, 0,
                                 &startError, &failedToStart);
    if (failedToStart)
      break;
    jobs.push_back(std::move(job));
  }
  // Wait for every job, even after a failure, so none outlives the compile.
  std::string failedName;
  int failedRc = 0;
  std::string failedError;
  for (Job &job : jobs) {
    std::string err;
    llvm::sys::ProcessInfo done =
        llvm::sys::Wait(job.process, std::nullopt, &err);
    if (done.ReturnCode != 0 && failedName.empty()) {
      failedName = job.name;
      failedRc = done.ReturnCode;
      failedError = err;
    } else if (done.ReturnCode == 0) {
      llvm::sys::fs::remove(job.log);
    }
  }
  if (jobs.size() != names.size())
    return fail(std::string("cannot run the ") + (cuda ? "CUDA" : "C++") +
                " compiler " + *found + ": " + startError);
  if (!failedName.empty()) {
    errorLine() << "building " << failedName << " failed (exit " << failedRc
                << ")" << (failedError.empty() ? "" : ": " + failedError)
                << "; compiler output:\n";
    if (auto buf =
            llvm::MemoryBuffer::getFile(dir + "/" + failedName + ".build.log"))
      llvm::errs() << (*buf)->getBuffer().take_back(4000);
    return failure();
  }
  return success();
}

} // namespace gpipe::driver
