#!/usr/bin/env python3
"""Checks the registers and stack frames of an executable's CUDA kernels, without a GPU.

usage: check_res_usage.py EXE [--threads SUBSTRING=N ...] [--default-threads N]
                          [--allow-stack SUBSTRING ...] [--cuobjdump PATH]

What `cuobjdump -res-usage` shows, read from the executable itself (CUDA toolkits
without cuobjdump are common): the .nv_fatbin section (objcopy) holds one ELF cubin
per translation unit and architecture; its .nv.info section records, per kernel
symbol, EIATTR_REGCOUNT (0x2f: registers per thread), EIATTR_FRAME_SIZE (0x11) and
EIATTR_MIN_STACK_SIZE (0x12) (cuobjdump's STACK: local memory for register spills
and local arrays), and a kernel's own .nv.info.<name> section EIATTR_MAX_THREADS
(0x05: its __launch_bounds__).

A kernel's block size is N of the first --threads SUBSTRING=N whose substring is
in its (mangled) name, else its __launch_bounds__, else --default-threads. Fails
(exit 1) when
  - a block cannot get its registers: registers per thread, rounded up to 8 (the
    allocation unit: 256 per warp), times the block size exceed 65536 (so 1024
    threads allow 64 registers, 512 allow 128);
  - a kernel has a stack frame (spills or local arrays; the cubin does not tell
    which: `nvcc -Xptxas -v` does) and no --allow-stack substring is in its name;
  - a --threads substring names no kernel (renamed? the list must follow the
    launches), or the executable has no cubin;
  - with --cuobjdump (or one found on PATH or beside nvcc), its -res-usage
    disagrees with what was read here.
Prints every kernel's registers, stack and block size; a few ms per executable.
"""
import argparse
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile

FATBIN_MAGIC = 0xBA55ED50
REGISTERS_PER_BLOCK = 65536  # sm_80 and sm_90 alike
EIATTR_MAX_THREADS = 0x05
EIATTR_FRAME_SIZE = 0x11
EIATTR_MIN_STACK_SIZE = 0x12
EIATTR_REGCOUNT = 0x2F
EIFMT_SVAL = 0x04  # attribute with a u16 size and that many bytes of payload


def cubins(blob):
    """(arch, ELF bytes) of every uncompressed ELF entry of every fat binary in `blob`."""
    out, skipped = [], 0
    pos = 0
    while pos + 16 <= len(blob):
        magic, _version, header_size, body_size = struct.unpack_from("<IHHQ", blob, pos)
        if magic != FATBIN_MAGIC:
            pos += 8  # containers are 8-byte aligned inside the section
            continue
        entry, end = pos + header_size, pos + header_size + body_size
        while entry + 64 <= end:
            kind, _u, eheader, payload = struct.unpack_from("<HHIQ", blob, entry)
            (arch,) = struct.unpack_from("<I", blob, entry + 28)
            body = blob[entry + eheader:entry + eheader + payload]
            if kind == 2:  # ELF; 1 is PTX
                if body[:4] == b"\x7fELF":
                    out.append((arch, body))
                else:  # compressed: cuobjdump can read it, this cannot
                    skipped += 1
            entry += eheader + payload
        pos = max(end, pos + 8)
    return out, skipped


def cstr(data, offset):
    return data[offset:data.index(b"\0", offset)].decode("utf-8", "replace")


