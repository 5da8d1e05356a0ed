#!/usr/bin/env python3
"""The PyTorch peer of `kernels-bench --gpu`: the same jobs with PyTorch's own ops, same sizes.

    python3 benchmarks/kernels_torch.py [--sizes 64M,256M,1G] [--iters 20]

Fair accounting. Every row reports the bytes PyTorch really moves (each byte every op it launches
reads or writes: `(x * 2).to(bf16)` is two kernels, 4n+4n then 4n+2n = 14n bytes) and, beside it,
the job's bytes as kernels-bench counts them (6n for that cast), as GB/s over the same time: the
first column says how well PyTorch uses the memory system, the second compares the jobs. Both are
also given as a percentage of a plain `torch` copy (dst.copy_(src), 2 bytes moved per byte) timed
in the same run: the common ceiling for kernels-bench's "% of copy" column.

Rows: copy_; torch.cat(out=) and _foreach_copy_ of split views (pack/unpack of 64 tensors); cat of
~3000 odd-sized f16 tensors at odd element offsets; (x * s).to(bf16); h.float() * s; _foreach_norm
+ norm (64 tensors); vector_norm of one bf16 tensor; AdamW(fused=True).step on one f32 parameter
(28 bytes/element). There is no PyTorch counterpart of the bf16+master AdamW or the block digests.
Needs torch with a CUDA device; says so and exits 77 otherwise.
"""
import argparse
import sys


def size(s):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(s[:-1]) * units[s[-1]]) if s[-1] in units else int(s)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="64M,256M,1G")
    ap.add_argument("--iters", type=int, default=20)
    a = ap.parse_args()
    try:
        import torch
    except ImportError:
        print("# torch not installed (pip install torch): PyTorch peer not measured")
        return 77
    if not torch.cuda.is_available():
        print("# no CUDA device: PyTorch GPU peer not measured")
        return 77
    dev = torch.device("cuda")
    stream = torch.cuda.Stream()
    print(f"# PyTorch {torch.__version__} on {torch.cuda.get_device_name(0)}, {a.iters} iterations, CUDA events")

    def timed(fn):
        torch.cuda.synchronize()  # inputs made on the default stream must not overlap the timing
        with torch.cuda.stream(stream):
            fn()
            stream.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record(stream)
            for _ in range(a.iters):
                fn()
            end.record(stream)
            end.synchronize()
        return start.elapsed_time(end) / 1e3 / a.iters

    print(f"  {'op':<38} {'bytes':>11} {'time':>12} {'moved GB/s':>11} {'%copy':>6} {'job GB/s':>9} {'%copy':>6}")
    for b in [size(s) for s in a.sizes.split(",")]:
        n = b // 4
        x = torch.randn(n, device=dev)
        y = torch.empty_like(x)
        t_copy = timed(lambda: y.copy_(x))
        copy_gbs = 2 * b / t_copy / 1e9

        def row(name, nbytes, moved, job, t):
            m, j = moved / t / 1e9, job / t / 1e9
            print(f"  {name:<38} {nbytes:>11} {t * 1e3:>9.3f} ms {m:>11.1f} {100 * m / copy_gbs:>5.0f}% {j:>9.1f} {100 * j / copy_gbs:>5.0f}%")

        row("torch copy_ (the ceiling)", b, 2 * b, 2 * b, t_copy)
        parts = list(x.split(n // 64))
        flat = torch.empty_like(x)
        row("torch.cat(out=) 64 tensors", b, 2 * b, 2 * b, timed(lambda: torch.cat(parts, out=flat)))
        outs = [torch.empty_like(p) for p in parts]
        views = list(flat.split(n // 64))
        if hasattr(torch, "_foreach_copy_"):
            row("_foreach_copy_ 64 tensors (unpack)", b, 2 * b, 2 * b, timed(lambda: torch._foreach_copy_(outs, views)))
        # ~3000 f16 tensors of odd lengths, each starting at an odd element offset of one buffer.
        g = torch.Generator().manual_seed(1)
        mean = b // 2 // 3000
        h16 = torch.empty(b // 2, dtype=torch.float16, device=dev)
        odd, at = [], 0
        while len(odd) < 3000:
            count = (mean // 2 + int(torch.randint(mean, (1,), generator=g))) | 1
            off = (at + 7) // 8 * 8 + 1
            if off + count > h16.numel():
                break
            odd.append(h16[off:off + count])
            at = off + count
        packed = sum(t.numel() for t in odd) * 2
        bucket = torch.empty(packed // 2, dtype=torch.float16, device=dev)
        row(f"torch.cat(out=) {len(odd)} odd f16 tensors", packed, 2 * packed, 2 * packed,
            timed(lambda: torch.cat(odd, out=bucket)))
        row("(x * s).to(bf16)", b, 14 * n, 6 * n, timed(lambda: (x * 2.0).to(torch.bfloat16)))
        hb = x.to(torch.bfloat16)
        row("h.float() * s", b, 14 * n, 6 * n, timed(lambda: hb.float() * 2.0))
        row("_foreach_norm + norm (64 tensors)", b, b, b,
            timed(lambda: torch.linalg.vector_norm(torch.stack(torch._foreach_norm(parts)))))
        row("vector_norm (1 bf16 tensor)", b // 2, b // 2, b // 2, timed(lambda: torch.linalg.vector_norm(hb, dtype=torch.float32)))
        p = torch.nn.Parameter(torch.randn(n, device=dev))
        p.grad = torch.randn(n, device=dev)
        opt = torch.optim.AdamW([p], lr=1e-3, fused=True)
        row("AdamW(fused=True).step", b, 28 * n, 28 * n, timed(opt.step))
        del x, y, parts, flat, outs, views, h16, odd, bucket, hb, p, opt
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
