# lit configuration for kiln's .kir tests.
#
# Run through ctest (test/lit/CMakeLists.txt) or by hand:
#   python3 /usr/lib/llvm-19/build/utils/lit/lit.py -sv \
#     --param kiln_tools_dir=build/tools test/lit
import os
import sys

import lit.formats

config.name = "kiln"
config.test_format = lit.formats.ShTest(execute_external=True)
config.suffixes = [".kir", ".test"]
config.excludes = ["Inputs", "CMakeLists.txt", "lit.cfg.py"]
config.test_source_root = os.path.dirname(__file__)

tools_dir = lit_config.params.get("kiln_tools_dir")
if not tools_dir:
    lit_config.fatal("pass --param kiln_tools_dir=<build>/tools (the directory holding kiln-opt)")
tools_dir = os.path.abspath(tools_dir)
llvm_tools_dir = lit_config.params.get("llvm_tools_dir", "/usr/lib/llvm-19/bin")

# Output/ directories go to the build tree, not next to the sources.
exec_root = lit_config.params.get("kiln_exec_root")
if exec_root:
    config.test_exec_root = exec_root

# kiln (library and CLI) caches kernels on disk by default; tests keep the disk cache off
# unless a test sets KILN_CACHE_DIR itself.
config.environment["KILN_CACHE_DIR"] = ""
config.environment["PATH"] = os.pathsep.join([tools_dir, llvm_tools_dir, config.environment.get("PATH", "")])
config.substitutions.append(("%kiln-opt", os.path.join(tools_dir, "kiln-opt")))
# After %kiln-opt, so that the longer name is substituted first. The CLI binary
# (target kiln-cli) is named kiln and sits next to kiln-opt unless told otherwise.
config.substitutions.append(("%kiln", os.path.abspath(lit_config.params.get("kiln_cli", os.path.join(tools_dir, "kiln")))))
config.substitutions.append(("%python", sys.executable))

# `REQUIRES: passes` tests run once the pass manager is linked in (the library
# has a placeholder run_pipeline that throws until then).
import subprocess

try:
    _probe = subprocess.run([os.path.join(tools_dir, "kiln-opt"), "--passes=dce", "-"],
                            input=b"graph @probe(%x: f32[1]) {\n  return %x\n}\n",
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)
    if _probe.returncode == 0:
        config.available_features.add("passes")
except (OSError, subprocess.SubprocessError):
    pass
