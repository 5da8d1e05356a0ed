#!/usr/bin/env python3
"""A small PyTorch DDP training run on the train-runtime: no MASTER_PORT, trainrt checkpoints.

    srun --mpi=pmix --train-runtime -n 4 python3 slurm_examples/train_torch.py \\
        --steps 200 --ckpt-dir $SCRATCH/ckpt --save-every 20

- The process group comes from trainrt.torch.init_process_group (gloo on CPU, nccl on GPUs): rank,
  world size and the rendezvous travel through the PMIx session srun --mpi=pmix starts.
- Model and optimizer state (SGD with momentum) are registered once with trainrt.checkpoint.Manager
  (zero-copy views of the live tensors: register_state_dict, register_optimizer); save() returns
  once they are staged and the write goes on in the background. A rerun resumes from the newest
  step every rank can verify.
- Deterministic: the batch of step s on rank r depends only on (seed, s, r), the weights on the
  seed, and gradients are averaged in a fixed order, so a run killed and resumed ends bitwise where
  an uninterrupted run ends (--dump-params writes the final weights for that comparison).
- SIGUSR1/SIGTERM (Slurm's --signal, scancel, the time limit): every rank agrees after the same
  step, a final checkpoint is committed and the ranks exit 75, which train.sbatch requeues on.
- --kill-at STEP: fault injection, rank --kill-rank (default the last) SIGKILLs itself after that
  step's update, before its checkpoint.
- Under slurm_examples/train.sbatch: TRAINER=slurm_examples/train_torch.py (its interpreter must
  import torch and trainrt, PYTHONPATH exported) takes the --ckpt-dir and --out the script passes;
  a usage error exits 2 (no rerun), a checkpoint only another world size can restore exits 76
  (a requeue).
"""
import argparse
import hashlib
import os
import signal
import sys

import torch

import trainrt
import trainrt.checkpoint
import trainrt.torch


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=200, help="train until this step (default 200)")
    p.add_argument("--ckpt-dir", required=True, help="checkpoint directory (created if missing)")
    p.add_argument("--save-every", type=int, default=20, help="checkpoint every N steps (0: never)")
    p.add_argument("--keep-last", type=int, default=2, help="committed steps kept")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                   help="auto: cuda (nccl) when torch sees a GPU, else cpu (gloo)")
    p.add_argument("--hidden", type=int, default=256, help="hidden units of the MLP")
    p.add_argument("--batch", type=int, default=64, help="samples per rank per step")
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--kill-at", type=int, default=0, metavar="STEP", help="SIGKILL a rank after this step")
    p.add_argument("--kill-rank", type=int, default=-1, help="the rank --kill-at kills (default: the last)")
    p.add_argument("--dump-params", metavar="FILE", help="rank 0 writes the final weights' raw bytes here")
    p.add_argument("--out", metavar="DIR", help="the run's output folder, which train.sbatch passes every "
                   "trainer; this script writes nothing there")
    a = p.parse_args(argv)
    if a.steps < 1 or a.save_every < 0 or a.hidden < 1 or a.batch < 1 or a.keep_last < 1:
        p.error("--steps, --hidden, --batch and --keep-last must be positive, --save-every not negative")
    return a


IN, OUT = 32, 8


def make_model(hidden):
    return torch.nn.Sequential(torch.nn.Linear(IN, hidden), torch.nn.Tanh(),
                               torch.nn.Linear(hidden, hidden), torch.nn.Tanh(),
                               torch.nn.Linear(hidden, OUT))


