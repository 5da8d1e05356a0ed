#!/usr/bin/env python3
"""The PyTorch peer of `train-mlp`: the same training step written the way a PyTorch user would.

    python3 benchmarks/train_mlp_torch.py [--device cuda|cpu] [--hidden 64,65536] [--steps 300]
                                          [--warmup 20] [--ddp]

What "the same" means (slurm_examples/trainer/mlp.hpp, mlp_cpu.cpp, mlp_cuda.cpp, options.hpp):
  model      32 inputs -> HIDDEN, ReLU -> 1 (nn.Linear, nn.ReLU, nn.Linear), f32 throughout; weights
             uniform in [-0.3, 0.3), biases zero (train-mlp's initial_params, same distribution)
  loss       mean squared error against y = sum_j 0.1 sin(x_j (j + 1)), x uniform in [-1, 1)
  batch      64 rows per step (train-mlp's Shapes::rows, which has no option); a new batch every step,
             made inside the step as train-mlp makes its own (here on the device, there on the host
             and uploaded: the distribution and shape match, not the bits)
  optimizer  AdamW lr 3e-3, betas (0.9, 0.999), eps 1e-8, weight decay 0.01 (kernels::AdamWConfig and
             train-mlp's --lr default), fused=True where this torch has it, else its default (foreach)
  precision  f32 matmuls without TF32 (train-mlp sets cuBLAS to pedantic math)
  per step   zero_grad, forward, backward, step, and the loss read back to the host (train-mlp reads it
             every step for its metrics); timed one by one between torch.cuda.synchronize() calls,
             after --warmup steps that are not counted
  --ddp      also the same model wrapped in DistributedDataParallel over a world of one process
             (nccl on cuda, gloo on cpu; 4 MiB buckets, train-mlp's bucket size on the GPU): train-mlp
             always averages its gradients through its bucketer, even alone, so this is its closest peer

Prints one human line per run and one `RESULT {json}` line that benchmarks/trainer_gpu.sh reads.
Exit 77 with "# no CUDA device: ... not measured" when --device cuda finds none, "# no torch: ..." without torch.
"""
import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time

IN_FEATURES = 32  # train-mlp's Shapes::in
ROWS = 64  # train-mlp's Shapes::rows (rows per rank and step)
LR, BETAS, EPS, WEIGHT_DECAY = 3e-3, (0.9, 0.999), 1e-8, 0.01
DDP_BUCKET_MB = 4  # train-mlp's cuda engine: GradientBucketer with 4 MiB buckets


def percentile(sorted_values, q):
    """Nearest-rank percentile of an ascending list (q in (0, 100])."""
    return sorted_values[max(0, math.ceil(q / 100 * len(sorted_values)) - 1)]


def make_optimizer(torch, params, device):
    """AdamW as train-mlp's; fused where this torch supports it on this device."""
    try:
        return torch.optim.AdamW(params, lr=LR, betas=BETAS, eps=EPS, weight_decay=WEIGHT_DECAY, fused=True), "fused"
    except (TypeError, RuntimeError, ValueError) as e:  # torch < 2.0 has no fused AdamW; < 2.4 none on cpu
        if device.type == "cuda" and hasattr(torch, "compile"):
            raise RuntimeError(f"AdamW(fused=True) refused on cuda: {e}") from e  # torch 2.x must have it
        return torch.optim.AdamW(params, lr=LR, betas=BETAS, eps=EPS, weight_decay=WEIGHT_DECAY), "default (no fused here)"


def build_model(torch, hidden, device):
    model = torch.nn.Sequential(
        torch.nn.Linear(IN_FEATURES, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 1)).to(device)
    with torch.no_grad():
        for layer in (model[0], model[2]):
            layer.weight.uniform_(-0.3, 0.3)
            layer.bias.zero_()
    return model


