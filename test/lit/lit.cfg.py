# lit configuration of gpipe-compile's FileCheck tests.
import os
import lit.formats
from lit.llvm import llvm_config

config.name = "gpipe"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir", ".onnxtext", ".test"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.gpipe_obj_root, "test", "lit")
config.excludes = ["Inputs", "lit.cfg.py", "lit.site.cfg.py", "save-onnx.test.py",
                   "remat-memory.test.py", "trace.test.py",
                   "data-parallel.test.py"]

llvm_config.use_default_substitutions()
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)
llvm_config.with_environment("PATH", config.gpipe_tools_dir, append_path=True)
config.substitutions.append(("%examples", os.path.join(config.gpipe_src_root, "examples")))
config.substitutions.append(("%inputs", os.path.join(config.test_source_root, "Inputs")))
# ONNX models written by torch >= 2.9 (test/e2e/fixtures/fixtures.json says how)
config.substitutions.append(("%srctools", os.path.join(config.gpipe_src_root, "tools")))
config.substitutions.append(("%fixtures", os.path.join(config.gpipe_src_root, "test", "e2e", "fixtures")))
llvm_config.add_tool_substitutions(
    ["gpipe-opt", "gpipe-compile", "gpipe-run", "gpipe-translate"], [config.gpipe_tools_dir])
config.substitutions.append(("%python", "/usr/bin/python3"))
