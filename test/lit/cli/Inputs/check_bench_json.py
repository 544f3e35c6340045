"""Validates a `kiln bench --json` file against shared/workloads.md.

usage: check_bench_json.py FILE EXPECTED_ROW_NAME EXPECTED_THREADS
"""
import json
import math
import sys

ROW_FIELDS = ["eager_us", "compiled_us", "speedup", "compile_ms_cold", "compile_ms_warm", "kernels",
              "bytes_moved", "achieved_gbps", "bandwidth_fraction", "max_abs_diff", "max_rel_diff"]


def fail(msg):
    print("check_bench_json: " + msg, file=sys.stderr)
    sys.exit(1)


def is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def main():
    path, name, threads = sys.argv[1], sys.argv[2], int(sys.argv[3])
    with open(path) as f:
        doc = json.load(f)
    if set(doc) - {"fma_peak_gflops"} != {"threads", "stream_gbps", "rows"}:
        fail("top-level keys are %s" % sorted(doc))
    if "fma_peak_gflops" in doc and (not is_number(doc["fma_peak_gflops"]) or doc["fma_peak_gflops"] <= 0):
        fail("fma_peak_gflops is %r" % doc["fma_peak_gflops"])
    if doc["threads"] != threads:
        fail("threads is %r, expected %d" % (doc["threads"], threads))
    if not is_number(doc["stream_gbps"]) or doc["stream_gbps"] <= 0:
        fail("stream_gbps is %r" % doc["stream_gbps"])
    rows = doc["rows"]
    if not isinstance(rows, list) or not rows:
        fail("rows is empty or not a list")
    for row in rows:
        if not isinstance(row.get("name"), str):
            fail("a row has no name")
        for k in ROW_FIELDS:
            if not is_number(row.get(k)):
                fail("row %s: %s is %r" % (row["name"], k, row.get(k)))
        for k in ["eager_us", "compiled_us", "speedup", "compile_ms_cold", "compile_ms_warm"]:
            if row[k] <= 0:
                fail("row %s: %s is %r, expected > 0" % (row["name"], k, row[k]))
        if row["bytes_moved"] <= 0 or row["max_abs_diff"] < 0:
            fail("row %s: bytes_moved %r, max_abs_diff %r" % (row["name"], row["bytes_moved"], row["max_abs_diff"]))
    if rows[0]["name"] != name:
        fail("first row is %r, expected %r" % (rows[0]["name"], name))
    print("ok: %d row(s)" % len(rows))


main()
