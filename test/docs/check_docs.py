#!/usr/bin/env python3
"""Keeps two lists in docs/ true to the sources (ctest `docs_lists`):

- docs/environment.md (hand-kept) names every KILN_* variable the tree reads: getenv("KILN_...")
  in C++ sources and ${KILN_...} / $KILN_... in scripts/;
- docs/ops-reference.md is GENERATED from the op table runtime/ops.def (sections, ops, kinds,
  typed attributes, traits) and the declarations of runtime/ops.h (signatures, including the
  ones ops.h expands from the op lists of ops.def, e.g. KILN_VECMATH_OPS(DECLARE)); the check
  fails when the committed file differs, or when an op has no function in runtime/ops.h.

Usage: check_docs.py SOURCE_DIR [--write]. --write regenerates docs/ops-reference.md. Prints
what is wrong and exits 1, else prints a summary.
"""
import pathlib
import re
import sys

CPP_DIRS = ["runtime", "ir", "passes", "codegen", "frontend", "tools", "examples", "bench", "test", "fuzz"]


def env_vars_read(root):
    found = {}
    for d in CPP_DIRS:
        for p in (root / d).rglob("*"):
            if p.suffix in (".cpp", ".h") and p.is_file():
                for m in re.finditer(r'getenv\("(KILN_[A-Z0-9_]+)"\)', p.read_text(errors="replace")):
                    found.setdefault(m.group(1), str(p.relative_to(root)))
    for p in (root / "scripts").glob("*.sh"):
        for m in re.finditer(r"\$\{?(KILN_[A-Z0-9_]+)", p.read_text(errors="replace")):
            found.setdefault(m.group(1), str(p.relative_to(root)))
    return found


OPS_REFERENCE_HEAD = """# Ops

<!-- GENERATED from runtime/ops.def and runtime/ops.h by test/docs/check_docs.py: do not edit.
     Regenerate with `python3 test/docs/check_docs.py . --write` (or `cmake --build build --target docs`);
     ctest `docs_lists` fails while this file differs from what the table says. -->

The public ops, as a user calls them (`#include <kiln/kiln.h>`, namespace `kiln`): libtorch's names, argument
order and semantics. Each is a free function (most also a `Tensor` method, e.g. `x.exp()`, `x.view({2, 3})`) and
one entry of the op table `runtime/ops.def`. Columns:

- **IR**: its name in traced graphs (`docs/ir.md`); **C++**: its declarations in `runtime/ops.h`.
- **kind**: how the passes treat it. Composite ops are rewritten into primitives by `decompose`; Elementwise
  and Reduction ops fuse into JIT kernels; Contractions run BLAS/conv (mm, bmm, matmul and conv2d head a group
  whose elementwise epilogue is fused into them); Views move no data.
- **attributes**: name and type (torch schema spelling) in IR order; C++ code reads them by name
  (`attrs::BatchNorm{node}.eps()`, `runtime/op_attrs.h`).
- **compiled**: what `kiln::compile` makes of it: *JIT* (a lowering rule: fused groups become one kernel; a
  rule may still refuse some dtypes or operand forms, e.g. integer division, and that group then runs
  interpreted), *decomposed* (into the primitives above), *BLAS/conv*, *view* (no data moved) or *eager
  kernel* (its eager kernel runs as one step of the compiled plan).
- **fuses**: may join a fusion group (the `Fuses` trait).
- **grad**: differentiation. kiln has no autograd yet: *later* for ops that will have a derivative, *never*
  for ops with integer or bool results (`NoGrad`).
- **traits**: the rest of the entry's traits (`runtime/ops.def` explains each).

Dtypes: `kBool`, `kUInt8` (`kByte`), `kInt8` (`kChar`), `kInt16` (`kShort`), `kInt32` (`kInt`), `kInt64` (`kLong`),
`kFloat16` (`kHalf`), `kBFloat16`, `kFloat32` (`kFloat`), `kFloat64` (`kDouble`), with torch's promotion
(`runtime/dtype.h`: uint8 and int8 meet in int16, float16 and bfloat16 in float32) and conversions (a float to
uint8/int8/int16 through int64, so -1.0 is 255 in uint8; to float16/bfloat16 with rounding to nearest even).
Integer arithmetic wraps, integer sums are int64. float16 and bfloat16 are storage types: every op computes them in
float32 and rounds its result once, as torch's CPU kernels do, and compiled code does the same (the `upcast` pass).
Codegen lowers bool, int32, int64, float32 and float64; an op on uint8, int8 or int16 runs as an eager step of the
compiled plan (`x.to(kFloat32)` of a uint8 image is the boundary of the float group).

Factories not listed (`empty`, `zeros`, `ones`, `randn`, `rand`, `randint`, `*_like`, `from_blob`, `tensor`) make
tensors outside traced graphs. Writing a new op: `docs/ops.md`.
"""

