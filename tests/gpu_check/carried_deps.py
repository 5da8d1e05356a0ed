#!/usr/bin/env python3
"""Proves that a build made by `gpu-check.sh run` needed nothing beyond what gpu-check carries.

The GPU machine has a compiler, CMake, Ninja and the CUDA toolkit, and none of Debian's development
packages. So on this (Debian) machine every header the compiler read (Ninja's dependency log) and
every library the linker was given (link lines; -lNAME resolved as the compiler resolves it) must
come from one of:
  - the prefix the carried .debs were unpacked into,
  - the source tree or the build folder,
  - the CUDA toolkit (/usr/local/cuda*), part of that machine,
  - a Debian package of the compiler and C library itself (libc6-dev, libstdc++-12-dev, ...),
    which every machine with a compiler has under its own name.
Anything else (a header from /usr/include/fmt, say) means the build fell back to this machine's
packages, and the GPU machine would fail where this one passed: each such package is named.

Usage: carried_deps.py BUILD_DIR PREFIX [SOURCE_DIR]
Exit 0: complete; 1: the build used something not carried (each listed); 2: bad input.
"""
import os
import re
import shlex
import subprocess
import sys

MACHINE_PREFIXES = ("/usr/local/cuda",)
# The compiler, the C library and what they pull in: present wherever a compiler is installed.
TOOLCHAIN = re.compile(
    r"^(libc6|libc6-dev|libc-dev-bin|linux-libc-dev|libcrypt1|libcrypt-dev|libnsl-dev|libtirpc-dev|rpcsvc-proto|"
    r"libgcc-s1|libgcc-\d+-dev|libstdc\+\+6|libstdc\+\+-\d+-dev|gcc-\d+|g\+\+-\d+|cpp-\d+|gcc-\d+-base|"
    r"libgomp1|libatomic1|libquadmath0|libitm1|libasan\d+|liblsan0|libtsan\d+|libubsan1|libhwasan0|libcc1-0|"
    r"binutils|binutils-x86-64-linux-gnu|libbinutils)$")


def bad_input(msg):
    print(f"carried_deps: {msg}", file=sys.stderr)
    sys.exit(2)


def run(cmd):
    return subprocess.run(cmd, capture_output=True, text=True, errors="replace")


def headers(build):
    r = run(["ninja", "-C", build, "-t", "deps"])
    if r.returncode != 0:
        bad_input(f"`ninja -t deps` failed in {build}: {r.stderr.strip()}")
    return {l.strip() for l in r.stdout.splitlines() if l.strip().startswith("/")}


def libraries(build):
    libs, names = set(), set()
    with open(os.path.join(build, "build.ninja"), errors="replace") as fh:
        lines = [l.split("=", 1)[1] for l in fh if l.strip().startswith(("LINK_LIBRARIES =", "LINK_FLAGS ="))]
    for line in lines:
        try:
            toks = shlex.split(line)
        except ValueError:
            toks = line.split()
        for t in toks:
            for piece in t.split(","):
                if re.match(r"^/.*\.(so(\.[0-9]+)*|a)$", piece):
                    libs.add(piece)
            if t.startswith("-l") and len(t) > 2:
                names.add(t[2:])
    cxx = os.environ.get("CXX", "c++")
    for n in sorted(names):
        for suffix in (".so", ".a"):
            p = run([cxx, f"-print-file-name=lib{n}{suffix}"]).stdout.strip()
            if p.startswith("/"):
                libs.add(os.path.normpath(p))
                break
    return libs


def owners(paths):
    """path -> set of Debian packages, trying the path, its real path, and /lib <-> /usr/lib."""
    alts = {}
    for p in paths:
        c = [p, os.path.realpath(p)]
        for a in list(c):
            if a.startswith("/usr/lib/"):
                c.append(a[len("/usr"):])
            elif a.startswith("/lib/"):
                c.append("/usr" + a)
        alts[p] = list(dict.fromkeys(c))
    every = sorted({a for c in alts.values() for a in c})
    owned = {}
    for i in range(0, len(every), 400):
        for line in run(["dpkg-query", "-S", "--"] + every[i:i + 400]).stdout.splitlines():
            if line.startswith("diversion "):
                continue
            pkgs, _, path = line.partition(": ")
            owned.setdefault(path.strip(), set()).update(q.strip().split(":")[0] for q in pkgs.split(","))
    return {p: next((owned[a] for a in c if a in owned), set()) for p, c in alts.items()}


def main():
    if len(sys.argv) not in (3, 4):
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    build, prefix = (os.path.realpath(a) for a in sys.argv[1:3])
    source = os.path.realpath(sys.argv[3] if len(sys.argv) == 4 else os.path.join(os.path.dirname(__file__), "../.."))
    if not os.path.exists(os.path.join(build, "build.ninja")):
        bad_input(f"{build} is not a Ninja build folder")
    hdrs, libs = headers(build), libraries(build)
    if not hdrs:
        bad_input(f"no compiler dependency information in {build} (build something first)")
    from_prefix, own, cuda, outside = set(), set(), set(), set()
    for f in hdrs | libs:
        real = os.path.realpath(f)
        if any(x.startswith(prefix + "/") for x in (f, real)):
            from_prefix.add(f)
        elif any(x.startswith((build + "/", source + "/")) for x in (f, real)):
            own.add(f)
        elif f.startswith(MACHINE_PREFIXES) or real.startswith(MACHINE_PREFIXES):
            cuda.add(f)
        else:
            outside.add(f)
    owned = owners(outside)
    toolchain, bad, orphans = set(), {}, []
    for f in sorted(outside):
        pkgs = owned.get(f, set())
        if not pkgs:
            orphans.append(f)
        elif all(TOOLCHAIN.match(p) for p in pkgs):
            toolchain.add(f)
        else:
            for p in pkgs:
                bad.setdefault(p, f)
    print(f"carried_deps: {len(hdrs)} headers and {len(libs)} libraries: {len(from_prefix)} from the prefix, "
          f"{len(own)} from the tree, {len(cuda)} from the CUDA toolkit, {len(toolchain)} from the compiler and C library")
    for p, f in sorted(bad.items()):
        print(f"carried_deps: NOT CARRIED {p}: the build used {f}; the GPU machine has no {p}")
    for f in orphans:
        print(f"carried_deps: UNKNOWN {f}: no Debian package owns it and it is outside the prefix and the CUDA toolkit")
    if not from_prefix:
        print("carried_deps: nothing came from the prefix: the build did not use the carried packages at all")
    if bad or orphans or not from_prefix:
        sys.exit(1)
    print("carried_deps: OK, the carried packages are all this build needed beyond the compiler and CUDA")


if __name__ == "__main__":
    main()
