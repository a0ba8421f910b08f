#!/usr/bin/env python3
"""The C ABI of libvelvet_rope, written down, and a check that it changes only with the version.

The description (`include/velvet_rope.abi`) lists what a program compiled against
`include/velvet_rope.h` depends on: every function's prototype, every constant's value, and
every struct's size, alignment and field offsets as the C compiler lays them out (gcc compiles
a program that prints them). It starts with the version it was recorded for.

    packaging/abi.py check [LIBRARY]   fails when the header no longer matches the record, or
                                       (with LIBRARY, the built .so) when the library exports a
                                       `vr_` symbol the header does not declare, or the other way
    packaging/abi.py record [--init]   writes the record after a version bump; refuses when the
                                       ABI changed but the bump does not allow it (below), when
                                       the version went down, and (without --init) when there
                                       is no record yet

An ABI change needs a version whose compatible series is newer than the record's: a new minor
while the version is 0.x (0.2.x to 0.3.0: the soname `libvelvet_rope.so.0.<minor>` changes with
it), a new major from 1.0, and a CHANGELOG section for the version saying **Breaking** (C ABI).
Until that version is released (its CHANGELOG heading says "(unreleased)") its ABI may change
again: it has promised nothing yet. A patch release can never change the ABI. Sizes come from gcc (C11) and g++ (C++17, where
`vr_result` is an enum with a fixed underlying type); enumerators are printed by the compiler,
so one added without `= N` is seen. The version constants (`VR_VERSION_*`) are left out: they
change with every release by design. Renaming a parameter counts as a change (the prototype's
text is recorded). Standard library only: runs with the system's python3.
"""

from __future__ import annotations

import difflib
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
HEADER = REPO / "include" / "velvet_rope.h"
RECORD = REPO / "include" / "velvet_rope.abi"


def version() -> str:
    """The workspace's version (`[workspace.package] version` in Cargo.toml)."""
    text = (REPO / "Cargo.toml").read_text()
    section = text.split("[workspace.package]", 1)[1]
    match = re.search(r'^version\s*=\s*"([^"]+)"', section, re.M)
    if not match:
        sys.exit("abi.py: no version under [workspace.package] in Cargo.toml")
    return match.group(1)


