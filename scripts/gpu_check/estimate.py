#!/usr/bin/env python3
"""How long a gpu-check call's build takes on the GPU machine, from a CPU build's measured times.

    estimate.py BUILD_DIR [--cores 16] CALL=TARGET[,TARGET...] [CALL=...]

BUILD_DIR: a build configured as the GPU run configures (`gpu-check.sh run --no-gpu --targets ...`,
Release, one CUDA architecture) and built from cold (no compiler-cache hits), so that .ninja_log
holds each compile and link as it really took. For each call, over every edge its targets need
(`ninja -t inputs`, recursively, as logged):
  work      the sum of the edges' times (what one core would take),
  critical  the longest chain of edges that wait for each other (`ninja -t query` inputs),
  estimate  max(work / cores, critical): perfect sharing over the cores, but never less than the
            chain that cannot be shared. It assumes the GPU machine's cores are as fast as these.
"""
import argparse
import os
import subprocess
import sys


def ninja(build, *args):
    r = subprocess.run(["ninja", "-C", build, *args], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"estimate: ninja {' '.join(args)} failed: {r.stderr.strip()}")
    return r.stdout


def read_log(build):
    """output -> seconds, the last entry of each output (a rebuild supersedes the first build)."""
    path = os.path.join(build, ".ninja_log")
    times = {}
    with open(path) as fh:
        if not fh.readline().startswith("# ninja log"):
            sys.exit(f"estimate: {path} is not a ninja log")
        for line in fh:
            start, end, _mtime, out, _hash = line.rstrip("\n").split("\t")
            times[out] = (int(end) - int(start)) / 1000.0
    return times


def direct_inputs(build, out, cache):
    if out not in cache:
        ins, section = [], None
        for line in ninja(build, "-t", "query", out).splitlines():
            s = line.strip()
            if s.startswith(("input:", "outputs:")):
                section = s.split(":")[0]
            elif section == "input" and s and not s.startswith(("|", "||")):
                ins.append(s)
            elif section == "input" and s.startswith(("|", "||")):
                ins.append(s.lstrip("| "))
        cache[out] = ins
    return cache[out]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("build")
    ap.add_argument("--cores", type=int, default=16)
    ap.add_argument("calls", nargs="+", metavar="CALL=TARGETS")
    a = ap.parse_args()
    times = read_log(a.build)
    cache = {}
    for spec in a.calls:
        name, _, targets = spec.partition("=")
        needed, missing = set(), []
        for t in targets.split(","):
            ins = {l.strip() for l in ninja(a.build, "-t", "inputs", t).splitlines()}
            needed |= ins | {t}
            if t not in times and not ins & times.keys():
                missing.append(t)
        edges = {o: times[o] for o in needed if o in times}
        memo = {}  # output -> (seconds of the longest chain ending in it, that chain)

        def chain(out, depth=0):
            if out in memo:
                return memo[out]
            best = (0.0, [])
            if depth < 200:
                for i in direct_inputs(a.build, out, cache):
                    if i in needed or i in times:
                        best = max(best, chain(i, depth + 1), key=lambda c: c[0])
            memo[out] = (edges.get(out, 0.0) + best[0], best[1] + ([out] if out in edges else []))
            return memo[out]

        work = sum(edges.values())
        critical, path = max((chain(t) for t in targets.split(",")), key=lambda c: c[0], default=(0.0, []))
        estimate = max(work / a.cores, critical)
        top = sorted(edges.items(), key=lambda kv: -kv[1])[:4]
        print(f"{name}: {len(edges)} edges, work {work:.0f} s, critical path {critical:.0f} s, "
              f"work/{a.cores} {work / a.cores:.0f} s -> estimate {estimate:.0f} s")
        print("  longest edges: " + "; ".join(f"{os.path.basename(o)} {s:.1f} s" for o, s in top))
        print("  critical path: " + " -> ".join(f"{os.path.basename(o)} {edges[o]:.1f} s" for o in path))
        if missing:
            print(f"  not in the log (not built there?): {' '.join(missing)}")


if __name__ == "__main__":
    main()
