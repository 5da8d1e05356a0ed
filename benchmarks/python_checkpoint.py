#!/usr/bin/env python3
"""Checkpoints from Python, same process, same tensors: trainrt.checkpoint against torch.save and
PyTorch DCP (torch.distributed.checkpoint save and async_save). Launched by a PMIx launcher, one
process per rank (benchmarks/python_checkpoint.sh does it):

    mpirun --allow-run-as-root --oversubscribe -np 2 -x PYTHONPATH=build-torch/python \\
        /opt/train-runtime/bench-torch/bin/python benchmarks/python_checkpoint.py [--dir D] [--mib 1024] [--reps 3]

Each rank holds one float32 tensor of --mib MiB; the process group for DCP is
trainrt.torch.init_process_group("gloo"). Per repetition, alternating, every method saves the same
tensor into its own folder under --dir, then loads it back into the same tensor (the data is
checked after every load). Figures: the slowest rank's, median over repetitions.
  blocked     what the call kept the training loop from touching the tensor
  persisted   until the step is durable (trainrt: committed on every rank, fsynced; dcp.save and
              async_save: their files written and fsynced; torch.save: written, no fsync)
  restore     back into the tensor (trainrt verifies checksums as it reads; torch.load allocates
              a new tensor, copied in; dcp.load loads in place), from a cold page cache when run
              as root (--warm: no drop), since trainrt writes around the page cache (O_DIRECT)
Where torch has no DCP (Debian's 1.13: torch.distributed.checkpoint is missing) or no
async_save, its rows print n/a with the reason.
"""
import argparse
import os
import shutil
import statistics
import sys
import time

import torch
import torch.distributed as dist

import trainrt
import trainrt.checkpoint
import trainrt.torch

try:
    import torch.distributed.checkpoint as dcp
    DCP_MISSING = None if hasattr(dcp, "save") else f"torch {torch.__version__} has no dcp.save"
except Exception as e:  # 1.13: no module; its _shard prototype does not import on Python 3.11
    dcp, DCP_MISSING = None, f"torch {torch.__version__} has no torch.distributed.checkpoint ({type(e).__name__})"
