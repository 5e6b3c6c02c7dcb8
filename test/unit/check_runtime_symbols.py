#!/usr/bin/env python3
"""Every gp_* function that runtime.h declares is defined by each runtime library.

  check_runtime_symbols.py RUNTIME_H [--cpu] LIBRARY.a [--cuda] LIBRARY.a ...

The generated stage programs call the runtime only through gpipe/runtime.h's
extern "C" gp_* functions; a library that lacks one links only the programs
that do not call it, so linking every model does not prove it complete. This
reads the declarations (outside comments) and each archive's defined global
symbols (nm), and names every function a library lacks. A function whose doc
comment says "CPU target only" is not required of a library given after
--cuda. Exit 0 = all defined, 1 = some missing, 2 = bad usage.
"""
import re
import subprocess
import sys


def declarations(header):
    """{name: doc comment} of every gp_* function called or declared in HEADER."""
    with open(header) as f:
        lines = f.read().splitlines()
    found, doc, in_block = {}, [], False
    for line in lines:
        code = line
        if in_block:
            if "*/" not in code:
                continue
            code, in_block = code.split("*/", 1)[1], False
        code = re.sub(r"/\*.*?\*/", " ", code)
        if "/*" in code:
            code, in_block = code.split("/*", 1)[0], True
        stripped = code.strip()
        if stripped.startswith("//"):
            doc.append(stripped.lstrip("/ "))
            continue
        code = code.split("//", 1)[0]
        for name in re.findall(r"\b(gp_[A-Za-z0-9_]+)\s*\(", code):
            found.setdefault(name, " ".join(doc))
        if stripped:
            doc = []
    return found


def defined(library):
    r = subprocess.run(["nm", "--defined-only", "-g", library], capture_output=True,
                       text=True)
    if r.returncode != 0:
        sys.exit("check_runtime_symbols: nm %s failed: %s" % (library, r.stderr.strip()))
    return {f[2] for f in (line.split() for line in r.stdout.splitlines())
            if len(f) == 3 and f[1] in ("T", "W")}


def main(argv):
    if len(argv) < 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    decls = declarations(argv[1])
    if len(decls) < 10:  # the header was not read as expected
        print("FAIL: only %d gp_* functions in %s" % (len(decls), argv[1]))
        return 1
    failed, target = False, "cpu"
    for arg in argv[2:]:
        if arg in ("--cpu", "--cuda"):
            target = arg[2:]
            continue
        need = [n for n, doc in sorted(decls.items())
                if target == "cpu" or "CPU target only" not in doc]
        missing = [n for n in need if n not in defined(arg)]
        if missing:
            failed = True
            print("FAIL: %s (%s) lacks %d of the %d gp_* functions of %s: %s"
                  % (arg, target, len(missing), len(need), argv[1], " ".join(missing)))
        else:
            print("ok: %s (%s) defines all %d gp_* functions of %s it must"
                  % (arg, target, len(need), argv[1]))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
