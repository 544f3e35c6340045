"""Checks a `kiln bench --trace` file against the `--json` file of the same run.

The trace must be Chrome-trace JSON of complete ("X") events: the stream triad,
per row a slice with its phases, and one compiled call of the row with exactly
one "kernel" slice per JIT kernel launch (the row's `kernels`) and one "blas"
(or "gemm-jit": kiln's GEMM) slice per contraction in the optimized graph (given on the command line).
usage: check_trace.py TRACE JSON EXAMPLE MIN_BLAS
"""
import json
import re
import sys

trace_path, json_path, example, min_blas = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
events = json.load(open(trace_path))["traceEvents"]
row = json.load(open(json_path))["rows"][0]

def fail(msg):
    sys.exit(f"check_trace: {msg}")

if not all(e["ph"] == "X" and e["dur"] >= 0 and e["ts"] >= 0 for e in events):
    fail("every event must be a complete event with ts, dur >= 0")
names = [e["name"] for e in events if e["cat"] == "bench"]
for want in ["stream triad", example, example + ": eager", example + ": compile cold", example + ": compiled"]:
    if want not in names:
        fail(f"missing slice {want!r} in {names}")
kernels = [e for e in events if e["cat"] == "kernel"]
if len(kernels) != row["kernels"]:
    fail(f"{len(kernels)} kernel slices, but the row says {row['kernels']} kernels per call")
# A step slice names the IR value it computes as the dump does, then what runs.
if not all(re.fullmatch(r"%\S+ kiln_k_[0-9a-f]+\S*", e["name"]) for e in kernels):
    fail(f"kernel slices must be named '%<value> <kernel symbol>': {[e['name'] for e in kernels]}")
blas = [e for e in events if e["cat"] in ("blas", "gemm-jit")]  # BLAS or kiln's GEMM (KILN_GEMM)
if not all(e["name"].startswith("%") for e in blas):
    fail(f"blas slices must start with the %value they compute: {[e['name'] for e in blas]}")
if len(blas) < min_blas:
    fail(f"{len(blas)} blas slices, expected at least {min_blas}")
# The steps of the one traced call lie inside the row's slice, one after another.
row_slice = next(e for e in events if e["cat"] == "bench" and e["name"] == example)
steps = sorted((e for e in events if e["cat"] != "bench"), key=lambda e: e["ts"])
for a, b in zip(steps, steps[1:]):
    if a["ts"] + a["dur"] > b["ts"] + 1e-3:
        fail(f"steps overlap: {a['name']} and {b['name']}")
for s in steps:
    if s["ts"] < row_slice["ts"] or s["ts"] + s["dur"] > row_slice["ts"] + row_slice["dur"] + 1e-3:
        fail(f"step {s['name']} lies outside the row's slice")
print(f"ok: {len(kernels)} kernel, {len(blas)} blas, {len(steps)} step slices")
