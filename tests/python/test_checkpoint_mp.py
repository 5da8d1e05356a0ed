"""Checkpoints from Python in a multi-process world under mpirun: per-rank and replicated tensors
saved and restored bitwise by a fresh Manager, keep_last retention, and wait() releasing the GIL
while the commit waits for a slow rank."""
import os
import threading
import time

from _checks import needs_torch, skip_unless_mpirun, torch

skip_unless_mpirun()

import numpy as np  # noqa: E402

import trainrt  # noqa: E402
from trainrt import checkpoint  # noqa: E402

world = trainrt.init()
r, n = world.rank, world.world_size
# One directory for the job: rank 0 names it, everyone uses it.
directory = world.broadcast_bytes(__import__("tempfile").mkdtemp(prefix="trainrt-pymp-").encode() if r == 0 else None).decode()


def state(step):
    g = np.random.default_rng(1000 * step + r)
    shard = g.standard_normal(10000 + 17 * r).astype(np.float32)      # per rank: sizes differ
    rep = np.random.default_rng(step).integers(0, 1 << 30, 5000, dtype=np.int64)  # the same everywhere
    return shard, rep


def test_save_restore_bitwise_and_retention():
    shard, rep = state(0)
    m = checkpoint.Manager(directory, keep_last=2)
    m.register("shard", shard)
    m.register("replicated", rep, replicated=True)
    for step in (1, 2, 3):
        s, p = state(step)
        shard[...] = s
        rep[...] = p
        m.save(step, {"loss": f"{step / 10}"})
    res = m.wait()
    assert res is not None and res.step == 3
    m.close()
    world.barrier()
    steps = sorted(e for e in os.listdir(directory) if e.startswith("step_"))
    assert steps == ["step_000000000002", "step_000000000003"], steps
    shard[...] = 0
    rep[...] = 0
    m = checkpoint.Manager(directory)
    m.register("shard", shard)
    m.register("replicated", rep, replicated=True)
    assert m.restore() == 3
    assert m.restored_metadata == {"loss": "0.3"}
    s, p = state(3)
    assert shard.tobytes() == s.tobytes() and rep.tobytes() == p.tobytes()
    m.close()
    if r == 0:
        rep_ = checkpoint.verify(directory)
        assert rep_.intact and rep_.step == 3 and rep_.world_size == n, rep_


@needs_torch
def test_torch_tensors_per_rank_round_trip():
    tt = torch.full((3, 3), float(r), dtype=torch.bfloat16)
    m = checkpoint.Manager(directory + "/torch")
    m.register("bf16", tt)
    m.save(1)
    assert m.wait().step == 1
    tt.zero_()
    assert m.restore() == 1
    assert torch.equal(tt, torch.full((3, 3), float(r), dtype=torch.bfloat16)), tt
    m.close()


def test_wait_releases_the_gil():
    # Rank 0 saves 1.5 s late: the others' commit waits for it inside wait(), in a thread, while
    # the main thread counts.
    a = np.full(1 << 16, float(r))
    m = checkpoint.Manager(directory + "/gil")
    m.register("a", a)
    world.barrier()
    if r == 0:
        time.sleep(1.5)
        m.save(10)
        m.wait()
        m.close()
        return
    m.save(10)
    done = threading.Event()
    t = threading.Thread(target=lambda: (m.wait(), done.set()))
    start = time.monotonic()
    t.start()
    count = 0
    while not done.is_set():
        count += 1
    t.join()
    waited = time.monotonic() - start
    m.close()
    assert waited > 1.0, f"wait() returned after {waited:.2f} s, before rank 0 saved"
    assert count > 100000, f"the main thread ran only {count} iterations in {waited:.2f} s: GIL held"


def test_forked_child_leaves_the_parents_runtime_alone():
    # A DataLoader-style fork with a save in flight; the child drops its copies of the manager and
    # the world (what its shutdown does). The parents' world and manager must keep working.
    a = np.full(1 << 20, float(r))
    m = checkpoint.Manager(directory + "/fork")
    m.register("a", a)
    m.save(1)
    pid = os.fork()
    if pid == 0:
        global world
        import gc
        del m
        world = None
        trainrt._world = None
        gc.collect()
        os._exit(0)
    deadline = time.monotonic() + 20
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            raise AssertionError("the forked child hung tearing down the parent's manager or world")
        time.sleep(0.05)
    assert status == 0, status
    assert m.wait().step == 1
    world.allreduce(a)
    assert (a == n * (n - 1) / 2).all()
    m.save(2)
    m.wait()
    a[:] = -1
    assert m.restore() == 2 and (a == n * (n - 1) / 2).all()
    m.close()


def test_session_exchange_waits_for_the_save_in_flight():
    # broadcast_bytes goes over the PMIx session, as a save's commit does in the Manager's thread:
    # it waits for that save, so no two ranks pair one's commit with the other's exchange.
    big = np.full(16 << 20, float(r), dtype=np.float32)  # 64 MiB per rank: a persist of a while
    m = checkpoint.Manager(directory + "/session", keep_last=1)
    m.register("big", big)
    fut = m.save(1)
    got = world.broadcast_bytes(b"from rank 0" if r == 0 else None)
    done_then = fut.done()
    assert got == b"from rank 0"
    assert done_then, "broadcast_bytes returned while the save's commit was still running"
    assert fut.result().step == 1
    assert world.allgather_bytes(bytes([r])) == [bytes([i]) for i in range(n)]
    m.close()


def test_cleanup():
    world.barrier()  # everyone is done with the directory
    if r == 0:
        __import__("shutil").rmtree(directory)

