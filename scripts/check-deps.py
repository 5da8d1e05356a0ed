#!/usr/bin/env python3
"""Fails when the build used a Debian package that the project's install script does not install.

Every header the compiler read (Ninja's dependency log, or Makefiles' depend files) and every
library the linker was given (link lines, -lNAME resolved the way the compiler resolves it) is
mapped to its Debian package with `dpkg -S`. A package is accounted for when the install script
names it or when a named package depends on it (Depends/Pre-Depends, transitively: what apt-get
brings along). Files no package owns are accepted only from the machine's CUDA toolkit
(/usr/local/cuda*), which a machine of this kind carries and no Debian package provides, and from
the PyPI distributions scripts/python-env.sh pins into the project's venv (a file counts when that
distribution's RECORD lists it, in the venv the script makes).

Usage: check-deps.py [BUILD_DIR] [--drop PKG ...]
  --drop PKG   pretend the install script does not name PKG (to prove the check notices)
Exit 0: every package accounted for; 1: some are not (each named, with a file it provided);
2: bad input (no build folder, no dependency information).
"""
import argparse
import os
import re
import shlex
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
MACHINE_PREFIXES = ("/usr/local/cuda",)  # the CUDA toolkit: part of the machine, not a package


def pinned_pypi_files():
    """Every file the PyPI distributions pinned by scripts/python-env.sh installed into its venv."""
    script = open(os.path.join(HERE, "python-env.sh"), encoding="utf-8").read()
    m = re.search(r"^pins=\(([^)]*)\)", script, re.M)
    pins = dict(p.split("==", 1) for p in (m.group(1).split() if m else []) if "==" in p)
    venv = os.environ.get("TRAINRT_PYENV", "/opt/train-runtime/pyenv")
    files = set()
    for site in sorted(__import__("glob").glob(os.path.join(venv, "lib", "python3*", "site-packages"))):
        for name, version in pins.items():
            record = os.path.join(site, f"{name.replace('-', '_')}-{version}.dist-info", "RECORD")
            if not os.path.isfile(record):
                continue
            with open(record, encoding="utf-8", errors="replace") as r:
                for line in r:
                    rel = line.split(",", 1)[0]
                    if rel:
                        files.add(os.path.normpath(os.path.join(site, rel)))
    return files


def fail_input(msg):
    print(f"check-deps: {msg}", file=sys.stderr)
    sys.exit(2)


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, errors="replace", **kw)


def headers_used(build):
    paths = set()
    if os.path.exists(os.path.join(build, "build.ninja")):
        r = run(["ninja", "-C", build, "-t", "deps"])
        if r.returncode != 0:
            fail_input(f"`ninja -t deps` failed in {build}: {r.stderr.strip()}")
        for line in r.stdout.splitlines():
            line = line.strip()
            if line.startswith("/"):
                paths.add(line)
    for root, _, files in os.walk(build):
        for f in files:
            if f in ("compiler_depend.make", "depend.make") or f.endswith(".d"):
                with open(os.path.join(root, f), errors="replace") as fh:
                    for tok in re.findall(r"(/[^\s:\\]+)", fh.read()):
                        paths.add(tok)
    return {p for p in paths if p.startswith(("/usr/", "/opt/", "/lib"))}


def link_lines(build):
    lines = []
    ninja = os.path.join(build, "build.ninja")
    if os.path.exists(ninja):
        with open(ninja, errors="replace") as fh:
            lines += [l.split("=", 1)[1] for l in fh if l.strip().startswith("LINK_LIBRARIES =")]
    for root, _, files in os.walk(build):
        if "link.txt" in files:
            with open(os.path.join(root, "link.txt"), errors="replace") as fh:
                lines.append(fh.read())
    return lines


def libraries_used(build):
    libs, names = set(), set()
    for line in link_lines(build):
        try:
            toks = shlex.split(line)
        except ValueError:
            toks = line.split()
        for t in toks:
            for piece in t.split(","):  # -Wl,-rpath,... and friends
                if re.match(r"^/.*\.(so(\.[0-9]+)*|a)$", piece):
                    libs.add(piece)
            if t.startswith("-l") and len(t) > 2:
                names.add(t[2:])
    cxx = os.environ.get("CXX", "g++")
    for n in sorted(names):
        for suffix in (".so", ".a"):
            r = run([cxx, f"-print-file-name=lib{n}{suffix}"])
            p = r.stdout.strip()
            if r.returncode == 0 and p.startswith("/"):
                libs.add(os.path.normpath(p))
                break
    return {p for p in libs if not p.startswith(os.path.abspath(build))}


