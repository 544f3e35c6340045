"""Validates a `kiln bench --json` file against shared/workloads.md.

usage: check_bench_json.py FILE EXPECTED_ROW_NAME EXPECTED_THREADS [EXPECTED_GEMM [FLOPS[,FLOPS...]]]

Every row has "gemm" ("jit" or "blas", matching the top-level "gemm": that path, or
"both"), "flops" (contraction flops per call, >= 0), and "gflops" and
"fma_fraction": null without contractions, else gflops = flops / compiled time
and fma_fraction = gflops / fma_peak_gflops. With FLOPS (one per row, from the
first), each row's flops must equal it (an independent count: e.g. 2 * 2048**3)
and its gflops must be FLOPS / compiled_us / 1e3, with fma_fraction in (0, 1.5).
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


def check_contraction_fields(doc, row):
    name = row["name"]
    if row.get("gemm") not in ("jit", "blas"):
        fail("row %s: gemm is %r" % (name, row.get("gemm")))
    if doc.get("gemm") not in (row["gemm"], "both"):
        fail("row %s: gemm %r, top-level gemm %r" % (name, row["gemm"], doc.get("gemm")))
    flops = row.get("flops")
    if not isinstance(flops, int) or isinstance(flops, bool) or flops < 0:
        fail("row %s: flops is %r" % (name, flops))
    if flops == 0:
        if row.get("gflops", 0) is not None or row.get("fma_fraction", 0) is not None:
            fail("row %s: no contractions, but gflops %r, fma_fraction %r" % (name, row.get("gflops"), row.get("fma_fraction")))
        return
    if not is_number(row.get("gflops")) or row["gflops"] <= 0:
        fail("row %s: gflops is %r" % (name, row.get("gflops")))
    if abs(row["gflops"] - flops / (row["compiled_us"] * 1e3)) > 1e-9 * row["gflops"]:
        fail("row %s: gflops %r is not flops / compiled time" % (name, row["gflops"]))
    frac = row.get("fma_fraction")
    if not is_number(frac) or abs(frac - row["gflops"] / doc["fma_peak_gflops"]) > 1e-9 * frac:
        fail("row %s: fma_fraction %r is not gflops / fma_peak_gflops" % (name, frac))


def check_flops(row, flops):
    if row["flops"] != flops:
        fail("row %s: flops %r, expected %d" % (row["name"], row["flops"], flops))
    gflops = flops / (row["compiled_us"] * 1e3)
    if not is_number(row["gflops"]) or abs(row["gflops"] - gflops) > 1e-9 * gflops:
        fail("row %s: gflops %r, expected %r from the flops and compiled_us" % (row["name"], row["gflops"], gflops))
    if not 0 < row["fma_fraction"] < 1.5:
        fail("row %s: fma_fraction %r outside (0, 1.5)" % (row["name"], row["fma_fraction"]))


def main():
    path, name, threads = sys.argv[1], sys.argv[2], int(sys.argv[3])
    with open(path) as f:
        doc = json.load(f)
    if set(doc) - {"fma_peak_gflops", "gemm"} != {"threads", "stream_gbps", "rows"}:
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
        check_contraction_fields(doc, row)
    if rows[0]["name"] != name:
        fail("first row is %r, expected %r" % (rows[0]["name"], name))
    if len(sys.argv) > 4:
        want = sys.argv[4]
        if doc.get("gemm") != want:
            fail("gemm is %r, expected %r" % (doc.get("gemm"), want))
        paths = [r["gemm"] for r in rows]
        if want == "both" and paths[:2] != ["jit", "blas"]:
            fail("--gemm both: the first rows' paths are %r, expected jit then blas" % paths[:2])
        if want != "both" and set(paths) != {want}:
            fail("rows' paths are %r, expected %r" % (paths, want))
    if len(sys.argv) > 5:
        for row, flops in zip(rows, [int(f) for f in sys.argv[5].split(",")]):
            check_flops(row, flops)
    print("ok: %d row(s)" % len(rows))


main()