def kernels(elf):
    """{function: {"reg", "stack", "bounds"}} of one cubin (ELF64, little-endian)."""
    if elf[4] != 2 or elf[5] != 1:
        raise ValueError("not a 64-bit little-endian ELF cubin")
    (shoff,) = struct.unpack_from("<Q", elf, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 0x3A)
    sections = []
    for i in range(shnum):
        name, stype, _flags, _addr, off, size, link, _info, _align, _entsize = struct.unpack_from(
            "<IIQQQQIIQQ", elf, shoff + i * shentsize)
        sections.append((name, stype, off, size, link))
    names_at = sections[shstrndx][2]
    named = [(cstr(elf, names_at + s[0]),) + s[1:] for s in sections]

    symbols = []
    for _name, stype, off, size, link in named:
        if stype == 2:  # SHT_SYMTAB
            strings = named[link][2]
            for k in range(size // 24):
                (sname,) = struct.unpack_from("<I", elf, off + 24 * k)
                symbols.append(cstr(elf, strings + sname))

    def attributes(off, size):
        """(attribute, payload) of an .nv.info section's EIFMT_SVAL entries."""
        pos, end = off, off + size
        while pos + 4 <= end:
            fmt, attr, value = struct.unpack_from("<BBH", elf, pos)
            pos += 4
            if fmt == EIFMT_SVAL:
                yield attr, elf[pos:pos + value]
                pos += value

    # Every kernel (it has a .nv.info.<name> section) and device function not
    # inlined has EIATTR_REGCOUNT. The compiler's internal helpers (e.g.
    # $__internal_0_$__cuda_sm20_div_s64) may have frame entries but no register
    # count (they use their caller's): left out, as cuobjdump leaves them out.
    result, entries = {}, set()
    for name, _stype, off, size, _link in named:
        if name == ".nv.info":
            for attr, payload in attributes(off, size):
                if attr not in (EIATTR_REGCOUNT, EIATTR_FRAME_SIZE, EIATTR_MIN_STACK_SIZE):
                    continue
                sym, value = struct.unpack_from("<II", payload)
                k = result.setdefault(symbols[sym], {"reg": None, "stack": 0, "bounds": None})
                if attr == EIATTR_REGCOUNT:
                    k["reg"] = value
                else:
                    k["stack"] = max(k["stack"], value)
        elif name.startswith(".nv.info."):
            kernel = name[len(".nv.info."):]
            entries.add(kernel)
            k = result.setdefault(kernel, {"reg": None, "stack": 0, "bounds": None})
            for attr, payload in attributes(off, size):
                if attr == EIATTR_MAX_THREADS and len(payload) >= 12:
                    x, y, z = struct.unpack_from("<III", payload)
                    k["bounds"] = x * y * z
    return {n: k for n, k in result.items() if k["reg"] is not None or n in entries}


def find_cuobjdump(explicit):
    if explicit:
        return explicit if explicit != "none" else None
    found = shutil.which("cuobjdump")
    if found:
        return found
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    beside = os.path.join(os.path.dirname(os.path.realpath(nvcc)), "cuobjdump")
    return beside if os.access(beside, os.X_OK) else None


def cuobjdump_usage(tool, exe):
    """Sorted (arch, kernel, reg, stack) as `cuobjdump -res-usage` lists them."""
    text = subprocess.run([tool, "-res-usage", exe], check=True, capture_output=True,
                          text=True, timeout=60).stdout
    rows, arch, function, in_elf = [], None, None, False
    for line in text.splitlines():
        if line.startswith("Fatbin"):
            in_elf = "elf" in line
        m = re.match(r"arch = sm_(\d+)", line)
        if m:
            arch = int(m.group(1))
        m = re.match(r"\s*Function (\S+?):?$", line)
        if m:
            function = m.group(1)
        m = re.search(r"REG:(\d+) STACK:(\d+)", line)
        if m and function and in_elf:
            rows.append((arch, function, int(m.group(1)), int(m.group(2))))
            function = None
    return sorted(rows)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("exe")
    ap.add_argument("--threads", action="append", default=[], metavar="SUBSTRING=N")
    ap.add_argument("--default-threads", type=int, default=256)
    ap.add_argument("--allow-stack", action="append", default=[], metavar="SUBSTRING")
    ap.add_argument("--cuobjdump", help="cross-check with it ('none': do not)")
    a = ap.parse_args()
    pairs = []
    for spec in a.threads:
        sub, _, n = spec.rpartition("=")
        if not sub or not n.isdigit() or not 0 < int(n) <= 1024:
            ap.error("--threads wants SUBSTRING=N with 0 < N <= 1024, got " + spec)
        pairs.append((sub, int(n)))

    with tempfile.TemporaryDirectory() as tmp:
        section = os.path.join(tmp, "fatbin")
        subprocess.run(["objcopy", "-O", "binary", "--only-section=.nv_fatbin", a.exe, section],
                       check=True)
        with open(section, "rb") as f:
            blob = f.read()
    found, skipped = cubins(blob)
    problems = []
    if not found:
        problems.append("no uncompressed ELF cubin in the .nv_fatbin section"
                        + (" (%d compressed)" % skipped if skipped else ""))
    elif skipped:
        problems.append("%d compressed cubins not read (link with an uncompressed fatbin, "
                        "or pass --cuobjdump)" % skipped)

    rows, used = [], set()
    for arch, elf in found:
        for name, k in kernels(elf).items():
            threads, source = a.default_threads, "default"
            for sub, n in pairs:
                if sub in name:
                    threads, source = n, "--threads " + sub
                    used.add(sub)
                    break
            else:
                if k["bounds"]:
                    threads, source = k["bounds"], "__launch_bounds__"
            if k["reg"] is None:
                problems.append("sm_%d %s: no register count in the cubin" % (arch, name))
                continue
            need = -(-k["reg"] // 8) * 8 * threads
            rows.append((arch, name, k["reg"], k["stack"], threads, source))
            if need > REGISTERS_PER_BLOCK:
                problems.append("sm_%d %s: %d registers x %d threads (%s) need %d > %d "
                                "registers per block: a launch of that size fails; add "
                                "__launch_bounds__(%d)" % (arch, name, k["reg"], threads, source,
                                                           need, REGISTERS_PER_BLOCK, threads))
            if k["stack"] > 0 and not any(s in name for s in a.allow_stack):
                problems.append("sm_%d %s: %d-byte stack frame (register spills or a local "
                                "array; nvcc -Xptxas -v tells which)" % (arch, name, k["stack"]))
    for sub, _n in pairs:
        if sub not in used:
            problems.append("--threads %s: no kernel of that name (renamed?)" % sub)

    rows.sort()
    for arch, name, reg, stack, threads, source in rows:
        short = name if len(name) <= 90 else name[:87] + "..."
        print("sm_%-3d REG %3d STACK %4d threads %4d (%s)  %s"
              % (arch, reg, stack, threads, source, short))

    tool = find_cuobjdump(a.cuobjdump)
    theirs = None
    if tool:
        try:
            theirs = cuobjdump_usage(tool, a.exe)
        except (OSError, subprocess.SubprocessError) as e:
            problems.append("%s -res-usage failed: %s" % (tool, e))
    if theirs is not None:
        mine = sorted((arch, name, reg, stack) for arch, name, reg, stack, _t, _s in rows)
        if theirs != mine:
            diff = sorted(set(theirs) ^ set(mine))[:6]
            problems.append("%s -res-usage disagrees with the cubins read here: %s"
                            % (tool, diff))
        else:
            print("cuobjdump -res-usage agrees (%s, %d kernels)" % (tool, len(mine)))
    elif not tool:
        print("no cuobjdump: not cross-checked")

    for p in problems:
        print("FAIL " + p)
    print("%d kernels in %d cubins (%s): %s"
          % (len(rows), len(found), ", ".join("sm_%d" % x for x in sorted({r[0] for r in rows})),
             "FAILED" if problems else "ok"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