def without_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def squeeze(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def structs(code: str) -> dict[str, list[str]]:
    """Each `typedef struct { ... } name;`: its field names, in order."""
    out = {}
    for body, name in re.findall(r"typedef struct\s*\{(.*?)\}\s*(\w+)\s*;", code, re.S):
        fields = []
        for decl in body.split(";"):
            decl = squeeze(decl)
            if not decl:
                continue
            field = re.search(r"(\w+)\s*(\[[^\]]*\])?$", decl)
            if not field:
                sys.exit(f"abi.py: cannot read the field `{decl}` of {name}")
            fields.append((field.group(1), squeeze(decl)))
        out[name] = fields
    return out


def scalar_typedefs(code: str) -> list[str]:
    """Names given to complete non-struct types (`typedef uint32_t vr_result;`): their sizes
    are part of every prototype that uses them."""
    code = re.sub(r"typedef struct\s*\{.*?\}\s*\w+\s*;", " ", code, flags=re.S)
    names = set()
    for decl, name in re.findall(r"typedef\s+([^;{}]+?)\s*\b(\w+)\s*;", code):
        if not re.match(r"struct\s+\w+$", decl.strip()):
            names.add(name)
    return sorted(names)


def enumerators(code: str) -> list[str]:
    """Every enumerator of every enum, whether or not it has `= N`."""
    code = re.sub(r"^\s*#.*$", " ", code, flags=re.M)
    out = []
    for body in re.findall(r"\benum\s+\w+[^{;]*\{(.*?)\}", code, re.S):
        for item in body.split(","):
            name = re.match(r"\s*(\w+)", item)
            if name:
                out.append(name.group(1))
    return out


def layouts(code: str) -> list[str]:
    """Sizes, alignments, offsets and enumerator values as gcc (C11) and g++ (C++17) see them
    on this machine: the struct layouts once (the same in both, checked), the scalar typedefs
    and enumerators under each."""
    fields = structs(code)
    prelude = [
        "#include <stddef.h>", "#include <stdio.h>", f'#include "{HEADER}"',
        "#ifdef __cplusplus", "#define ALIGNOF alignof", "#define LANG \"c++\"",
        "#else", "#define ALIGNOF _Alignof", "#define LANG \"c\"", "#endif",
        "int main(void) {",
    ]
    body = []
    for name, members in sorted(fields.items()):
        body.append(
            f'  printf("struct {name} size %zu align %zu\\n", sizeof({name}), ALIGNOF({name}));'
        )
        for field, decl in members:
            body.append(
                f'  printf("  field {name}.{field} offset %zu size %zu  /* {decl} */\\n", '
                f"offsetof({name}, {field}), sizeof((({name} *)0)->{field}));"
            )
    for name in scalar_typedefs(code):
        body.append(
            f'  printf("%s: type {name} size %zu align %zu\\n", LANG, sizeof({name}), '
            f"ALIGNOF({name}));"
        )
    for name in enumerators(code):
        body.append(f'  printf("%s: enumerator {name} = %lld\\n", LANG, (long long)({name}));')
    program = "\n".join(prelude + body + ["  return 0;", "}"]) + "\n"
    outputs = []
    with tempfile.TemporaryDirectory() as tmp:
        for compiler, std, suffix in (("gcc", "-std=c11", "c"), ("g++", "-std=c++17", "cpp")):
            src, exe = Path(tmp) / f"layout.{suffix}", Path(tmp) / f"layout-{suffix}"
            src.write_text(program)
            subprocess.run([compiler, std, "-o", str(exe), str(src)], check=True)
            outputs.append(
                subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
            )
    c_lines, cpp_lines = (o.splitlines() for o in outputs)
    shared = [l for l in c_lines if not l.startswith("c: ")]
    if shared != [l for l in cpp_lines if not l.startswith("c++: ")]:
        sys.exit("abi.py: C and C++ lay the structs out differently")
    return shared + [l for l in c_lines if l.startswith("c: ")] + [
        l for l in cpp_lines if l.startswith("c++: ")
    ]


def functions(code: str) -> dict[str, str]:
    """Each declared function's name and prototype (whitespace squeezed)."""
    out = {}
    code = re.sub(r"^\s*#.*$", " ", code, flags=re.M)
    for decl in code.split(";"):
        decl = squeeze(decl)
        match = re.search(r"\b(vr_\w+)\s*\(", decl)
        if match and not decl.startswith("typedef"):
            # What precedes the prototype on the same statement (`extern "C" {`, `}`) is not
            # part of it.
            decl = re.sub(r'^.*?(extern "C" \{|\})\s*', "", decl)
            out[match.group(1)] = decl
    return out


def describe() -> str:
    """The ABI of the header, as text (see the module's documentation)."""
    code = without_comments(HEADER.read_text())
    out = [f"version {version()}"]
    for name, value in re.findall(r"^\s*#define\s+(VR_\w+)\s+(.+?)\s*$", code, re.M):
        if not name.startswith("VR_VERSION_"):
            out.append(f"const {name} = {value}")
    for name, proto in sorted(functions(code).items()):
        out.append(f"function {name}: {proto}")
    out += layouts(code)
    return "\n".join(out) + "\n"


def exported(library: Path) -> set[str]:
    """The `vr_` functions the shared library exports."""
    text = subprocess.run(
        ["nm", "-D", "--defined-only", str(library)], check=True, capture_output=True, text=True
    ).stdout
    return {line.split()[-1] for line in text.splitlines() if re.search(r" T vr_\w+$", line)}


def body(description: str) -> list[str]:
    """The description without its version line."""
    return [l for l in description.splitlines() if not l.startswith("version ")]


def recorded_version(description: str) -> str:
    first = description.splitlines()[0] if description else ""
    if not first.startswith("version "):
        sys.exit(f"abi.py: {RECORD.relative_to(REPO)} does not start with its version")
    return first.split(" ", 1)[1]


def numbers(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v)[:3])


