"""CUDA tensors in checkpoints (GPU machines): registered in place, staged through pinned memory,
restored bitwise; allreduce of a CUDA tensor is a UsageError. SKIPPED without a GPU or without a
CUDA build of trainrt."""
import os

import pytest
from _checks import expect_raises, torch

for var in list(os.environ):
    if var.startswith("PMIX_"):
        del os.environ[var]

import trainrt  # noqa: E402
from trainrt import checkpoint  # noqa: E402


def cuda_torch():
    """torch with a CUDA device and a CUDA build of trainrt, else the calling test skips saying why."""
    if torch is None:
        pytest.skip("torch is not importable")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    if not trainrt.has_cuda:
        pytest.skip("this trainrt was built without CUDA")
    return torch


def test_cuda_tensors_round_trip_bitwise(tmp_path):
    torch = cuda_torch()
    trainrt.init(quiet=True)
    d = str(tmp_path)
    g = torch.Generator(device="cuda").manual_seed(3)
    ts = {str(dt): torch.randn(1 << 20, device="cuda", generator=g).to(dt)
          for dt in (torch.float32, torch.bfloat16, torch.float16, torch.float64)}
    ts["cpu"] = torch.randn(1000)
    ptrs = {k: v.data_ptr() for k, v in ts.items()}
    want = {k: v.clone() for k, v in ts.items()}
    m = checkpoint.Manager(d)
    for k, v in ts.items():
        assert trainrt._trainrt._data_ptr(v) == v.data_ptr()
        m.register(k, v)
    m.save(1)
    assert m.wait().step == 1
    for v in ts.values():
        v.zero_()  # on torch's stream: restore must order after it
    assert m.restore() == 1
    torch.cuda.synchronize()
    for k, v in ts.items():
        assert v.data_ptr() == ptrs[k] and torch.equal(v, want[k]), k
    m.close()
    assert checkpoint.verify(d).intact


def test_cuda_allreduce_is_a_usage_error():
    torch = cuda_torch()
    w = trainrt.init(quiet=True)
    expect_raises(trainrt.UsageError, w.allreduce, torch.ones(4, device="cuda"), contains=("CPU",))

