#!/usr/bin/env bash
# The main job: install what is missing, build Release, then trace, compile and
# time the GPT-2 block (W5) against eager: `kiln bench w5-gpt2-block`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
build/tools/kiln bench w5-gpt2-block "$@"