def series(v: str) -> tuple[int, ...]:
    """The compatible series: (0, minor) while 0.x, (major,) from 1.0."""
    n = numbers(v)
    return n[:2] if n[0] == 0 else n[:1]


def changelog_breaks_abi(v: str) -> bool:
    """Whether CHANGELOG.md's section for `v` says **Breaking** (C ABI)."""
    text = (REPO / "CHANGELOG.md").read_text()
    match = re.search(rf"^## {re.escape(v)}\b.*?(?=^## |\Z)", text, re.M | re.S)
    return bool(match and re.search(r"\*\*Breaking\*\*\s*\(C ABI\)", match.group(0)))


def unreleased(v: str) -> bool:
    """Whether CHANGELOG.md's heading for `v` says it is not released yet."""
    text = (REPO / "CHANGELOG.md").read_text()
    return re.search(rf"^## {re.escape(v)} \(unreleased\)\s*$", text, re.M) is not None


def may_change(old: str, new: str) -> str | None:
    """Why the ABI may not change from version `old` to `new`, or None when it may."""
    if old == new and unreleased(new) and changelog_breaks_abi(new):
        # Recorded for a version not released yet: nobody was promised it.
        return None
    if series(new) <= series(old):
        step = "minor (0.x)" if numbers(old)[0] == 0 else "major"
        return (f"the C ABI changed but {old} -> {new} is not a new {step} version: a patch "
                "release never changes it (docs/compatibility.md)")
    if not changelog_breaks_abi(new):
        return f"CHANGELOG.md's section for {new} must say what broke: **Breaking** (C ABI)"
    return None


def check(library: Path | None) -> int:
    now = describe()
    if not RECORD.exists():
        print(f"abi.py: {RECORD.relative_to(REPO)} is missing: `packaging/abi.py record --init`",
              file=sys.stderr)
        return 1
    recorded = RECORD.read_text()
    old, new = recorded_version(recorded), version()
    if numbers(new) < numbers(old):
        print(f"abi.py: the version went down: {old} recorded, {new} now", file=sys.stderr)
        return 1
    if now != recorded:
        diff = "".join(
            difflib.unified_diff(
                recorded.splitlines(True), now.splitlines(True), "recorded", "header now"
            )
        )
        print(diff, file=sys.stderr)
        if body(now) != body(recorded):
            why = may_change(old, new)
            print(f"abi.py: {why}" if why else
                  "abi.py: the C ABI changed with the version: `make abi` records it.",
                  file=sys.stderr)
        else:
            print("abi.py: the version changed: `make abi` records it.", file=sys.stderr)
        return 1
    if library is not None:
        declared = set(functions(without_comments(HEADER.read_text())))
        have = exported(library)
        if declared != have:
            print(
                f"abi.py: {library} exports {sorted(have - declared)} beyond the header, "
                f"and lacks {sorted(declared - have)}",
                file=sys.stderr,
            )
            return 1
    print(f"abi.py: the C ABI matches its record for {new}"
          + (f" ({len(functions(without_comments(HEADER.read_text())))} functions exported)"
             if library else ""))
    return 0


def record(init: bool) -> int:
    now = describe()
    if not RECORD.exists():
        if not init:
            print(f"abi.py: no record yet: `packaging/abi.py record --init` makes the first",
                  file=sys.stderr)
            return 1
    else:
        recorded = RECORD.read_text()
        old, new = recorded_version(recorded), version()
        if numbers(new) < numbers(old):
            print(f"abi.py: the version went down: {old} recorded, {new} now", file=sys.stderr)
            return 1
        if body(now) != body(recorded):
            why = may_change(old, new)
            if why:
                print(f"abi.py: {why}", file=sys.stderr)
                return 1
    RECORD.write_text(now)
    print(f"abi.py: recorded the C ABI of {version()} in {RECORD.relative_to(REPO)}")
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["check"] and len(argv) <= 2:
        return check(Path(argv[1]) if len(argv) == 2 else None)
    if argv in (["record"], ["record", "--init"]):
        return record(init=argv[1:] == ["--init"])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
