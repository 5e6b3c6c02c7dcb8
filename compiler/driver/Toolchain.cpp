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

namespace {

/// One compiler process: its arguments (argv[0] is the program) and the file
/// that gets its output.
struct Command {
  std::string name;
  std::vector<std::string> args;
  std::string log;
};

/// Runs `commands` at once (one process each) and waits for all of them, even
/// after a failure, so that none outlives the compile. Returns the first
/// failure as "building NAME failed ..." with the compiler's output (the
/// tail of its log); the logs of commands that succeeded are removed.
LogicalResult runAll(const std::vector<Command> &commands, bool cuda,
                     bool verbose) {
  struct Job {
    const Command *command;
    llvm::sys::ProcessInfo process;
  };
  std::vector<Job> jobs;
  std::string startError;
  for (const Command &c : commands) {
    std::vector<llvm::StringRef> argRefs(c.args.begin(), c.args.end());
    std::optional<llvm::StringRef> redirects[] = {
        std::nullopt, llvm::StringRef(c.log), llvm::StringRef(c.log)};
    if (verbose) {
      llvm::errs() << "gpipe-compile: building " << c.name << ":";
      for (const std::string &a : c.args)
        llvm::errs() << " " << a;
      llvm::errs() << "\n";
    }
    bool failedToStart = false;
    llvm::sys::ProcessInfo process =
        llvm::sys::ExecuteNoWait(c.args.front(), argRefs, std::nullopt,
                                 redirects, 0, &startError, &failedToStart);
    if (failedToStart)
      break;
    jobs.push_back({&c, process});
  }
  const Command *failedCommand = nullptr;
  int failedRc = 0;
  std::string failedError;
  for (Job &job : jobs) {
    std::string err;
    llvm::sys::ProcessInfo done =
        llvm::sys::Wait(job.process, std::nullopt, &err);
    if (done.ReturnCode != 0 && !failedCommand) {
      failedCommand = job.command;
      failedRc = done.ReturnCode;
      failedError = err;
    } else if (done.ReturnCode == 0) {
      llvm::sys::fs::remove(job.command->log);
    }
  }
  if (jobs.size() != commands.size())
    return fail(std::string("cannot run the ") + (cuda ? "CUDA" : "C++") +
                " compiler " + commands[jobs.size()].args.front() + ": " +
                startError);
  if (failedCommand) {
    errorLine() << "building " << failedCommand->name << " failed (exit "
                << failedRc << ")"
                << (failedError.empty() ? "" : ": " + failedError)
                << "; compiler output:\n";
    if (auto buf = llvm::MemoryBuffer::getFile(failedCommand->log))
      llvm::errs() << (*buf)->getBuffer().take_back(4000);
    return failure();
  }
  return success();
}

} // namespace

/// Compiles and links the stage programs with the host C++ compiler (CPU) or
/// nvcc (CUDA), all at once (one compiler process per stage). With a compiler
/// launcher (--compiler-launcher or $GPIPE_COMPILER_LAUNCHER, e.g. ccache),
/// each stage is compiled through it (`LAUNCHER COMPILER ... -c NAME.cpp -o
/// NAME.o`, run in DIR with paths relative to it, so that a cache can match
/// the same source compiled in another directory) and then linked.
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
  std::string launcherName =
      findCompiler(o.compilerLauncher, "GPIPE_COMPILER_LAUNCHER", "");
  std::string launcher;
  if (!launcherName.empty()) {
    auto foundLauncher = llvm::sys::findProgramByName(launcherName);
    if (!foundLauncher)
      return fail("cannot find the compiler launcher '" + launcherName +
                  "' (--compiler-launcher or GPIPE_COMPILER_LAUNCHER)");
    launcher = *foundLauncher;
  }
  FailureOr<RuntimePaths> runtime = findRuntime(cuda);
  if (failed(runtime))
    return failure();
  llvm::SmallVector<llvm::StringRef> linkFlags;
  llvm::StringRef(cuda ? GPIPE_RUNTIME_CUDA_LINK_FLAGS
                       : GPIPE_RUNTIME_LINK_FLAGS)
      .split(linkFlags, ';', -1, false);

  // nvcc: SASS for every architecture, plus PTX of the newest for later GPUs.
  std::vector<std::string> gencode;
  if (cuda) {
    std::vector<int> archs = *cudaArchitectures(o.cudaArch);
    for (int a : archs)
      gencode.push_back("-gencode=arch=compute_" + std::to_string(a) +
                        ",code=sm_" + std::to_string(a));
    gencode.push_back("-gencode=arch=compute_" + std::to_string(archs.back()) +
                      ",code=compute_" + std::to_string(archs.back()));
  }
  // The compiler's flags for one stage: code generation, then the source.
  auto compileFlags = [&](const std::string &source) {
    std::vector<std::string> args;
    if (cuda) {
      args = {"-std=c++17", "-O3", "-I" + runtime->includeDir};
      args.insert(args.end(), gencode.begin(), gencode.end());
    } else {
      args = {
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
      };
    }
    args.push_back(source);
    return args;
  };
  // The link: objects or the source, the runtime and its libraries.
  auto linkArgs = [&](std::vector<std::string> args, const std::string &exe) {
    args.insert(args.end(), {"-o", exe, runtime->library});
    for (llvm::StringRef f : linkFlags)
      args.push_back(f.str());
    return args;
  };
  std::string ext = cuda ? ".cu" : ".cpp";

  if (launcher.empty()) {
    // One command per stage compiles and links.
    std::vector<Command> builds;
    for (const std::string &name : names) {
      std::vector<std::string> args = {*found};
      for (std::string &a : compileFlags(dir + "/" + name + ext))
        args.push_back(std::move(a));
      builds.push_back({name, linkArgs(std::move(args), dir + "/" + name),
                        dir + "/" + name + ".build.log"});
    }
    return runAll(builds, cuda, o.verbose);
  }

  // Through the launcher: compile in DIR (sh -c 'cd DIR && exec ...': the
  // launcher sees NAME.cpp and NAME.o, not this run's staging path), then
  // link; the objects are removed.
  auto shell = llvm::sys::findProgramByName("sh");
  if (!shell)
    return fail("cannot find sh, needed to run the compiler launcher");
  std::vector<Command> compiles, links;
  for (const std::string &name : names) {
    std::vector<std::string> args = {
        *shell, "-c", "cd \"$0\" && exec \"$@\"", dir, launcher, *found, "-c"};
    for (std::string &a : compileFlags(name + ext))
      args.push_back(std::move(a));
    args.insert(args.end(), {"-o", name + ".o"});
    compiles.push_back(
        {name, std::move(args), dir + "/" + name + ".build.log"});
    std::vector<std::string> link = {*found, dir + "/" + name + ".o"};
    if (cuda) // the same device code generation flags as the compile
      link.insert(link.end(), gencode.begin(), gencode.end());
    else
      link.push_back("-fopenmp");
    links.push_back({name, linkArgs(std::move(link), dir + "/" + name),
                     dir + "/" + name + ".build.log"});
  }
  LogicalResult built = runAll(compiles, cuda, o.verbose);
  if (succeeded(built))
    built = runAll(links, cuda, o.verbose);
  for (const std::string &name : names)
    llvm::sys::fs::remove(dir + "/" + name + ".o");
  return built;
}

} // namespace gpipe::driver