def owners(paths):
    """path -> set of packages, trying the path as given, then resolved, then /lib <-> /usr/lib."""
    result = {}
    candidates = {}
    for p in paths:
        alts = [p, os.path.realpath(p)]
        for a in list(alts):
            if a.startswith("/usr/lib/"):
                alts.append(a[len("/usr"):])
            elif a.startswith("/lib/"):
                alts.append("/usr" + a)
        candidates[p] = list(dict.fromkeys(alts))
    every = sorted({a for alts in candidates.values() for a in alts})
    owned = {}
    for i in range(0, len(every), 400):
        r = run(["dpkg-query", "-S", "--"] + every[i:i + 400])
        for line in r.stdout.splitlines():
            if line.startswith("diversion "):
                continue
            pkgs, _, path = line.partition(": ")
            owned.setdefault(path.strip(), set()).update(
                q.strip().split(":")[0] for q in pkgs.split(","))
    for p, alts in candidates.items():
        for a in alts:
            if a in owned:
                result[p] = owned[a]
                break
    return result


def named_packages(drop):
    r = run(["bash", os.path.join(HERE, "install-deps.sh"), "--list"])
    if r.returncode != 0:
        fail_input(f"scripts/install-deps.sh --list failed: {r.stderr.strip()}")
    return [p for p in r.stdout.split() if p not in drop]


def installed_dependency_closure(roots):
    r = run(["dpkg-query", "-W", "-f=${Package}\t${Provides}\t${Pre-Depends}, ${Depends}\n"])
    deps, provides = {}, {}
    for line in r.stdout.splitlines():
        name, prov, dep = (line.split("\t") + ["", ""])[:3]
        deps[name] = dep
        for v in prov.split(","):
            v = v.strip().split(" ")[0]
            if v:
                provides.setdefault(v, set()).add(name)
    seen, todo = set(), list(roots)
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        for alt_group in deps.get(p, "").split(","):
            for alt in alt_group.split("|"):
                n = alt.strip().split(" ")[0].split(":")[0]
                if not n:
                    continue
                for real in ({n} if n in deps else set()) | provides.get(n, set()):
                    todo.append(real)
    return seen


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("build", nargs="?", default="build")
    ap.add_argument("--drop", action="append", default=[], metavar="PKG")
    a = ap.parse_args()
    if not os.path.isdir(a.build):
        fail_input(f"build folder '{a.build}' does not exist (build first)")
    headers, libs = headers_used(a.build), libraries_used(a.build)
    if not headers:
        fail_input(f"no compiler dependency information in '{a.build}' (build it first)")
    files = headers | libs
    own = owners(files)
    named = named_packages(set(a.drop))
    allowed = installed_dependency_closure(named)
    missing, orphans = {}, []
    pypi = pinned_pypi_files()
    for f in sorted(files):
        pkgs = own.get(f)
        if not pkgs:
            if not f.startswith(MACHINE_PREFIXES) and f not in pypi:
                orphans.append(f)
            continue
        if not pkgs & allowed:
            for p in pkgs:
                missing.setdefault(p, f)
    print(f"check-deps: {len(headers)} headers and {len(libs)} libraries of {a.build}; "
          f"{len({p for s in own.values() for p in s})} Debian packages, {len(named)} named by "
          f"scripts/install-deps.sh ({len(allowed)} with what they pull in)")
    for p, f in sorted(missing.items()):
        print(f"check-deps: MISSING {p}: the build used {f}, but scripts/install-deps.sh does not install {p}")
    for f in orphans:
        print(f"check-deps: UNKNOWN {f}: no Debian package owns it, it is not part of the CUDA toolkit, "
              f"and no distribution pinned by scripts/python-env.sh installed it")
    if missing or orphans:
        sys.exit(1)
    print("check-deps: OK, a fresh machine gets every package this build used")


if __name__ == "__main__":
    main()