SHOWN_ELSEWHERE = {"Lowers", "Eager", "Fuses", "NoGrad", "NoTraits", "EpilogueHead"}


def split_top(text, sep=","):
    """Splits at `sep` outside parentheses and string literals."""
    parts, depth, cur, in_str = [], 0, "", False
    for ch in text:
        if ch == '"':
            in_str = not in_str
        elif not in_str and ch == "(":
            depth += 1
        elif not in_str and ch == ")":
            depth -= 1
        if ch == sep and depth == 0 and not in_str:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return [p.strip() for p in parts]


def table_entries(root):
    """(section title, entries) in ops.def order; an entry is a dict of its columns."""
    text = (root / "runtime" / "ops.def").read_text()
    sections, i = [], 0
    for m in re.finditer(r"^// ---- (.*)$|^KILN_OP\(", text, re.M):
        if m.group(1) is not None:
            sections.append((m.group(1).strip(), []))
            continue
        depth, j = 0, m.end() - 1
        while True:  # to the entry's closing parenthesis
            depth += {"(": 1, ")": -1}.get(text[j], 0)
            if depth == 0:
                break
            j += 1
        cols = split_top(" ".join(text[m.end():j].split()))
        op_id, mnemonic, kind, operands, traits, attrs = (cols + [""])[:6]
        sections[-1][1].append({
            "id": op_id, "mnemonic": mnemonic.strip('"'), "kind": kind, "operands": operands,
            "traits": [t.strip() for t in traits.split("|")],
            "attrs": re.findall(r"ATTR\((\w+), (\w+)\)", attrs),
        })
    return sections


ATTR_SPELLING = {"Int": "int", "OptInt": "int?", "Float": "float", "OptFloat": "float?", "Bool": "bool",
                 "IntList": "int[]", "Str": "str", "OptStr": "str?", "Number": "Scalar", "OptNumber": "Scalar?",
                 "ScalarType": "ScalarType", "OptScalarType": "ScalarType?"}

def macro_calls(text, name="X"):
    """The argument lists of each `name(...)` call in text, split at top-level commas."""
    calls = []
    for m in re.finditer(r"\b%s\(" % name, text):
        depth, j = 0, m.end() - 1
        while True:
            depth += {"(": 1, ")": -1}.get(text[j], 0)
            if depth == 0:
                break
            j += 1
        calls.append(split_top(" ".join(text[m.end():j].split())))
    return calls


def op_lists(root):
    """The X-macro lists defined in runtime/ops.def (KILN_VECMATH_OPS, KILN_COMPOSED_OPS, ...):
    name -> the argument lists of their lines."""
    text = (root / "runtime" / "ops.def").read_text()
    lists = {}
    for m in re.finditer(r"^#define (KILN_\w+)\(X\)((?:[^\n]*\\\n)*[^\n]*)$", text, re.M):
        lists[m.group(1)] = macro_calls(m.group(2).replace("\\\n", " "))
    return lists


def expanded_declarations(text, lists):
    """Declarations that runtime/ops.h makes by expanding a list of ops.def with a macro
    (`#define DECLARE(Id, fn, def) Tensor fn(const Tensor &x);` then `KILN_VECMATH_OPS(DECLARE)`)."""
    macros = {m.group(1): ([p.strip() for p in m.group(2).split(",")], m.group(3))
              for m in re.finditer(r"^#define (\w+)\(([\w, ]+)\) (.*)$", text, re.M)}
    stmts = []
    for m in re.finditer(r"^(KILN_\w+)\((\w+)\)\s*$", text, re.M):
        params, body = macros[m.group(2)]
        for args in lists[m.group(1)]:
            stmt = body
            for param, arg in zip(params, args):
                stmt = re.sub(r"\b%s\b" % re.escape(param), arg, stmt)
            stmt = stmt.replace("##", "")  # token pasting: fn##_ is fn_
            stmts.extend(stmt.split(";"))
    return stmts


def declarations(root):
    """Top-level declarations of runtime/ops.h, whitespace-normalized, by function name,
    the ones expanded from the op lists of runtime/ops.def included."""
    text = re.sub(r"//[^\n]*", "", (root / "runtime" / "ops.h").read_text())
    body = text[text.index("namespace kiln {") + len("namespace kiln {"):]
    stmts = expanded_declarations(body, op_lists(root))
    body = re.sub(r"^\s*(#|KILN_\w+\(\w+\)\s*$)[^\n]*$", "", body, flags=re.M)
    decls = {}
    for stmt in stmts + body.split(";"):
        stmt = " ".join(stmt.split())
        m = re.match(r"^(?:[\w:<>, ]+?[ &*])(\w+)\(", stmt)
        if m and not stmt.startswith(("#", "}", "using", "namespace")):
            decls.setdefault(m.group(1), []).append(stmt)
    return decls


