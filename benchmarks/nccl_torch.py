#!/usr/bin/env python3
"""The PyTorch peer of `nccl-bench` (benchmarks/programs/nccl_bench.cpp): torch.distributed over NCCL,
the same measurements, the same sizes, the same columns; with --runtime-log (nccl-bench's output
from the same machine) it prints the runtime's time beside each row and the ratio runtime/torch.

    python3 -u benchmarks/nccl_torch.py [-b 8] [-e 1G] [-f 8] [-n 20] [-w 5] [-r 5]
        [-t allreduce,reduce_scatter,allgather,broadcast,barrier] [-d f32,bf16] [-m blocking,async]
        [--init-only] [--corrupt] [--runtime-log nccl-bench.log]

(a) Time to a ready communicator, host wall clock (time.perf_counter), after `import torch`:
    cuda_context = torch.cuda.set_device + torch.cuda.synchronize (torch's lazy CUDA init and the
    context); cold_init = the store (HashStore at world 1, TCPStore on MASTER_ADDR:MASTER_PORT,
    default 127.0.0.1:29517, otherwise) + init_process_group("nccl", device_id=...), which creates
    the NCCL communicator eagerly; cold_first_op = the first 1-element f32 all_reduce + stream sync.
    Then -r times warm: destroy_process_group, init_process_group again (PrefixStore over the same
    TCPStore, or a new HashStore) + first all_reduce; medians.
(b) Each row as nccl-bench's: blocking = the op, then the current stream synchronized on the host
    (the runtime's blocking calls wait on the host); async = async_op=True for all, every work
    waited, then torch.cuda.synchronize(). all_reduce and broadcast run in place,
    reduce_scatter_tensor and all_gather_into_tensor out of place. Every result is checked after
    timing, bit for bit, against a reference built on the host (in-place all_reduce at world > 1:
    refilled and run once more first).
Ranks: world 1 needs no launcher; more ranks from RANK/WORLD_SIZE, OMPI_COMM_WORLD_* or SLURM_*
(device local_rank % device count). Exit: 0 all right, 1 a wrong element or an error, 2 bad
arguments, 77 without torch, a CUDA device or torch's NCCL ("# no ...: ... not measured").
"""
import argparse
import os
import statistics
import sys
import time

OPS = ["allreduce", "reduce_scatter", "allgather", "broadcast", "barrier"]


def size(s):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    v = int(float(s[:-1]) * units[s[-1]]) if s[-1] in units else int(s)
    if v < 1 or v > 16 << 30:
        raise argparse.ArgumentTypeError(f"bad size '{s}' (1 B .. 16G)")
    return v


def csv_of(choices):
    def parse(s):
        items = s.split(",")
        for x in items:
            if x not in choices:
                raise argparse.ArgumentTypeError(f"'{x}' is none of {','.join(choices)}")
        return items
    return parse


def env_int(names, default):
    for n in names:
        if os.environ.get(n):
            return int(os.environ[n])
    return default


