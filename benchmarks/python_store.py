#!/usr/bin/env python3
"""World-ready time of a PyTorch process group: trainrt.torch.init_process_group (rendezvous over
the PMIx session, rank 0's store on a kernel-assigned port) against init_process_group("gloo",
init_method="env://") with MASTER_ADDR/MASTER_PORT set by this script, side by side, one node.

    python3 benchmarks/python_store.py [--pythonpath build-torch/python] [--sizes 2 4 8 16 32 64]
                                       [--reps 3] [--budget 600]

Both are launched by the same `mpirun --oversubscribe -np N` (Open MPI is the PMIx server
trainrt.init() talks to; env:// takes rank and size from Open MPI's variables). Each rank imports
torch (and trainrt) first, untimed, then waits at a file barrier in /dev/shm until every rank has
imported; the clock starts when the barrier opens. World-ready: from the earliest rank leaving the
barrier until the last rank has finished init_process_group and a first one-element allreduce
(trainrt's includes trainrt.init(), its PMIx connection). Methods alternate A B A B per size;
the median over --reps is printed (a start that failed is shown as
"failed" with its error and left out of the median). Sizes stop once --budget seconds are spent.
"""
import argparse
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

PY = "/usr/bin/python3"  # Debian's, with torch


def worker(method, sync_dir):
    rank, n = int(os.environ["OMPI_COMM_WORLD_RANK"]), int(os.environ["OMPI_COMM_WORLD_SIZE"])
    import torch
    import torch.distributed as dist
    if method == "trainrt":
        import trainrt.torch
    open(os.path.join(sync_dir, str(rank)), "w").close()
    while len(os.listdir(sync_dir)) < n:  # every rank has paid its imports
        time.sleep(0.002)
    t0 = time.time()
    if method == "trainrt":
        trainrt.torch.init_process_group("gloo")
    else:
        dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=n)
    x = torch.ones(1)
    dist.all_reduce(x)
    t1 = time.time()
    assert x.item() == n, x
    print(f"#ready rank={rank} t0={t0:.6f} t1={t1:.6f}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(method, n, pythonpath, timeout):
    """One mpirun of N ranks; returns the world-ready seconds, or raises with the output's tail."""
    sync_dir = tempfile.mkdtemp(prefix="trainrt-store-", dir="/dev/shm")
    env = dict(os.environ, PYTHONPATH=pythonpath, OMP_NUM_THREADS="1")
    env.pop("MASTER_ADDR", None), env.pop("MASTER_PORT", None)
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(n), "-x", "PYTHONPATH", "-x", "OMP_NUM_THREADS"]
    if method == "env":
        env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
        cmd += ["-x", "MASTER_ADDR", "-x", "MASTER_PORT"]
    cmd += [PY, os.path.abspath(__file__), "--worker", method, sync_dir]
    try:
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    finally:
        shutil.rmtree(sync_dir, ignore_errors=True)
    # Ranks' lines can arrive glued together through mpirun's forwarding: match, don't split lines.
    rows = re.findall(r"#ready rank=(\d+) t0=([\d.]+) t1=([\d.]+)", out.stdout)
    if out.returncode != 0 or len(rows) != n:
        raise RuntimeError(f"{method} at {n} ranks: exit {out.returncode}, {len(rows)} ranks ready\n"
                           + (out.stdout + out.stderr)[-1500:])
    return max(float(r[2]) for r in rows) - min(float(r[1]) for r in rows)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--worker", nargs=2, metavar=("METHOD", "SYNC_DIR"), help=argparse.SUPPRESS)
    p.add_argument("--pythonpath", default=os.environ.get("TRAINRT_PYTHON_PATH",
                                                          os.path.join(os.path.dirname(__file__), "..", "build", "python")),
                   help="folder holding the built trainrt package (default $TRAINRT_PYTHON_PATH or build/python)")
    p.add_argument("--sizes", type=int, nargs="+", default=[2, 4, 8, 16, 32, 64])
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--budget", type=float, default=600, help="stop starting new sizes after this many seconds")
    a = p.parse_args()
    if a.worker:
        return worker(*a.worker)
    pythonpath = os.path.abspath(a.pythonpath)
    cores = os.cpu_count()
    ver = subprocess.run([PY, "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True).stdout.strip()
    print(f"# world-ready time, trainrt.torch.init_process_group vs init_process_group(env://), gloo, torch {ver}, "
          f"one node with {cores} cores (ranks beyond {cores} oversubscribe them), median of {a.reps}")
    print(f"{'ranks':>6}{'trainrt ms':>12}{'env:// ms':>11}{'ratio':>8}   all trainrt / env:// (ms)")
    start = time.monotonic()
    for n in a.sizes:
        if time.monotonic() - start > a.budget:
            print(f"# stopped before {n} ranks: the {a.budget:.0f} s budget is spent")
            break
        runs = {"trainrt": [], "env": []}
        for _ in range(a.reps):
            for method in runs:
                try:
                    runs[method].append(launch(method, n, pythonpath, 600) * 1e3)
                except RuntimeError as e:  # counted and shown, not hidden: a failed start is a result
                    runs[method].append(None)
                    last = [l for l in str(e).splitlines() if "Error" in l][-1:] or str(e).splitlines()[:1]
                    print(f"# {str(e).splitlines()[0]}: {last[0].strip()[:200]}", flush=True)
        ok = {m: [x for x in v if x is not None] for m, v in runs.items()}
        med = {m: statistics.median(v) if v else float("nan") for m, v in ok.items()}
        show = lambda v: " ".join("failed" if x is None else f"{x:.0f}" for x in v)
        print(f"{n:>6}{med['trainrt']:>12.1f}{med['env']:>11.1f}{med['env'] / med['trainrt']:>7.2f}x   "
              f"{show(runs['trainrt'])} / {show(runs['env'])}", flush=True)
    print(f"# total {time.monotonic() - start:.0f} s; ratio > 1: trainrt ready sooner")
    return 0


if __name__ == "__main__":
    sys.exit(main())
