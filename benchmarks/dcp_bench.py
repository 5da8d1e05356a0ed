"""dcp.save / dcp.async_save / dcp.load with PyTorch's FileSystemWriter/Reader against the same
calls with trainrt.dcp.Writer/Reader: the same state (DTensors sharded over the ranks, so every
rank writes its own bytes) in the same run, alternating A B B A per repetition.

Run by benchmarks/dcp_bench.sh under mpirun (a rank's program). Per repetition and backend:
  save        dcp.save's time (max over ranks). It returns durable: FileSystemWriter fsyncs every
              file it writes (sync_files=True, its default) but no directory; trainrt fsyncs its
              shards, the step directory and the checkpoint directory. "save+dirsync" adds the two
              directory fsyncs to FileSystemWriter's number, for equal durability.
  async       async_save's blocking time (staging into CPU memory) and the time until its future
              is done (durably committed, as above).
  load warm   dcp.load with the files in the page cache; trainrt's includes checking every
              entry's XXH3 as it reads.
  load cold   the same after `echo 3 > /proc/sys/vm/drop_caches` (needs root; else not run).
Prints one JSON object per measurement (rank 0), then a table."""
import argparse
import json
import os
import shutil
import statistics
import sys
import time
import warnings

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Shard

import trainrt.dcp
import trainrt.torch


def timed(fn):
    """fn() between barriers; the slowest rank's seconds."""
    dist.barrier()
    t0 = time.perf_counter()
    r = fn()
    t = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item(), r


def async_timed(call):
    """async_save's blocking time and its time to the future's completion, slowest rank each. No
    collective runs in this thread meanwhile: the save's own run in DCP's thread."""
    dist.barrier()
    t0 = time.perf_counter()
    fut = call()
    blocking = time.perf_counter() - t0
    fut.result()
    t = torch.tensor([blocking, time.perf_counter() - t0], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t[0].item(), t[1].item()


def drop_caches(rank):
    ok = torch.tensor([0])
    if rank == 0:
        try:
            os.sync()
            with open("/proc/sys/vm/drop_caches", "w") as f:
                f.write("3\n")
            ok[0] = 1
        except OSError:
            pass
    dist.broadcast(ok, 0)
    return bool(ok.item())


def fsync_dir(path):
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--mib-per-rank", type=int, default=1024)
    ap.add_argument("--tensors", type=int, default=16, help="tensors the state of a rank is split into")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--no-cold", action="store_true")
    a = ap.parse_args()
    warnings.filterwarnings("ignore")
    trainrt.torch.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cpu", (world,))
    cols = 4096
    rows = a.mib_per_rank * (1 << 20) // 4 // cols // a.tensors
    g = torch.Generator().manual_seed(rank)
    state = {f"layer{i}.weight": DTensor.from_local(torch.rand(rows, cols, generator=g), mesh, [Shard(0)])
             for i in range(a.tensors)}
    nbytes = sum(t.to_local().numel() * 4 for t in state.values())
    probe = {k: v.to_local().sum().item() for k, v in list(state.items())[:2]}
    fs_root, tr_root = os.path.join(a.dir, "fs"), os.path.join(a.dir, "trainrt")
    tr_async = trainrt.dcp.Writer(tr_root, keep_last=1, verbose=False)  # its staging buffers persist
    # async_save's collectives run in DCP's thread: on a group of their own, as torchtitan does.
    async_pg = dist.new_group(backend="gloo")
    results = []

    def record(backend, what, seconds, rep):
        row = {"ranks": world, "mib_per_rank": nbytes >> 20, "backend": backend, "what": what, "rep": rep,
               "seconds": round(seconds, 3)}
        results.append(row)
        if rank == 0:
            print(json.dumps(row), flush=True)

    def check_loaded():
        got = {k: state[k].to_local().sum().item() for k in probe}
        if got != probe:
            raise SystemExit(f"rank {rank}: the loaded state differs from the saved one: {got} vs {probe}")

    def scramble():
        for t in state.values():
            t.to_local().zero_()

    step = [0]

    def run(backend, rep):
        step[0] += 1
        s = step[0]
        if backend == "fs":
            path = os.path.join(fs_root, f"step-{s}")
            t, _ = timed(lambda: dcp.save(state, storage_writer=dcp.FileSystemWriter(path)))
            record(backend, "save", t, rep)
            t2, _ = timed(lambda: rank == 0 and (fsync_dir(path), fsync_dir(fs_root)))
            record(backend, "save+dirsync", t + t2, rep)
            apath = os.path.join(fs_root, f"step-{s}a")
            tb, tc = async_timed(lambda: dcp.async_save(state, storage_writer=dcp.FileSystemWriter(apath),
                                                        process_group=async_pg))
            record(backend, "async blocking", tb, rep)
            record(backend, "async durable", tc, rep)
            reader = lambda: dcp.FileSystemReader(apath)  # noqa: E731
        else:
            t, _ = timed(lambda: dcp.save(state, storage_writer=trainrt.dcp.Writer(tr_root, keep_last=1, verbose=False)))
            record(backend, "save", t, rep)
            record(backend, "save+dirsync", t, rep)  # its save already syncs both directories
            tb, tc = async_timed(lambda: dcp.async_save(state, storage_writer=tr_async, process_group=async_pg))
            record(backend, "async blocking", tb, rep)
            record(backend, "async durable", tc, rep)
            reader = lambda: trainrt.dcp.Reader(tr_root, verbose=False)  # noqa: E731
        scramble()
        t, _ = timed(lambda: dcp.load(state, storage_reader=reader()))
        check_loaded()
        record(backend, "load warm", t, rep)
        if not a.no_cold and drop_caches(rank):
            scramble()
            t, _ = timed(lambda: dcp.load(state, storage_reader=reader()))
            check_loaded()
            record(backend, "load cold", t, rep)
        dist.barrier()
        if rank == 0 and backend == "fs":  # FileSystemWriter keeps every step: keep the disk from filling
            for d in os.listdir(fs_root):
                shutil.rmtree(os.path.join(fs_root, d))
        dist.barrier()

    for rep in range(a.reps):
        for backend in (("fs", "trainrt") if rep % 2 == 0 else ("trainrt", "fs")):
            run(backend, rep)
    if rank == 0:
        print(f"\n{world} ranks, {nbytes / (1 << 20):.0f} MiB per rank ({a.tensors} tensors), median of {a.reps} "
              f"(seconds; max over ranks)")
        whats = ["save", "save+dirsync", "async blocking", "async durable", "load warm", "load cold"]
        print(f"{'':16}{'FileSystem':>12}{'trainrt':>12}{'ratio':>8}")
        for w in whats:
            med = {}
            for b in ("fs", "trainrt"):
                v = [r["seconds"] for r in results if r["backend"] == b and r["what"] == w]
                med[b] = statistics.median(v) if v else None
            if med["fs"] is None:
                continue
            print(f"{w:16}{med['fs']:12.3f}{med['trainrt']:12.3f}{med['trainrt'] / med['fs']:8.2f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
