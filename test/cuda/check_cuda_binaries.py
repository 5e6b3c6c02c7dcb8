#!/usr/bin/env python3
"""Checks CUDA stage executables without a GPU (what CI can check).

usage: check_cuda_binaries.py EXE [EXE ...] --arch 90 [--arch 80] --needs nccl

For each executable:
  - its .nv_fatbin section (the embedded device code, read with objcopy) holds an
    ELF cubin (SASS) for every --arch, walked entry by entry in the fat binary's
    container format: header magic 0xBA55ED50, then entries of
    (kind u16 [1 PTX, 2 ELF], _, header size u32, payload size u64, ..., arch u32 at
    byte 28);
  - with --only, no SASS or PTX for any other architecture;
  - its dynamic section (readelf -d) has a NEEDED entry for every --needs library
    (e.g. nccl -> libnccl.so.N).
Prints one line per executable and exits 1 on the first problem.
"""
import argparse
import os
import re
import struct
import subprocess
import sys
import tempfile

FATBIN_MAGIC = 0xBA55ED50


def fatbin_entries(blob):
    """(kind, arch) of every entry of every fat binary container in `blob`."""
    out = []
    pos = 0
    while pos + 16 <= len(blob):
        magic, _version, header_size, body_size = struct.unpack_from("<IHHQ", blob, pos)
        if magic != FATBIN_MAGIC:
            # Containers are 8-byte aligned inside the section.
            pos += 8
            continue
        entry = pos + header_size
        end = entry + body_size
        while entry + 32 <= end:
            kind, _u, eheader, payload = struct.unpack_from("<HHIQ", blob, entry)
            arch = struct.unpack_from("<I", blob, entry + 28)[0]
            if eheader == 0:
                break
            out.append((kind, arch))
            entry += eheader + payload
        pos = end
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("exes", nargs="+")
    ap.add_argument("--arch", action="append", type=int, required=True)
    ap.add_argument("--needs", action="append", default=[])
    ap.add_argument("--only", action="store_true",
                    help="no SASS or PTX for any other architecture than --arch")
    a = ap.parse_args()
    for exe in a.exes:
        if not (os.path.isfile(exe) and os.access(exe, os.X_OK)):
            print("FAIL %s: missing or not executable" % exe)
            return 1
        with tempfile.TemporaryDirectory() as tmp:
            section = os.path.join(tmp, "fatbin")
            r = subprocess.run(["objcopy", "-O", "binary", "--only-section=.nv_fatbin",
                                exe, section], capture_output=True, text=True)
            blob = open(section, "rb").read() if r.returncode == 0 and \
                os.path.exists(section) else b""
        entries = fatbin_entries(blob)
        sass = sorted({arch for kind, arch in entries if kind == 2})
        ptx = sorted({arch for kind, arch in entries if kind == 1})
        missing = [x for x in a.arch if x not in sass]
        if missing:
            print("FAIL %s: no SASS for sm_%s in .nv_fatbin (%d bytes; SASS %s, PTX %s)"
                  % (exe, ",".join(map(str, missing)), len(blob), sass, ptx))
            return 1
        extra = [x for x in sass + ptx if x not in a.arch]
        if a.only and extra:
            print("FAIL %s: code for other architectures than sm_%s (SASS %s, PTX %s)"
                  % (exe, ",".join(map(str, a.arch)), sass, ptx))
            return 1
        dyn = subprocess.run(["readelf", "-d", exe], capture_output=True, text=True).stdout
        needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", dyn)
        for lib in a.needs:
            if not any(n.startswith("lib%s.so" % lib) for n in needed):
                print("FAIL %s: not linked against lib%s (NEEDED: %s)"
                      % (exe, lib, ", ".join(needed)))
                return 1
        print("ok %s: SASS sm_%s, PTX compute_%s; NEEDED %s"
              % (exe, ",sm_".join(map(str, sass)), ",compute_".join(map(str, ptx)),
                 ", ".join(needed)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
