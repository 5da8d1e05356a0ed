"""Hostile inputs at the Python boundary (docs/hostile-inputs.md "Python boundary"): what a
__dlpack__ producer reports (shape, strides, element size, data pointer, byte offset) is checked
with overflow-safe arithmetic before the runtime reads or writes a byte, and refused with
trainrt.UsageError naming the tensor; paths are os.fsdecode'd or refused, never str(b'...').
Fake producers (tests/python/_fake_dlpack.py) point at addresses nothing may touch: every case
that passes a check it should not would crash or silently do nothing, and fails here."""
import os
import pathlib
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _fake_dlpack import FakeTensor  # noqa: E402
import tempfile  # noqa: E402

from _checks import expect_raises  # noqa: E402

for var in list(os.environ):
    if var.startswith("PMIX_"):
        del os.environ[var]

import numpy as np  # noqa: E402

import trainrt  # noqa: E402
from trainrt import checkpoint  # noqa: E402

world = trainrt.init(quiet=True)
CPU = 1
TWO_32 = 1 << 32


def tmpdir():
    return tempfile.mkdtemp(prefix="trainrt-hostile-py-")


def hostile_tensors():
    """(what it is, the fake, a part the error must name)."""
    return [
        ("element count 2^64 (wraps to 0)", FakeTensor(device_type=CPU, shape=(TWO_32, TWO_32)), "64 bits"),
        ("element count 2^64 + 2^32", FakeTensor(device_type=CPU, shape=(TWO_32 + 1, TWO_32)), "64 bits"),
        ("2^62 float32: 2^64 bytes (wraps to 0)", FakeTensor(device_type=CPU, shape=(1 << 62,)), "more bytes"),
        ("2^61 float32: 2^63 bytes", FakeTensor(device_type=CPU, shape=(1 << 61,)), "more bytes"),
        ("a negative extent", FakeTensor(device_type=CPU, shape=(4, -1)), "extent -1"),
        ("NULL data, 16 elements", FakeTensor(device_type=CPU, address=0), "NULL data pointer"),
        ("NULL data plus a byte offset", FakeTensor(device_type=CPU, address=0, byte_offset=64), "NULL data pointer"),
        ("an address that wraps", FakeTensor(device_type=CPU, address=(1 << 64) - 16), "wraps around"),
        ("a byte offset that wraps", FakeTensor(device_type=CPU, byte_offset=(1 << 64) - 8), "wraps around"),
        ("1000 dimensions", FakeTensor(device_type=CPU, shape=(1,) * 1000), "1000 dimensions"),
        ("-1 dimensions", FakeTensor(device_type=CPU, shape=(4,), strides=(1,), ndim=-1), "-1 dimensions"),
        ("zero-bit elements", FakeTensor(device_type=CPU, bits=0), "whole bytes"),
        ("strides that skip", FakeTensor(device_type=CPU, shape=(4, 4), strides=(1 << 40, 1)), "not contiguous"),
        ("negative strides", FakeTensor(device_type=CPU, shape=(4,), strides=(-1,)), "not contiguous"),
    ]


def test_allreduce_refuses_what_the_producer_cannot_mean():
    for what, t, part in hostile_tensors():
        try:
            world.allreduce(t)
        except trainrt.UsageError as e:
            assert part in str(e) and "allreduce's tensor" in str(e), f"{what}: {e}"
            continue
        raise AssertionError(f"{what}: allreduce accepted it (a silent no-op or a wild write)")


def test_registration_refuses_it_before_any_save():
    m = checkpoint.Manager(tmpdir())
    for i, (what, t, part) in enumerate(hostile_tensors()):
        name = f"t{i}"
        try:
            m.register(name, t)
        except trainrt.UsageError as e:
            assert part in str(e) and f"'{name}'" in str(e), f"{what}: {e}"
            continue
        raise AssertionError(f"{what}: registered (a save would crash or write a 0-byte entry)")
    # Nothing registered: the save holds no entry and commits (the manager is still usable).
    m.register("ok", np.arange(8, dtype=np.float32))
    m.save(1)
    m.wait()
    rep = checkpoint.verify(m.directory)
    assert rep.intact and [e["name"] for e in rep.entries] == ["ok"], rep
    m.close()


def test_edges_that_are_fine_stay_fine():
    # An empty tensor may have a NULL pointer and any strides; one element any strides.
    world.allreduce(FakeTensor(device_type=CPU, address=0, shape=(0, 1 << 62)))
    world.allreduce(FakeTensor(device_type=CPU, address=0, shape=(TWO_32, 0, TWO_32)))
    a = np.zeros((1, 1), dtype=np.float64)
    assert world.allreduce(a) is a
    big = np.ones((3, 5, 7), dtype=np.float32)
    world.allreduce(big)
    assert big.sum() == 105


def test_bytes_paths_are_decoded_never_repr():
    base = tmpdir()
    cwd = os.getcwd()
    os.chdir(base)
    try:
        target = os.path.join(base, "ckpt")
        m = checkpoint.Manager(os.fsencode(target))
        assert m.directory == target, m.directory
        m.register("a", np.arange(4, dtype=np.float64))
        m.save(3)
        m.wait()
        m.close()
        assert os.path.isdir(target)
        assert not any(n.startswith("b'") for n in os.listdir(base)), os.listdir(base)
        rep = checkpoint.verify(os.fsencode(target))
        assert rep.intact and rep.step == 3 and rep.directory == target, rep
        rep = checkpoint.verify(pathlib.Path(target))
        assert rep.intact and rep.directory == target, rep
    finally:
        os.chdir(cwd)


def test_paths_that_cannot_be_passed_on_are_refused():
    base = tmpdir()
    for bad, part in [(os.fsencode(base) + b"/\xff\xfe", "UTF-8"), (base + "/a\0b", "NUL"), (b"", "empty"),
                      ("", "empty"), (42, "int"), (None, "NoneType"), ([base], "list")]:
        expect_raises(trainrt.UsageError, checkpoint.Manager, bad, contains=(part,))
        expect_raises(trainrt.UsageError, checkpoint.verify, bad, contains=(part,))
    assert os.listdir(base) == [], os.listdir(base)
    assert not os.path.exists("None") and not os.path.exists("42")
