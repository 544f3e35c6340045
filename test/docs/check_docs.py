#!/usr/bin/env python3
"""Checks that two hand-kept lists in docs/ match the sources (ctest `docs_lists`):

- docs/environment.md names every KILN_* variable the tree reads: getenv("KILN_...")
  in C++ sources and ${KILN_...} / $KILN_... in scripts/;
- docs/ops-reference.md lists exactly the ops of runtime/ops.def (by IR name), and each
  listed op's C++ function is declared in runtime/ops.h (or is Tensor::copy_ for `copy`).

Usage: check_docs.py SOURCE_DIR. Prints what is missing and exits 1, else prints a summary.
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


def ops_in_table(root):
    text = (root / "runtime" / "ops.def").read_text()
    return re.findall(r'^KILN_OP\(\w+, "([a-z_0-9]+)",', text, re.M)


def ops_in_reference(root):
    text = (root / "docs" / "ops-reference.md").read_text()
    return re.findall(r"^\| `([a-z_0-9]+)` \|", text, re.M)


def main():
    root = pathlib.Path(sys.argv[1]).resolve()
    errors = []
    env_doc = (root / "docs" / "environment.md").read_text()
    env = env_vars_read(root)
    for var, where in sorted(env.items()):
        if f"`{var}`" not in env_doc:
            errors.append(f"docs/environment.md: {var} (read in {where}) is not documented")

    table, listed = ops_in_table(root), ops_in_reference(root)
    for op in sorted(set(table) - set(listed)):
        errors.append(f"docs/ops-reference.md: op '{op}' of runtime/ops.def is not listed")
    for op in sorted(set(listed) - set(table)):
        errors.append(f"docs/ops-reference.md: listed op '{op}' is not in runtime/ops.def")
    dupes = sorted({op for op in listed if listed.count(op) > 1})
    if dupes:
        errors.append(f"docs/ops-reference.md: listed twice: {', '.join(dupes)}")
    ops_h = (root / "runtime" / "ops.h").read_text()
    for op in listed:
        if op == "copy":
            continue  # Tensor::copy_ (runtime/tensor.h)
        if not re.search(rf"^\S.* {op}\(", ops_h, re.M):
            errors.append(f"docs/ops-reference.md: op '{op}' has no function kiln::{op} in runtime/ops.h")

    for e in errors:
        print(e)
    if errors:
        return 1
    print(f"docs lists match: {len(env)} environment variables, {len(listed)} ops")
    return 0


if __name__ == "__main__":
    sys.exit(main())