def compiled_column(e):
    if "Lowers" in e["traits"] and e["kind"] != "Composite":
        return "JIT"
    return {"Composite": "decomposed", "Contraction": "BLAS/conv", "View": "view"}.get(e["kind"], "eager kernel")


def fuses_column(e):
    if "Fuses" in e["traits"]:
        return "yes"
    if "EpilogueHead" in e["traits"]:
        return "epilogue"
    return "no"


def ops_reference(root):
    decls = declarations(root)
    out = [OPS_REFERENCE_HEAD]
    errors = []
    for title, entries in table_entries(root):
        out.append(f"\n## {title[0].upper() + title[1:]}\n")
        out.append("| IR | C++ | kind | attributes | compiled | fuses | grad | traits |")
        out.append("|---|---|---|---|---|---|---|---|")
        for e in entries:
            name = e["mnemonic"]
            if name == "copy":
                sigs = ["Tensor &Tensor::copy_(const Tensor &src)"]  # runtime/tensor.h
            elif name == "to":
                sigs = decls.get("to", [])
            else:
                sigs = decls.get(name, [])
            if not sigs:
                errors.append(f"runtime/ops.def: op '{name}' has no function kiln::{name} in runtime/ops.h")
            cpp = "<br>".join(f"`{s}`" for s in sigs)
            attrs = ", ".join(f"`{n}`: {ATTR_SPELLING.get(t, t)}" for t, n in e["attrs"])
            grad = "never" if "NoGrad" in e["traits"] else "later"
            traits = ", ".join(t for t in e["traits"] if t not in SHOWN_ELSEWHERE)
            out.append(f"| `{name}` | {cpp} | {e['kind']} | {attrs} | {compiled_column(e)} | {fuses_column(e)} "
                       f"| {grad} | {traits} |")
    out.extend(composites_section(root))
    return "\n".join(out) + "\n", errors


def composites_section(root):
    """The composites of runtime/ops.h (its `// ---- composites` section): functions
    without a table entry that call the ops above, so they trace, compile and fuse as those."""
    text = (root / "runtime" / "ops.h").read_text()
    start = text.index("// ---- composites")
    section = re.sub(r"//[^\n]*", "", text[start:text.index("// ----", start + 1)])
    names = {}
    for stmt in section.split(";"):
        stmt = " ".join(stmt.split())
        m = re.match(r"^(?:[\w:<>, ]+?[ &*])(\w+)\(", stmt)
        if m:
            names.setdefault(m.group(1), []).append(stmt)
    out = ["\n## Composites\n",
           "torch's functions that kiln builds from the ops above (`runtime/kernels/composite.cpp`), as torch's",
           "CompositeImplicitAutograd functions are: a traced call records the ops they call, so they compile and",
           "fuse as those ops do (elementwise parts into JIT kernels); `allclose` and `equal` read values and run",
           "eagerly. Methods of the same name exist where torch has them. Torch-style option structs for many of",
           "these and for the nn ops: `kiln::nn::functional` (`runtime/functional.h`).\n",
           "| C++ | compiled |", "|---|---|"]
    for name, sigs in names.items():
        compiled = "eager (reads values)" if name in ("allclose", "equal") else "as the ops it calls"
        if name == "repeat_interleave":  # its tensor-of-counts forms read the counts
            compiled = "as the ops it calls (int repeats); eager (reads values) with a tensor of repeats"
        out.append("| " + "<br>".join(f"`{s}`" for s in sigs) + f" | {compiled} |")
    return out


def main():
    root = pathlib.Path(sys.argv[1]).resolve()
    write = "--write" in sys.argv[2:]
    errors = []
    env_doc = (root / "docs" / "environment.md").read_text()
    env = env_vars_read(root)
    for var, where in sorted(env.items()):
        if f"`{var}`" not in env_doc:
            errors.append(f"docs/environment.md: {var} (read in {where}) is not documented")

    want, errs = ops_reference(root)
    errors += errs
    ref = root / "docs" / "ops-reference.md"
    if write:
        ref.write_text(want)
        print(f"wrote {ref}")
    elif ref.read_text() != want:
        have = ref.read_text().splitlines()
        first = next((i for i, (a, b) in enumerate(zip(have, want.splitlines())) if a != b),
                     min(len(have), len(want.splitlines())))
        errors.append(f"docs/ops-reference.md differs from runtime/ops.def (first at line {first + 1}); "
                      "regenerate: python3 test/docs/check_docs.py . --write")
    listed = sum(len(e) for _, e in table_entries(root))

    for e in errors:
        print(e)
    if errors:
        return 1
    print(f"docs lists match: {len(env)} environment variables, {listed} ops in docs/ops-reference.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
