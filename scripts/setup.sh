#!/usr/bin/env bash
# Installs the Debian packages kiln needs that are missing; does nothing when all are present.
set -euo pipefail
packages=(build-essential cmake ninja-build pkg-config python3 llvm-19-dev llvm-19-tools
          libopenblas-dev libspdlog-dev nlohmann-json3-dev libgtest-dev libgmock-dev libbenchmark-dev
          clang-19 libclang-rt-19-dev libssl-dev
          libdnnl-dev   # oneDNN: bench/ compares kiln's GEMM with it; never linked into the library
          ocl-icd-opencl-dev)  # libdnnl-dev's recommendation, which --no-install-recommends skips: Debian's oneDNN
                               # is built with an OpenCL GPU runtime, and its CMake config requires OpenCL
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all packages present"
  exit 0
fi
echo "setup: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
$SUDO apt-get update -q
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
