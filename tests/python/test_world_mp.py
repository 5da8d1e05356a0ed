"""Several processes under mpirun (a PMIx server): allreduce of every op and dtype in place,
barrier, byte exchange of different sizes per rank, and the GIL released while a call blocks."""
import os
import threading
import time

from _checks import needs_torch, skip_unless_mpirun, torch

skip_unless_mpirun()

import numpy as np  # noqa: E402

import trainrt  # noqa: E402

world = trainrt.init()
r, n = world.rank, world.world_size


def test_world_shape():
    assert n >= 2, f"run with at least 2 ranks, got {n}"
    assert 0 <= r < n and world.local_world_size == n and world.local_rank == r
    assert world.job_id != "single"
    want = os.environ.get("TRAINRT_HOST_BACKEND", "shm")
    assert world.backend == want, f"backend {world.backend}, expected {want}"


def test_allreduce_numpy_every_op():
    for dt in (np.float32, np.float64, np.float16, np.int32, np.int64):
        for op, want in (("sum", n * (n + 1) // 2), ("min", 1), ("max", n)):
            a = np.full(1 << 12, r + 1, dtype=dt)
            ptr = a.ctypes.data
            world.allreduce(a, op)
            assert a.ctypes.data == ptr
            assert (a == want).all(), f"{dt.__name__} {op}: got {a[:4]} want {want}"
        a = np.full(1000, float(r), dtype=np.float64)
        world.allreduce(a, "avg")
        assert np.allclose(a, (n - 1) / 2), a[:4]
    # Large enough to cross the shared-memory slots (1 MiB per rank): 3 MiB of float32.
    big = np.arange(3 << 18, dtype=np.float32) * (r + 1)
    world.allreduce(big)
    np.testing.assert_array_equal(big, np.arange(3 << 18, dtype=np.float32) * (n * (n + 1) // 2))


@needs_torch
def test_allreduce_torch():
    for dt in (torch.float32, torch.bfloat16, torch.float16, torch.int64):
        t = torch.full((257,), r + 1, dtype=dt)
        ptr = t.data_ptr()
        world.allreduce(t, "max")
        assert t.data_ptr() == ptr and bool((t == n).all()), (dt, t[:4])
    p = torch.nn.Parameter(torch.full((5,), float(r)))
    world.allreduce(p, "sum")
    assert torch.equal(p.detach(), torch.full((5,), float(n * (n - 1) // 2)))


def test_allreduce_async_in_call_order():
    bufs = [np.full(1 << (10 + i), float(r + i), dtype=np.float32) for i in range(6)]
    works = [world.allreduce_async(b, "sum") for b in bufs]
    blocking = np.full(7, float(r), dtype=np.float64)
    world.allreduce(blocking, "max")  # after every async one, in order
    assert (blocking == n - 1).all()
    for i, (b, w) in enumerate(zip(bufs, works)):
        w.wait()
        assert w.done()
        want = sum(k + i for k in range(n))
        assert (b == want).all(), (i, b[:3], want)
    # Dropped unwaited: its destructor waits, so the buffer is complete afterwards.
    b = np.ones(1 << 16, dtype=np.float32)
    world.allreduce_async(b)
    assert (b == n).all()
    try:
        world.allreduce_async(b, "prod")
        raise AssertionError("no UsageError for op prod")
    except trainrt.UsageError:
        pass


def test_bytes_of_different_sizes():
    mine = bytes([r]) * (r * 1000 + 1)
    got = world.allgather_bytes(mine)
    assert [len(b) for b in got] == [i * 1000 + 1 for i in range(n)]
    assert all(b == bytes([i]) * (i * 1000 + 1) for i, b in enumerate(got))
    for root in range(n):
        data = f"from {root}".encode() * (root + 1) if r == root else None
        assert world.broadcast_bytes(data, root=root) == f"from {root}".encode() * (root + 1)
    world.publish_bytes(f"py.mp.{r}", f"rank {r}".encode())
    peer = (r + 1) % n
    assert world.lookup_bytes(peer, f"py.mp.{peer}") == f"rank {peer}".encode()


def test_barrier_releases_the_gil():
    # Rank 0 enters the barrier 1.5 s late. Elsewhere a thread waits in it while the main thread
    # counts: with the GIL held by the waiting thread the count would stay near zero.
    world.barrier()
    if r == 0:
        time.sleep(1.5)
        world.barrier()
        return
    done = threading.Event()
    t = threading.Thread(target=lambda: (world.barrier(), done.set()))
    start = time.monotonic()
    t.start()
    count = 0
    while not done.is_set():
        count += 1
    t.join()
    waited = time.monotonic() - start
    assert waited > 1.0, f"the barrier returned after {waited:.2f} s, before rank 0 entered it"
    assert count > 100000, f"the main thread ran only {count} iterations in {waited:.2f} s: GIL held"