ASYNC_MISSING = DCP_MISSING or (None if hasattr(dcp, "async_save") else f"torch {torch.__version__} has no async_save")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dir", default="/var/tmp/trainrt-pyckb")
    p.add_argument("--mib", type=int, default=1024, help="MiB per rank (default 1024)")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--warm", action="store_true", help="restores from the page cache (no drop_caches)")
    a = p.parse_args()
    world = trainrt.torch.init_process_group("gloo")
    rank, n = world.rank, world.world_size
    cold = not a.warm and os.geteuid() == 0
    base = os.path.join(a.dir, f"pyckb-{a.mib}")
    if rank == 0:
        shutil.rmtree(base, ignore_errors=True)
        os.makedirs(base)
    dist.barrier()

    numel = a.mib * (1 << 20) // 4
    key = f"state.rank{rank}"  # DCP takes a plain tensor under one name on every rank as replicated (saved once)
    t = torch.arange(numel, dtype=torch.float32) * (rank + 1) + 0.5
    want = (t[::4099].clone(), t.view(torch.int32).sum(dtype=torch.int64).item())

    def check(what):
        ok = torch.equal(t[::4099], want[0]) and t.view(torch.int32).sum(dtype=torch.int64).item() == want[1]
        if not ok:
            raise SystemExit(f"rank {rank}: {what} did not bring the data back")
        t.fill_(0)  # the next load must really write every byte

    def restore_data():
        t.copy_(torch.arange(numel, dtype=torch.float32) * (rank + 1) + 0.5)

    def slowest(seconds):
        x = torch.tensor([seconds], dtype=torch.float64)
        dist.all_reduce(x, op=dist.ReduceOp.MAX)
        return x.item()

    def drop_caches():
        dist.barrier()
        if cold and rank == 0:
            os.sync()
            with open("/proc/sys/vm/drop_caches", "w") as f:
                f.write("1\n")
        dist.barrier()

    def timed_load(fn, what):
        t.fill_(0)
        drop_caches()
        t0 = time.perf_counter()
        fn()
        s = slowest(time.perf_counter() - t0)
        check(what)
        restore_data()
        return s

    ckpt = trainrt.checkpoint.Manager(os.path.join(base, "trainrt"), keep_last=1)
    ckpt.register("state", t)
    fig = {}  # (method, figure) -> [seconds]
    add = lambda k, v: fig.setdefault(k, []).append(v)

    def run_trainrt(step):
        dist.barrier()
        t0 = time.perf_counter()
        ckpt.save(step, {"bench": "python_checkpoint"})
        blocked = time.perf_counter() - t0
        ckpt.wait()
        persisted = time.perf_counter() - t0
        return slowest(blocked), slowest(persisted)

    def run_torch_save(step):
        path = os.path.join(base, f"torch-{rank}.pt")
        dist.barrier()
        t0 = time.perf_counter()
        torch.save({"state": t}, path)
        s = slowest(time.perf_counter() - t0)
        return s, s

    def run_dcp(step, asynchronous):
        path = os.path.join(base, f"dcp{'-async' if asynchronous else ''}-{step}")
        dist.barrier()
        t0 = time.perf_counter()
        if asynchronous:
            fut = dcp.async_save({key: t}, checkpoint_id=path)
            blocked = time.perf_counter() - t0
            getattr(fut, "upload_completion", fut).result()
        else:
            dcp.save({key: t}, checkpoint_id=path)
            blocked = time.perf_counter() - t0
        persisted = time.perf_counter() - t0
        return slowest(blocked), slowest(persisted)

    def load_torch():
        t.copy_(torch.load(os.path.join(base, f"torch-{rank}.pt"))["state"])

    if rank == 0:
        print(f"# python_checkpoint: torch {torch.__version__}, trainrt {getattr(trainrt, '__version__', '?')}, "
              f"{n} ranks x {a.mib} MiB, {a.reps} reps, directory {a.dir}, restores from a "
              f"{'cold' if cold else 'warm'} page cache", flush=True)
    # Warm-up: first-call costs (staging allocation, DCP planning caches, imports) stay out.
    run_trainrt(1)
    if not DCP_MISSING:
        run_dcp(0, False)
    if not ASYNC_MISSING:
        run_dcp(0, True)
    for rep in range(a.reps):
        step = rep + 2
        b, e = run_trainrt(step); add(("trainrt", "blocked"), b); add(("trainrt", "persisted"), e)
        add(("trainrt", "restore"), timed_load(lambda: ckpt.restore() == step or sys.exit("restore: wrong step"), "trainrt restore"))
        b, e = run_torch_save(step); add(("torch.save", "blocked"), b); add(("torch.save", "persisted"), e)
        add(("torch.save", "restore"), timed_load(load_torch, "torch.load"))
        if not DCP_MISSING:
            b, e = run_dcp(step, False); add(("dcp.save", "blocked"), b); add(("dcp.save", "persisted"), e)
            path = os.path.join(base, f"dcp-{step}")
            add(("dcp.save", "restore"), timed_load(lambda: dcp.load({key: t}, checkpoint_id=path), "dcp.load"))
        if not ASYNC_MISSING:
            b, e = run_dcp(step, True); add(("dcp.async_save", "blocked"), b); add(("dcp.async_save", "persisted"), e)
        if rank == 0:  # the previous repetition's DCP/torch files: the disk stays at one copy each
            for d in os.listdir(base):
                if d.startswith("dcp") and not d.endswith(f"-{step}"):
                    shutil.rmtree(os.path.join(base, d), ignore_errors=True)
        dist.barrier()

    if rank == 0:
        report(fig, a.mib)
    dist.barrier()
    if rank == 0:
        shutil.rmtree(base, ignore_errors=True)
    trainrt.torch.destroy_process_group()
    return 0


def report(fig, mib):
    med = lambda m, k: statistics.median(fig[(m, k)]) * 1e3 if (m, k) in fig else None
    gbs = lambda ms: mib * (1 << 20) / 1e9 / (ms / 1e3)
    missing = {"dcp.save": DCP_MISSING, "dcp.async_save": ASYNC_MISSING}
    print(f"{'method':<16}{'blocked ms':>12}{'persisted ms':>14}{'GB/s/rank':>11}{'restore ms':>12}")
    for m in ("trainrt", "torch.save", "dcp.save", "dcp.async_save"):
        if missing.get(m):
            print(f"{m:<16}  n/a ({missing[m]})")
            continue
        r = med(m, "restore")
        print(f"{m:<16}{med(m, 'blocked'):>12.1f}{med(m, 'persisted'):>14.1f}{gbs(med(m, 'persisted')):>11.2f}"
              f"{(f'{r:.1f}' if r is not None else '-'):>12}")
    ours_b, ours_e, ours_r = med("trainrt", "blocked"), med("trainrt", "persisted"), med("trainrt", "restore")
    print("# ratios, > 1 favour trainrt (the same tensors, the same run)")
    for m, goal in (("torch.save", ""), ("dcp.save", ""), ("dcp.async_save", " (goal: >= 3x less blocking, >= 1.5x throughput)")):
        if missing.get(m):
            print(f"{m:<16}  n/a ({missing[m]})")
            continue
        line = (f"{m:<16}  blocking {med(m, 'blocked') / ours_b:6.1f}x less, end-to-end throughput "
                f"{med(m, 'persisted') / ours_e:5.2f}x")
        if med(m, "restore") is not None:
            line += f", restore {med(m, 'restore') / ours_r:5.2f}x as fast"
        print(line + goal)
    print("#pyckpt mib=%d " % mib + " ".join(f"{m}_{k}_ms={statistics.median(v) * 1e3:.2f}"
                                             for (m, k), v in sorted(fig.items())), flush=True)


if __name__ == "__main__":
    sys.exit(main())