def read_runtime_log(path):
    """nccl-bench's 'init KEY MS' lines and table rows, keyed (op, dtype, mode, bytes)."""
    inits, rows = {}, {}
    with open(path, errors="replace") as f:
        for line in f:
            w = line.split()
            if len(w) >= 3 and w[0] == "init":
                inits[w[1]] = float(w[2])
            elif len(w) == 9 and w[0] in OPS:
                rows[(w[0], w[1], w[2], int(w[3]))] = float(w[5])
    return inits, rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-b", type=size, default=8)
    ap.add_argument("-e", type=size, default=1 << 30)
    ap.add_argument("-f", type=int, default=8)
    ap.add_argument("-n", type=int, default=20)
    ap.add_argument("-w", type=int, default=5)
    ap.add_argument("-r", type=int, default=5)
    ap.add_argument("-t", type=csv_of(OPS), default=OPS)
    ap.add_argument("-d", type=csv_of(["f32", "bf16"]), default=["f32", "bf16"])
    ap.add_argument("-m", type=csv_of(["blocking", "async"]), default=["blocking", "async"])
    ap.add_argument("--init-only", action="store_true")
    ap.add_argument("--corrupt", action="store_true", help="flip one element read back: must exit 1")
    ap.add_argument("--runtime-log", help="nccl-bench's output from the same machine, for the ratios")
    a = ap.parse_args()
    if a.b > a.e or a.f < 2 or a.n < 1 or a.w < 0 or a.r < 0:
        ap.error("need -b <= -e, -f >= 2, -n >= 1, -w >= 0, -r >= 0")
    try:
        rt_init, rt_rows = read_runtime_log(a.runtime_log) if a.runtime_log else ({}, {})
    except OSError as e:
        ap.error(f"--runtime-log {a.runtime_log}: {e.strerror}")

    try:
        import torch
        import torch.distributed as dist
    except ImportError as e:
        print(f"# no torch: {e}; torch.distributed NCCL peer not measured")
        return 77
    if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
        print(f"# no CUDA device: torch {torch.__version__} sees none; torch.distributed NCCL peer not measured")
        return 77
    if not dist.is_available() or not dist.is_nccl_available():
        print(f"# no NCCL in torch: torch {torch.__version__} has no NCCL backend; not measured")
        return 77

    rank = env_int(["RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"], 0)
    world = env_int(["WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_STEP_NUM_TASKS"], 1)
    local = env_int(["LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"], 0)
    dev_index = local % torch.cuda.device_count()

    # (a) The CUDA context first and alone.
    t0 = time.perf_counter()
    torch.cuda.set_device(dev_index)
    torch.cuda.synchronize()
    ctx_ms = (time.perf_counter() - t0) * 1e3
    dev = torch.device("cuda", dev_index)
    one = torch.zeros(1, device=dev)
    torch.cuda.synchronize()

    base = {}

    def make_store(k):
        if world == 1:
            return dist.HashStore()
        if "tcp" not in base:
            base["tcp"] = dist.TCPStore(os.environ.get("MASTER_ADDR", "127.0.0.1"),
                                        int(os.environ.get("MASTER_PORT", "29517")), world, rank == 0)
        return dist.PrefixStore(f"nccl_torch_{k}", base["tcp"])

    def bring_up(k):
        t0 = time.perf_counter()
        dist.init_process_group("nccl", store=make_store(k), rank=rank, world_size=world, device_id=dev)
        t1 = time.perf_counter()
        dist.all_reduce(one)
        torch.cuda.current_stream().synchronize()
        return (t1 - t0) * 1e3, (time.perf_counter() - t1) * 1e3

    cold_init, cold_first = bring_up(0)
    warm = []
    for k in range(a.r):
        dist.destroy_process_group()
        warm.append(bring_up(k + 1))

    def slowest(x):
        if world == 1:
            return x
        t = torch.tensor([x], dtype=torch.float64, device=dev)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return t.item()

    def summed(x):
        if world == 1:
            return x
        t = torch.tensor([x], dtype=torch.int64, device=dev)
        dist.all_reduce(t)
        return int(t.item())

    mine = {"cuda_context_ms": ctx_ms, "cold_init_ms": cold_init, "cold_first_op_ms": cold_first,
            "cold_total_ms": cold_init + cold_first}
    if warm:
        mine["warm_init_ms"] = statistics.median(w[0] for w in warm)
        mine["warm_first_op_ms"] = statistics.median(w[1] for w in warm)
        mine["warm_total_ms"] = statistics.median(w[0] + w[1] for w in warm)
    inits = {k: slowest(v) for k, v in mine.items()}
    say = print if rank == 0 else (lambda *x, **y: None)
    say(f"# nccl_torch: torch {torch.__version__} NCCL {'.'.join(map(str, torch.cuda.nccl.version()))} on "
        f"{torch.cuda.get_device_name(dev)} ({world} ranks, rank 0 on device {dev_index} of {torch.cuda.device_count()})")
    if world == 1:
        say("# world 1: NCCL's collectives are local copies on one GPU (nothing crosses NVLink or a network);\n"
            "# busbw is 0 by definition for allreduce/reduce_scatter/allgather at world 1: read algbw.\n"
            "# In-place ops (allreduce, broadcast) may move no data at all at world 1: their time is the call's.")
    say("# (a) time to a ready NCCL communicator, host wall clock, ms (slowest rank); ratio = runtime / torch")
    for k, v in inits.items():
        r = f"  runtime {rt_init[k]:.3f}  ratio {rt_init[k] / v:.3f}" if k in rt_init and v > 0 else ""
        say(f"init {k} {v:.3f}{r}")
    if a.init_only:
        dist.destroy_process_group()
        return 0

    # (b) Collectives.
    sizes, z = [], float(a.b)
    while z <= a.e * 1.0000001:
        sizes.append(int(z))
        z *= a.f
    top = sizes[-1]
    inb = torch.empty(top, dtype=torch.uint8, device=dev)
    outb = torch.empty(top, dtype=torch.uint8, device=dev)
    types = {"f32": (torch.float32, torch.int32, 4), "bf16": (torch.bfloat16, torch.int16, 2)}
    period = lambda r: [float((j + 3 * r) % 9 - 4) for j in range(9)]  # as nccl-bench's value()
    sum_period = [sum(period(r)[j] for r in range(world)) for j in range(9)]

    def host_pattern(p, count, phase, dt):
        b = torch.tensor([p[(phase + j) % 9] for j in range(9)], dtype=torch.float32)
        return b.repeat((count + 8) // 9)[:count].to(dt)

    state = {"results": 0, "wrong": 0, "corrupted": False}
    say("# (b) collectives through torch.distributed (sum; broadcast src 0); time per op: host wall clock between syncs")
    head = f"{'# collective':<15} {'dtype':<5} {'mode':<8} {'size(B)':>11} {'count':>11} {'time(us)':>11} {'algbw(GB/s)':>11} {'busbw(GB/s)':>11} {'#wrong':>7}"
    say(head + (f" {'rt(us)':>11} {'rt/torch':>8}" if rt_rows else ""))

    def row(op, tname, asyn, nbytes):
        dt, bits, es = types[tname]
        block = op in ("reduce_scatter", "allgather")
        count = 0 if op == "barrier" else nbytes // (es * world) if block else nbytes // es
        if op != "barrier" and count == 0:
            return
        nb = count * es * (world if block else 1)
        x = outb[:count * es * (world if op == "allgather" else 1)].view(dt)
        src = inb[:count * es * (world if op == "reduce_scatter" else 1)].view(dt)

        def prepare():
            if op == "allreduce":
                x.copy_(host_pattern(period(rank), count, 0, dt))
            elif op == "reduce_scatter":
                src.copy_(host_pattern(period(rank), world * count, 0, dt))
                x.view(torch.uint8).fill_(0xff)
            elif op == "allgather":
                src.copy_(host_pattern(period(rank), count, 0, dt))
                x.view(torch.uint8).fill_(0xff)
            elif op == "broadcast":
                x.copy_(host_pattern(period(0) if rank == 0 else [100.0] * 9, count, 0, dt))
            torch.cuda.synchronize()

        def issue(asyn):
            if op == "allreduce":
                return dist.all_reduce(x, async_op=asyn)
            if op == "reduce_scatter":
                return dist.reduce_scatter_tensor(x, src, async_op=asyn)
            if op == "allgather":
                return dist.all_gather_into_tensor(x, src, async_op=asyn)
            if op == "broadcast":
                return dist.broadcast(x, 0, async_op=asyn)
            return dist.barrier(async_op=asyn)

        iters = min(a.n, max(5, (4 << 30) // max(nb, 1)))
        warmup = min(a.w, 2) if nb >= 256 << 20 else a.w
        prepare()
        for _ in range(warmup):
            w = issue(asyn)
            if w is not None:
                w.wait()
        torch.cuda.synchronize()
        stream = torch.cuda.current_stream()
        t0 = time.perf_counter()
        if not asyn:
            for _ in range(iters):
                issue(False)
                stream.synchronize()
        else:
            works = [issue(True) for _ in range(iters)]
            for w in works:
                w.wait()
        torch.cuda.synchronize()
        sec = slowest((time.perf_counter() - t0) / iters)
        bad = 0
        if op != "barrier":
            if op == "allreduce" and world > 1:  # in place: the timed loop summed sums
                prepare()
                issue(False)
            got = x.cpu()
            if a.corrupt and not state["corrupted"]:
                got.view(torch.uint8)[0] ^= 0x40
                state["corrupted"] = True
            if op == "allgather":
                want = torch.cat([host_pattern(period(r), count, 0, dt) for r in range(world)])
            elif op == "allreduce":
                want = host_pattern(sum_period, count, 0, dt)
            elif op == "reduce_scatter":
                want = host_pattern(sum_period, count, (rank * count) % 9, dt)
            else:
                want = host_pattern(period(0), count, 0, dt)
            bad = int((got.view(bits) != want.view(bits)).sum())
        bad = summed(bad)
        state["results"] += 1
        state["wrong"] += bad
        algbw = nb / sec / 1e9
        factor = 2 * (world - 1) / world if op == "allreduce" else (world - 1) / world if block else 1.0
        mode = "async" if asyn else "blocking"
        if op == "barrier":
            line = f"{op:<15} {'-':<5} {mode:<8} {0:>11} {0:>11} {sec * 1e6:>11.2f} {'-':>11} {'-':>11} {bad:>7}"
            key = (op, "-", mode, 0)
        else:
            line = (f"{op:<15} {tname:<5} {mode:<8} {nb:>11} {count:>11} {sec * 1e6:>11.2f} {algbw:>11.2f} "
                    f"{algbw * factor:>11.2f} {bad:>7}")
            key = (op, tname, mode, nb)
        if key in rt_rows:
            line += f" {rt_rows[key]:>11.2f} {rt_rows[key] / (sec * 1e6):>8.3f}"
        say(line)

    for op in a.t:
        for m in a.m:
            if op == "barrier":
                row(op, "f32", m == "async", 0)
                continue
            for t in a.d:
                for nb in sizes:
                    row(op, t, m == "async", nb)
    ok = state["wrong"] == 0
    say(f"# checked: {state['results']} results, {state['wrong']} wrong elements: {'OK' if ok else 'FAIL'}")
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except SystemExit:
        raise
    except Exception as e:  # any CUDA/NCCL/torch error is a failure, never a skip
        print(f"nccl_torch: error: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)
