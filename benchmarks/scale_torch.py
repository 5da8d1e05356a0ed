# One rank of benchmarks/scale.sh's torch peer: TCPStore + gloo through env:// (MASTER_ADDR and
# MASTER_PORT from the script, rank and world from Slurm). Prints, on rank 0, the same lines as
# scale_bench: "torch_own N NODES ms" (slowest rank, from after `import torch` to a ready process
# group), "torch_last N NODES ms" (last rank done importing to last rank ready) and the CPU time of
# all ranks over that span, so the cost of importing torch on an oversubscribed machine stays out.
import time

t_main = time.time()
import os  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

t_imported, cpu_imported = time.time(), time.process_time()
rank, world = int(os.environ["SLURM_PROCID"]), int(os.environ["SLURM_NTASKS"])
nodes = int(os.environ["SLURM_JOB_NUM_NODES"])
dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world)
t_ready, cpu = time.time(), time.process_time() - cpu_imported
x = torch.tensor([t_ready - t_imported, t_imported, t_ready], dtype=torch.float64)
dist.all_reduce(x, op=dist.ReduceOp.MAX)
c = torch.tensor([cpu], dtype=torch.float64)
dist.all_reduce(c, op=dist.ReduceOp.SUM)
if rank == 0:
    print(f"torch_own {world} {nodes} {x[0].item() * 1e3:.2f}")
    print(f"torch_last {world} {nodes} {(x[2] - x[1]).item() * 1e3:.2f}")
    print(f"torch_cpu_sum {world} {nodes} {c.item() * 1e3:.2f}", flush=True)
dist.destroy_process_group()
