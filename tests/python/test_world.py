"""One-process world (no PMIx): the World surface, in-place zero-copy allreduce on numpy arrays and
torch tensors, byte exchange, and the typed errors."""
import os

from _checks import expect_raises, needs_torch, torch
from _fake_dlpack import FakeTensor

for var in ("PMIX_RANK", "PMIX_NAMESPACE", "PMIX_SERVER_URI2", "PMIX_SERVER_URI3", "PMIX_SERVER_URI4",
            "PMIX_SERVER_URI21", "PMIX_SERVER_URI41"):
    os.environ.pop(var, None)

import numpy as np  # noqa: E402

import trainrt  # noqa: E402

world = trainrt.init(quiet=True)


def test_world_attributes():
    assert trainrt.init() is world, "init() must be idempotent"
    assert trainrt.world() is world and trainrt.is_initialized()
    assert (world.rank, world.world_size, world.local_rank, world.local_world_size) == (0, 1, 0, 1)
    assert world.backend == "shm", world.backend
    assert world.job_id == "single"
    assert "rank 0/1" in world.describe() and "rank 0/1" in repr(world)


def test_allreduce_numpy_in_place_zero_copy():
    for dt in (np.float32, np.float64, np.float16, np.int32, np.int64):
        a = np.arange(1000, dtype=dt).reshape(10, 100)
        before = a.ctypes.data
        assert trainrt._trainrt._data_ptr(a) == before, "the runtime must see the array's own memory"
        for op in ("sum", "avg", "min", "max"):
            assert world.allreduce(a, op=op) is a
        assert a.ctypes.data == before
        np.testing.assert_array_equal(a, np.arange(1000, dtype=dt).reshape(10, 100))


@needs_torch
def test_allreduce_torch_in_place_zero_copy():
    for dt in (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.int64):
        t = torch.arange(64).to(dt)
        assert trainrt._trainrt._data_ptr(t) == t.data_ptr()
        world.allreduce(t, "avg")
        assert torch.equal(t, torch.arange(64).to(dt))
    # A parameter that requires grad: reduced through its detached alias, same storage.
    p = torch.nn.Parameter(torch.ones(8))
    assert trainrt._trainrt._data_ptr(p.detach()) == p.data_ptr()
    world.allreduce(p, "sum")
    # A view with an offset: the pointer includes it.
    base = torch.zeros(16)
    assert trainrt._trainrt._data_ptr(base[4:]) == base[4:].data_ptr()


def test_allreduce_errors_are_typed():
    a = np.zeros(4, dtype=np.float32)
    e = expect_raises(trainrt.UsageError, world.allreduce, a, op="prod", contains=("'prod'", "sum"))
    assert isinstance(e, ValueError) and isinstance(e, trainrt.Error)
    expect_raises(trainrt.UsageError, world.allreduce, np.zeros((4, 4), dtype=np.float32)[:, 1],
                  contains=("not contiguous", "strides [4]"))
    expect_raises(trainrt.UsageError, world.allreduce, np.zeros(4, dtype=np.uint8), contains=("uint8",))
    expect_raises(trainrt.UsageError, world.allreduce, [1.0, 2.0], contains=("list",))
    ro = np.zeros(4)
    ro.flags.writeable = False
    expect_raises(trainrt.UsageError, world.allreduce, ro, contains=("read-only",))
    # Device memory through DLPack (a fake producer: no GPU here): refused before it is touched.
    expect_raises(trainrt.UsageError, world.allreduce, FakeTensor(device_type=2), contains=("CPU tensors",))
    expect_raises(trainrt.UsageError, world.allreduce, FakeTensor(device_type=7), contains=("device type 7",))
    # Every error is a trainrt.Error; the classes form the documented hierarchy.
    assert issubclass(trainrt.PeerError, trainrt.Error) and issubclass(trainrt.CheckpointError, trainrt.Error)
    assert issubclass(trainrt.Error, RuntimeError)


@needs_torch
def test_allreduce_torch_not_contiguous_is_a_usage_error():
    expect_raises(trainrt.UsageError, world.allreduce, torch.zeros(4, 4).t(), contains=("not contiguous",))


def test_allreduce_async_one_process():
    a = np.arange(100, dtype=np.int64)
    w = world.allreduce_async(a, "sum")
    w.wait()
    assert w.done() and (a == np.arange(100)).all()
    empty = world.allreduce_async(np.zeros(0, dtype=np.float32))
    assert empty.done()
    empty.wait()
    expect_raises(trainrt.UsageError, world.allreduce_async, np.zeros(3, dtype=np.uint8), contains=("uint8",))


def test_bytes_exchange():
    assert world.broadcast_bytes(b"hello", root=0) == b"hello"
    assert world.allgather_bytes(b"\x00\x01" * 1000) == [b"\x00\x01" * 1000]
    assert world.allgather_bytes(b"") == [b""]
    expect_raises(trainrt.UsageError, world.broadcast_bytes, None, contains=("root",))
    expect_raises(trainrt.UsageError, world.broadcast_bytes, b"x", root=1, contains=("root 1",))
    world.publish_bytes("py.key", b"value")
    assert world.lookup_bytes(0, "py.key") == b"value"
    expect_raises(trainrt.Error, world.lookup_bytes, 0, "never.published", contains=("never.published",))
    world.barrier()

