#!/usr/bin/env python3
"""PyTorch's checkpoint costs for the same state as ckpt-bench: 2 ranks over gloo, one float32
tensor of MiB per rank, on the same filesystem. Run by benchmarks/checkpoint_vs_torch.sh:

    PY -m torch.distributed.run --nproc_per_node 2 benchmarks/ckpt_torch.py DIR [MiB ...]

Per size, median of 3 (slowest rank each time):
  torch.save      time the caller is blocked (each rank its own file; torch.save does not fsync)
  dcp.save        torch.distributed.checkpoint.save: blocks for the whole save (fsyncs its files)
  dcp.async_save  time until it returns (the stall), and until its future completes (persisted)
Prints human lines and one "#torch" line per size for the wrapper.

Device mode (the peer of benchmarks/ckpt-device-bench, same tensors on the GPU):

    PY benchmarks/ckpt_torch.py --device cuda [--dir DIR] [--tensors 16] [--reps N] [MiB ...=1024 8192]

One process in a one-rank gloo process group (async_save needs a CPU backend; nothing crosses
ranks). Exit 77 without a CUDA device; see ckpt_torch_device.py.
"""
import os, shutil, statistics, sys, time


def main():
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    base = sys.argv[1]
    sizes = [int(x) for x in sys.argv[2:]] or [256, 1024]
    os.makedirs(base, exist_ok=True)

    def slowest(seconds):
        t = torch.tensor([seconds], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return t.item()

    def timed(fn):
        dist.barrier()
        t0 = time.perf_counter()
        out = fn()
        return slowest(time.perf_counter() - t0), out

    if rank == 0:
        print(f"# torch {torch.__version__}: torch.save, dcp.save, dcp.async_save; {world} ranks (gloo), directory {base}")
    for mib in sizes:
        state = {"state": torch.arange(mib * (1 << 20) // 4, dtype=torch.float32) * (rank + 1)}
        d = os.path.join(base, f"torch-{mib}")
        if rank == 0:
            shutil.rmtree(d, ignore_errors=True)
            os.makedirs(d)
        dist.barrier()
        save_s, dcp_s, async_block_s, async_total_s = [], [], [], []
        dcp.save(state, checkpoint_id=os.path.join(d, "warmup"))  # planning caches, first-call costs
        for rep in range(3):
            path = os.path.join(d, f"t{rank}-{rep}.pt")
            save_s.append(timed(lambda: torch.save(state, path))[0])
            dcp_s.append(timed(lambda: dcp.save(state, checkpoint_id=os.path.join(d, f"dcp-{rep}")))[0])
            dist.barrier()
            t0 = time.perf_counter()
            fut = dcp.async_save(state, checkpoint_id=os.path.join(d, f"async-{rep}"))
            blocked = time.perf_counter() - t0
            done = getattr(fut, "upload_completion", fut)  # AsyncSaveResponse in newer releases
            done.result()
            async_block_s.append(slowest(blocked))
            async_total_s.append(slowest(time.perf_counter() - t0))
        med = lambda xs: statistics.median(xs) * 1e3
        gbs = lambda ms: mib * (1 << 20) / 1e9 / (ms / 1e3)
        if rank == 0:
            print(f"{mib:>5} MiB/rank  torch.save blocks {med(save_s):8.1f} ms (no fsync)")
            print(f"{mib:>5} MiB/rank  dcp.save blocks {med(dcp_s):8.1f} ms ({gbs(med(dcp_s)):.2f} GB/s/rank persisted)")
            print(f"{mib:>5} MiB/rank  dcp.async_save blocks {med(async_block_s):8.1f} ms, persisted after "
                  f"{med(async_total_s):.1f} ms ({gbs(med(async_total_s)):.2f} GB/s/rank)")
            print(f"#torch mib={mib} torch_save_ms={med(save_s):.2f} dcp_save_ms={med(dcp_s):.2f} "
                  f"async_block_ms={med(async_block_s):.2f} async_total_ms={med(async_total_s):.2f}", flush=True)
        dist.barrier()
        if rank == 0:
            shutil.rmtree(d, ignore_errors=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    if "--device" in sys.argv[1:]:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from ckpt_torch_device import device_main

        sys.exit(device_main(sys.argv[1:]))
    sys.exit(main())