def run(torch, device, hidden, steps, warmup, ddp=False):
    """Trains `steps` + `warmup` steps; returns the per-step seconds of the last `steps`."""
    torch.manual_seed(1)
    model = build_model(torch, hidden, device)
    net = model
    if ddp:
        from torch.nn.parallel import DistributedDataParallel
        kwargs = {"device_ids": [device.index or 0]} if device.type == "cuda" else {}
        net = DistributedDataParallel(model, bucket_cap_mb=DDP_BUCKET_MB, **kwargs)
    opt, kind = make_optimizer(torch, model.parameters(), device)
    freq = torch.arange(1, IN_FEATURES + 1, device=device, dtype=torch.float32)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    def step():
        x = torch.rand(ROWS, IN_FEATURES, device=device) * 2 - 1
        y = (torch.sin(x * freq) * 0.1).sum(dim=1, keepdim=True)
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(net(x), y)
        loss.backward()
        opt.step()
        return loss.item()  # the host reads the loss every step, as train-mlp does

    times, loss = [], float("nan")
    for i in range(warmup + steps):
        sync()
        t0 = time.perf_counter()
        loss = step()
        sync()
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    if not math.isfinite(loss):  # the timing stands; the models then no longer compare
        print(f"# warning: hidden {hidden}: the loss is {loss} after {warmup + steps} steps", flush=True)
    return times, loss, kind


def report(label, device, hidden, times, loss, kind):
    s = sorted(times)
    med, p90, mean = statistics.median(s), percentile(s, 90), statistics.fmean(s)
    params = IN_FEATURES * hidden + 2 * hidden + 1
    print(f"  {label:<22} hidden {hidden:>8} ({params / 1e6:8.3f} M params)  {len(s):>4} steps  "
          f"median {med * 1e3:9.3f} ms  p90 {p90 * 1e3:9.3f} ms  {ROWS / med:>10.0f} samples/s  loss {loss:.5f}")
    print("RESULT " + json.dumps({
        "run": label, "device": device.type, "hidden": hidden, "rows": ROWS, "steps": len(s),
        "median_s": med, "p90_s": p90, "mean_s": mean, "samples_per_s": ROWS / med,
        "loss": loss, "adamw": kind}), flush=True)


def init_ddp(torch, device):
    """A process group of one (nccl on cuda, gloo on cpu) through a FileStore in a temporary folder."""
    import torch.distributed as dist
    folder = tempfile.mkdtemp(prefix="train-mlp-torch-")
    store = dist.FileStore(os.path.join(folder, "store"), 1)
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo", store=store, rank=0, world_size=1)
    return dist, folder


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--hidden", default="64,65536", help="comma-separated hidden widths (train-mlp --hidden)")
    ap.add_argument("--steps", type=int, default=300, help="timed steps per width")
    ap.add_argument("--warmup", type=int, default=20, help="untimed steps first")
    ap.add_argument("--ddp", action="store_true", help="also run each width under DDP with a world of one")
    a = ap.parse_args()
    try:
        hiddens = [int(h) for h in a.hidden.split(",")]
    except ValueError:
        ap.error(f"--hidden '{a.hidden}' is not a comma-separated list of integers")
    if not hiddens or any(h < 1 or h > 1 << 20 for h in hiddens):
        ap.error("--hidden: every width must be 1..1048576 (train-mlp's range)")
    if a.steps < 1 or a.warmup < 0:
        ap.error("--steps must be >= 1 and --warmup >= 0")
    try:
        import torch
    except ImportError:
        print(f"# no torch: {sys.executable} cannot import torch (pip install torch); not measured")
        return 77
    if a.device == "cuda" and not torch.cuda.is_available():
        print(f"# no CUDA device: torch {torch.__version__} sees none (torch.cuda.is_available() is False); not measured")
        return 77
    device = torch.device("cuda", 0) if a.device == "cuda" else torch.device("cpu")
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False  # train-mlp: cuBLAS pedantic math, no TF32
        torch.backends.cudnn.allow_tf32 = False
        where = torch.cuda.get_device_name(0)
    else:
        where = f"CPU, {torch.get_num_threads()} threads"
    print(f"# PyTorch {torch.__version__} on {where}: {IN_FEATURES} -> hidden -> 1 MLP, {ROWS} rows/step, f32, "
          f"AdamW lr {LR} wd {WEIGHT_DECAY}; {a.warmup} warm-up + {a.steps} timed steps per run", flush=True)
    for hidden in hiddens:
        times, loss, kind = run(torch, device, hidden, a.steps, a.warmup)
        report(f"torch {device.type}", device, hidden, times, loss, kind)
    if a.ddp:
        dist, folder = init_ddp(torch, device)
        try:
            for hidden in hiddens:
                times, loss, kind = run(torch, device, hidden, a.steps, a.warmup, ddp=True)
                report(f"torch {device.type} DDP(1)", device, hidden, times, loss, kind)
        finally:
            dist.destroy_process_group()
            for name in os.listdir(folder):
                os.unlink(os.path.join(folder, name))
            os.rmdir(folder)
    return 0


if __name__ == "__main__":
    sys.exit(main())