def make_batch(seed, step, rank, n, device):
    """The batch depends on (seed, step, rank) only: a resumed run sees the same data."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + step * 4099 + rank)
    x = torch.randn(n, IN, generator=g)
    y = torch.sin(x[:, :OUT] * 2.0) + 0.1 * x[:, OUT:2 * OUT]  # a fixed function to learn
    return x.to(device), y.to(device)


def params_digest(model):
    h = hashlib.sha256()
    for t in model.state_dict().values():
        h.update(t.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def main(argv):
    a = parse_args(argv)
    use_cuda = a.device == "cuda" or (a.device == "auto" and torch.cuda.is_available())
    if use_cuda:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(max(1, int(os.environ.get("OMP_NUM_THREADS", "1"))))

    world = trainrt.torch.init_process_group("nccl" if use_cuda else "gloo")
    rank, size = world.rank, world.world_size
    device = trainrt.torch.device()
    kill_rank = a.kill_rank if a.kill_rank >= 0 else size - 1
    if a.kill_at and kill_rank >= size:
        print(f"train_torch: error: --kill-rank {kill_rank}: the world has {size} ranks", file=sys.stderr, flush=True)
        sys.exit(2)
    say = (lambda *m: print("train_torch:", *m, flush=True)) if rank == 0 else (lambda *m: None)

    torch.manual_seed(a.seed)
    model = make_model(a.hidden).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9)

    os.makedirs(os.path.dirname(os.path.abspath(a.ckpt_dir)), exist_ok=True)  # the Manager creates one level
    ckpt = trainrt.checkpoint.Manager(a.ckpt_dir, keep_last=a.keep_last)
    # Views of the live tensors, the same on every rank (replicated: restorable at another world
    # size). register_optimizer creates SGD's momentum buffers now (torch makes them at the first
    # step) and restores them and the hyper-parameters in place.
    ckpt.register_state_dict("model.", model.state_dict(), replicated=True)
    ckpt.register_optimizer("optim.", opt, replicated=True)
    try:
        done = ckpt.restore()
    except trainrt.WorldSizeError as e:  # not this node's fault: train.sbatch requeues for it
        print(f"train_torch: error: {e}", file=sys.stderr, flush=True)
        sys.exit(trainrt.WORLD_SIZE_EXIT_CODE)
    if done is not None:
        say(f"restored step {done} (loss then {ckpt.restored_metadata.get('loss', '?')})")
    else:
        done = 0
        say("starting fresh (no intact checkpoint)")
    say(f"{size} ranks, {device.type} ({'nccl' if use_cuda else 'gloo'}), steps {done + 1}..{a.steps}")

    ddp = torch.nn.parallel.DistributedDataParallel(
        model, device_ids=[device.index] if use_cuda else None,
        # Buckets keep the registration order: a rebuilt order (DDP's default after the first
        # step) would change how gradients are chunked in the allreduce, hence the order floats
        # are summed in, between a run's first step and a resumed run's first step.
        find_unused_parameters=True)
    loss_fn = torch.nn.MSELoss()
    flag = torch.zeros(1)
    loss = torch.zeros(())
    trained = False
    while done < a.steps:
        # Signals reach the ranks at different moments: agree (max) so all stop after the same step.
        flag[0] = 1.0 if ckpt.stop_requested() else 0.0
        world.allreduce(flag, op="max")
        if flag[0] > 0:
            say(f"stop signal at step {done}: final checkpoint, exit 75")
            # The loss too (what a rerun with no step left reports): this run's, or the restored one.
            last = f"{loss.item():.9g}" if trained else ckpt.restored_metadata.get("loss")
            ckpt.save_and_exit(done, {"loss": last} if last is not None else None)
        step = done + 1
        x, y = make_batch(a.seed, step, rank, a.batch, device)
        opt.zero_grad(set_to_none=False)
        loss = loss_fn(ddp(x), y)
        loss.backward()
        opt.step()
        done = step
        trained = True
        if a.kill_at == step and rank == kill_rank:
            print(f"train_torch: rank {rank} kills itself after step {step} (--kill-at)", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        if a.save_every and step % a.save_every == 0:
            ckpt.save(step, {"loss": f"{loss.item():.9g}"})
        if step % 50 == 0:
            say(f"step {step} loss {loss.item():.6f}")
    ckpt.wait(watch_peers=True)  # a rank lost now ends the others at once, not at Slurm's KillWait
    digest = params_digest(model)
    say(f"FINAL step {done} loss {loss.item():.6f} params {digest}")
    if a.dump_params and rank == 0:
        with open(a.dump_params, "wb") as f:
            for t in model.state_dict().values():
                f.write(t.detach().cpu().contiguous().numpy().tobytes())
    trainrt.torch.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
