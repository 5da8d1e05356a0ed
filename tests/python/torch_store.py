#!/usr/bin/env python3
"""trainrt.torch.init_process_group under a PMIx launcher (mpirun -np N, or srun --mpi=pmix).

Checks, on every rank: no MASTER_PORT/MASTER_ADDR is needed (both are removed first, so a torch
that fell back to env:// would fail), the store is the session store on a kernel-assigned port that
every rank got from rank 0, the torchrun-style variables are exported, allreduce/broadcast/
allgather/barrier through torch.distributed give the right values, a second init is refused, and
destroy_process_group leaves none. Prints "TORCH-STORE-OK rank R of N" per rank; exit 0.
Exit 77 (skipped) when the trainrt module or torch.distributed cannot be imported.
"""
import os
import sys

for var in ("MASTER_PORT", "MASTER_ADDR"):
    os.environ.pop(var, None)
try:
    import torch
    import torch.distributed as dist
    import trainrt
    import trainrt.torch as tt
except ImportError as e:
    print(f"SKIPPED: {e}")
    sys.exit(77)


def check(cond, what):
    if not cond:
        print(f"FAIL rank {os.environ.get('RANK', '?')}: {what}", flush=True)
        sys.exit(1)


def main():
    w = tt.init_process_group("gloo")
    rank, n = w.rank, w.world_size
    check(dist.is_initialized() and dist.get_rank() == rank and dist.get_world_size() == n,
          f"torch sees rank {dist.get_rank()} of {dist.get_world_size()}, trainrt {rank} of {n}")
    check(tt.world() is w and tt.device() == torch.device("cpu"), "world()/device() of the live group")
    check("MASTER_PORT" not in os.environ and "MASTER_ADDR" not in os.environ, "MASTER_* appeared")
    check(os.environ["RANK"] == str(rank) and os.environ["WORLD_SIZE"] == str(n) and
          os.environ["LOCAL_RANK"] == str(w.local_rank), "RANK/WORLD_SIZE/LOCAL_RANK exported")

    store = tt._state["store"]
    host, port = store.address.rsplit(":", 1)
    check(isinstance(store, dist.Store) and int(port) > 0, f"session store address {store.address}")
    # Every rank names the same server: it came from rank 0 through the session.
    addrs = w.allgather_bytes(store.address.encode())
    check(len(set(addrs)) == 1, f"ranks disagree on the store: {addrs}")
    # The store itself, through the subclass: a key rank 0 sets, every rank reads.
    if rank == 0:
        store.set("trainrt-test", b"from rank 0")
    check(store.get("trainrt-test") == b"from rank 0", "store get of rank 0's key")
    check(store.add("trainrt-count", 1) >= 1, "store add")

    t = torch.full((1000,), float(rank + 1))
    dist.all_reduce(t)
    check(torch.all(t == n * (n + 1) / 2).item(), f"allreduce sum gave {t[0].item()}")
    m = torch.tensor([float(rank)])
    dist.all_reduce(m, op=dist.ReduceOp.MAX)
    check(m.item() == n - 1, f"allreduce max gave {m.item()}")
    b = torch.arange(16, dtype=torch.float64) * (rank + 7)
    dist.broadcast(b, src=n - 1)
    check(torch.equal(b, torch.arange(16, dtype=torch.float64) * (n - 1 + 7)), "broadcast from the last rank")
    parts = [torch.zeros(3) for _ in range(n)]
    dist.all_gather(parts, torch.full((3,), float(rank)))
    check(all(torch.all(p == i).item() for i, p in enumerate(parts)), "all_gather")
    dist.barrier()

    # Misuse is a trainrt.UsageError, and still the built-in callers caught before.
    try:
        tt.init_process_group("gloo")
        check(False, "a second init_process_group was accepted")
    except trainrt.UsageError as e:
        check(isinstance(e, RuntimeError), "a second init is no longer a RuntimeError")
    tt.destroy_process_group()
    check(not dist.is_initialized() and tt.world() is None, "destroy_process_group left a group")
    try:
        tt.init_process_group("mpi-or-else", world=w)
        check(False, "an unknown backend was accepted")
    except trainrt.UsageError as e:
        check(isinstance(e, ValueError), "an unknown backend is no longer a ValueError")
    try:
        tt.init_process_group("gloo", world=w, store=None)
        check(False, "store= was accepted")
    except trainrt.UsageError as e:
        check(isinstance(e, TypeError) and isinstance(e, tt.ArgumentError), "store= is no longer a TypeError")
    check(not dist.is_initialized(), "a refused init_process_group left a group")

    # Errors name what failed: an unreachable server (a port nobody listens on), a bad interface.
    import datetime, socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]  # closed again below: nothing listens there
    try:
        tt.SessionStore.connect("127.0.0.1", dead, datetime.timedelta(seconds=2), rank)
        check(False, "a store client connected to a closed port")
    except tt.StoreError as e:
        check(f"127.0.0.1:{dead}" in str(e) and "TRAINRT_IFNAME" in str(e), f"unreachable store message: {e}")
        check(isinstance(e, trainrt.Error) and isinstance(e, RuntimeError), "StoreError outside trainrt.Error")
    os.environ["TRAINRT_IFNAME"] = "trainrt-no-such-if0"
    try:
        tt._ipv4_of(os.environ["TRAINRT_IFNAME"])
        check(False, "an interface that does not exist gave an address")
    except tt.StoreError as e:
        check("trainrt-no-such-if0" in str(e), f"bad interface message: {e}")
    # An exclusion list ("^docker0,lo", NCCL's and Gloo's syntax) names no interface to advertise:
    # the address falls through to MASTER_ADDR instead of the excluded interface's.
    import types
    saved = {k: os.environ.pop(k, None) for k in ("TRAINRT_IFNAME", "GLOO_SOCKET_IFNAME", "MASTER_ADDR")}
    os.environ.update(NCCL_SOCKET_IFNAME="^docker0,lo", MASTER_ADDR="192.0.2.7")
    host = tt._advertised_host(types.SimpleNamespace(local_world_size=1, world_size=2))
    check(host == "192.0.2.7", f"an exclusion list was taken for an interface: advertised {host!r}")
    del os.environ["NCCL_SOCKET_IFNAME"]
    for k, v in saved.items():
        os.environ.pop(k, None)
        if v is not None:
            os.environ[k] = v
    print(f"TORCH-STORE-OK rank {rank} of {n} store {store.address}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
