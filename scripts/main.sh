#!/usr/bin/env bash
# The main job: install what is missing, build Release, run the default example.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
build/examples/w5-gpt2-block "$@"
