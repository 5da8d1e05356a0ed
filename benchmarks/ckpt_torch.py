#!/usr/bin/env python3
"""torch.save's blocking time for the same state sizes as ckpt-bench, on the same filesystem.

    /usr/bin/python3 benchmarks/ckpt_torch.py DIR [MiB ...]

Prints the seconds torch.save blocks the caller (write + flush; torch.save does not fsync, so an
fsync is timed separately) for one float32 tensor of each size.
"""
import os, sys, time

def main():
    try:
        import torch
    except ImportError:
        print("# torch not installed (apt-get install python3-torch): torch.save not measured")
        return 0
    d = sys.argv[1]
    sizes = [int(x) for x in sys.argv[2:]] or [256, 1024]
    os.makedirs(d, exist_ok=True)
    print(f"# torch {torch.__version__} torch.save, directory {d}")
    for mib in sizes:
        t = torch.arange(mib * (1 << 20) // 4, dtype=torch.float32)
        best = None
        for _ in range(3):
            path = os.path.join(d, "t.pt")
            t0 = time.perf_counter()
            torch.save({"state": t}, path)
            blocked = time.perf_counter() - t0
            fd = os.open(path, os.O_RDONLY); t1 = time.perf_counter(); os.fsync(fd); os.close(fd)
            fs = time.perf_counter() - t1
            best = min(best or (1e9, 0), (blocked, fs))
            os.unlink(path)
        print(f"{mib:>5} MiB  torch.save blocks {best[0]*1e3:8.1f} ms (+ fsync {best[1]*1e3:.1f} ms not included)")
    return 0

if __name__ == "__main__":
    sys.exit(main())
