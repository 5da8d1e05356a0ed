#!/usr/bin/env python3
"""The PyTorch peer for kernels-bench --gpu: the same jobs with PyTorch's own ops, same sizes.

    python3 benchmarks/kernels_torch.py [--min 1M] [--max 1G] [--iters 20]

torch.cat / split (pack/unpack of 64 tensors), tensor.to(bfloat16) * scale, torch._foreach_norm +
stack + norm (multi-tensor L2), torch.optim.AdamW(fused=True) step. Prints bytes moved / time with
the same byte accounting as kernels-bench. Needs a CUDA device; says so and exits 0 otherwise.
"""
import argparse, sys, time

def size(s):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(s[:-1]) * units[s[-1]]) if s[-1] in units else int(s)

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--min", type=size, default=1 << 20)
    ap.add_argument("--max", type=size, default=1 << 30)
    ap.add_argument("--iters", type=int, default=20)
    a = ap.parse_args()
    try:
        import torch
    except ImportError:
        print("# torch not installed (pip install torch): PyTorch peer not measured")
        return 0
    if not torch.cuda.is_available():
        print("# no CUDA device: PyTorch GPU peer not measured")
        return 0
    print(f"# PyTorch {torch.__version__} on {torch.cuda.get_device_name(0)}")

    def timed(fn):
        fn(); torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(a.iters): fn()
        torch.cuda.synchronize()
        return (time.perf_counter() - t) / a.iters

    b = a.min
    while b <= a.max:
        n = b // 4
        x = torch.randn(n, device="cuda")
        parts = list(x.split(n // 64))
        def row(name, moved, t): print(f"  {name:<26} {b:>11} {t*1e3:>9.3f} ms {moved/t/1e9:>9.2f} GB/s")
        row("torch.cat (64 tensors)", 2 * b, timed(lambda: torch.cat(parts)))
        row("to(bf16) * scale", b + b // 2, timed(lambda: (x * 2.0).to(torch.bfloat16)))
        row("_foreach_norm + norm", b, timed(lambda: torch.stack(torch._foreach_norm(parts)).norm()))
        p = torch.nn.Parameter(torch.randn(n, device="cuda")); p.grad = torch.randn(n, device="cuda")
        opt = torch.optim.AdamW([p], lr=1e-3, fused=True)
        row("AdamW(fused=True).step", 7 * b, timed(opt.step))
        b *= 4
    return 0

if __name__ == "__main__":
    sys.exit(main())
