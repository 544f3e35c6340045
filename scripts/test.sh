#!/usr/bin/env bash
# Install what is missing, build, and run the whole test suite through ctest; then the sanitizer and
# fuzzing stages (scripts/sanitize.sh: ASan+UBSan suite, libFuzzer targets, TSan concurrency tests).
# KILN_SANITIZE_STAGES=none skips those stages (e.g. for a quick local run).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
ctest --test-dir build --output-on-failure -j "$(nproc)"
if [ "${KILN_SANITIZE_STAGES:-all}" != none ]; then
  bash scripts/sanitize.sh "${KILN_SANITIZE_STAGES:-all}"
fi
