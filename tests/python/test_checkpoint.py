"""One-process checkpoints from Python: bitwise save/restore of numpy arrays and torch tensors in
place, opaque-byte dtypes, metadata, a torch model + optimizer through register_state_dict,
verify() on an intact and a corrupted step, typed errors, stop signals and save_and_exit."""
import os
import signal
import subprocess
import sys
import textwrap

from _checks import expect_raises, needs_torch, torch
from _fake_dlpack import FakeTensor

for var in list(os.environ):
    if var.startswith("PMIX_"):
        del os.environ[var]

import numpy as np  # noqa: E402

import trainrt  # noqa: E402
from trainrt import checkpoint  # noqa: E402

trainrt.init(quiet=True)
rng = np.random.default_rng(7)


def test_numpy_round_trip_bitwise_in_place(tmp_path):
    d = str(tmp_path)
    a = rng.standard_normal((33, 17)).astype(np.float32)
    b = rng.integers(-2**62, 2**62, 1000, dtype=np.int64)
    raw = rng.integers(0, 256, 777, dtype=np.uint8)   # no runtime DType: saved as bytes
    flags = rng.integers(0, 2, 64).astype(bool)
    saved = [x.copy() for x in (a, b, raw, flags)]
    with checkpoint.Manager(d) as m:
        assert m.restore() is None and m.restored_metadata == {}
        assert m.last_restore["step"] is None and m.last_restore["source"] is None, m.last_restore
        for name, x in zip("abrf", (a, b, raw, flags)):
            m.register(name, x)
        m.save(3, {"loss": "0.25", "epoch": 2, "cfg": {"lr": 0.1}})
        r = m.wait()
        assert r.step == 3 and r.shard_bytes > 0 and not r.already_committed, r
        assert m.wait() is None
    ptrs = []
    for x in (a, b, raw, flags):
        ptrs.append(x.ctypes.data)
        x[...] = 0
    with checkpoint.Manager(d) as m:
        for name, x in zip("abrf", (a, b, raw, flags)):
            m.register(name, x)
        assert m.restore() == 3
        assert m.restored_metadata == {"loss": "0.25", "epoch": "2", "cfg": '{"lr": 0.1}'}, m.restored_metadata
        rep = m.last_restore
        assert rep["step"] == 3 and rep["source"] == "disk" and rep["fallbacks"] == [], rep
        assert [(p["phase"], p["step"]) for p in rep["phases"]] == [
            ("find", None), ("check", 3), ("read", 3), ("install", 3)], rep
        assert abs(sum(p["seconds"] for p in rep["phases"]) - rep["seconds"]) < 1e-9, rep
    for x, s, p in zip((a, b, raw, flags), saved, ptrs):
        assert x.ctypes.data == p
        assert x.tobytes() == s.tobytes(), "restored bytes differ"
    rep = checkpoint.verify(d)
    assert rep.intact and rep and rep.step == 3 and rep.problems == [], rep
    assert {e["name"] for e in rep.entries} == {"a", "b", "r", "f"}
    assert rep.metadata["loss"] == "0.25"


@needs_torch
def test_torch_tensors_every_dtype(tmp_path):
    d = str(tmp_path)
    ts = {str(dt): (torch.randn(129) * 1000).to(dt) for dt in
          (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.int64, torch.uint8, torch.bool)}
    ts["scalar"] = torch.tensor(3.5)      # 0-dim (an optimizer's step)
    ts["param"] = torch.nn.Parameter(torch.randn(4, 4))  # requires grad: registered through its alias
    saved = {k: v.detach().clone() for k, v in ts.items()}
    m = checkpoint.Manager(d, keep_last=1)
    for k, v in ts.items():
        m.register(k, v)
    m.save(1)
    m.wait()
    with torch.no_grad():
        for v in ts.values():
            v.zero_()
    assert m.restore() == 1
    for k, v in ts.items():
        assert torch.equal(v.detach(), saved[k]), k
    m.close()


def _model_and_optimizer(seed):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.BatchNorm1d(16), torch.nn.ReLU(),
                                torch.nn.Linear(16, 2))
    return model, torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)


def _train(model, opt, steps):
    for s in steps:
        g = torch.Generator().manual_seed(100 + s)
        x = torch.randn(4, 8, generator=g)
        opt.zero_grad(set_to_none=True)
        model(x).square().mean().backward()
        opt.step()


def _params(model):
    return [t.detach().clone() for t in model.state_dict().values()]


@needs_torch
def test_model_and_optimizer_resume_bitwise(tmp_path):
    d = str(tmp_path)
    # Reference: 5 steps with nothing registered.
    ref, ref_opt = _model_and_optimizer(0)
    _train(ref, ref_opt, range(2))
    ref_opt.param_groups[0]["lr"] = 2e-2
    _train(ref, ref_opt, range(2, 5))
    want = _params(ref)

    # Run 1: registered before any step (AdamW has no state yet), nothing to restore, saves at 3.
    model, opt = _model_and_optimizer(0)
    m = checkpoint.Manager(d)
    names = m.register_state_dict("model.", model.state_dict(), replicated=True)
    onames = m.register_optimizer("optim.", opt)
    assert "model.0.weight" in names and "model.1.num_batches_tracked" in names, names
    assert "optim.state.0.exp_avg" in onames and "optim.state.0.step" in onames, onames
    assert m.restore() is None
    _train(model, opt, range(2))
    opt.param_groups[0]["lr"] = 2e-2
    _train(model, opt, range(2, 3))
    m.save(3, {"epoch": 0})
    m.wait()
    _train(model, opt, range(3, 5))
    got = _params(model)
    assert all(torch.equal(a, b) for a, b in zip(got, want)), "registering changed a fresh run"
    m.close()

    # Run 2: another init, restored from step 3 in place, continues to 5: bitwise the same.
    model2, opt2 = _model_and_optimizer(1)
    m2 = checkpoint.Manager(d)
    m2.register_state_dict("model.", model2.state_dict(), replicated=True)
    m2.register_optimizer("optim.", opt2)
    assert m2.restore() == 3 and m2.restored_metadata == {"epoch": "0"}
    assert opt2.param_groups[0]["lr"] == 2e-2 and opt2.param_groups[0]["betas"] == (0.9, 0.999)
    _train(model2, opt2, range(3, 5))
    assert all(torch.equal(a, b) for a, b in zip(_params(model2), want)), "resume is not bitwise"
    # The registered tensors are still the optimizer's live state: a save now holds step 5's.
    m2.save(5)
    m2.wait()
    live = {k: v.clone() for k, v in opt2.state[next(iter(model2.parameters()))].items()}
    m2.close()
    model3, opt3 = _model_and_optimizer(2)
    m3 = checkpoint.Manager(d)
    m3.register_state_dict("model.", model3.state_dict(), replicated=True)
    m3.register_optimizer("optim.", opt3)
    assert m3.restore() == 5
    for k, v in opt3.state[next(iter(model3.parameters()))].items():
        assert torch.equal(v, live[k]), k
    m3.close()


def test_state_dict_extras_round_trip(tmp_path):
    sd = {"w": np.arange(4.0), "cfg": {"lr": 0.1, "betas": (0.9, 0.99), "ids": [0, 1]}, "name": "run"}
    d = str(tmp_path)
    m = checkpoint.Manager(d)
    assert m.register_state_dict("s.", sd) == ["s.w"]
    m.save(1)
    m.wait()
    sd["cfg"]["lr"], sd["name"], sd["w"][:] = 0.5, "other", 0
    assert m.restore() == 1
    assert sd["cfg"] == {"lr": 0.1, "betas": (0.9, 0.99), "ids": [0, 1]} and sd["name"] == "run"
    np.testing.assert_array_equal(sd["w"], np.arange(4.0))
    m.close()


def test_non_tensor_leaf_that_json_cannot_hold_is_a_usage_error(tmp_path):
    m = checkpoint.Manager(str(tmp_path))
    expect_raises(trainrt.UsageError, m.register_state_dict, "x.", {"w": np.zeros(3), "f": object()},
                  contains=("x.f", "object"))
    m.close()


def test_verify_names_a_corrupted_entry_and_restore_falls_back(tmp_path):
    d = str(tmp_path / "ckpt")
    a = np.arange(4096, dtype=np.float64)
    m = checkpoint.Manager(d, keep_last=2)
    m.register("weights", a)
    m.save(1)
    m.wait()
    a += 1
    m.save(2)
    m.wait()
    shard = os.path.join(d, "step_000000000002", "rank_00000.shard")
    with open(shard, "r+b") as f:  # one byte inside the entry's data (after the 4 KiB header)
        f.seek(4096 + 100)
        byte = f.read(1)
        f.seek(4096 + 100)
        f.write(bytes([byte[0] ^ 0xFF]))
    rep = checkpoint.verify(d)
    assert rep.step == 2 and not rep.intact and not rep, rep
    assert any("weights" in p for p in rep.problems), rep.problems
    assert checkpoint.verify(d, step=1).intact
    missing = checkpoint.verify(d, step=7)
    assert not missing.intact and "not found" in missing.problems[0]
    a[...] = -1
    assert m.restore() == 1
    np.testing.assert_array_equal(a, np.arange(4096, dtype=np.float64))
    m.close()
    empty = str(tmp_path / "empty")
    os.mkdir(empty)
    rep = checkpoint.verify(empty)
    assert not rep.intact and rep.step == -1 and "no step" in rep.problems[0]
    expect_raises(trainrt.CheckpointError, checkpoint.verify, os.path.join(empty, "nope"), contains=("nope",))


def test_registration_errors_are_typed(tmp_path):
    m = checkpoint.Manager(str(tmp_path / "m"))
    m.register("w", np.zeros(8, dtype=np.float32))
    e = expect_raises(trainrt.Error, m.register, "w", np.zeros(8, dtype=np.float32), contains=("'w'", "twice"))
    assert isinstance(e, trainrt.UsageError)  # registering a name twice is a bug in the program
    # The same misuse is the same exception wherever it is caught: a blob's name twice, a tensor on
    # a blob's name.
    m.register_state_dict("s.", {"lr": 0.1})
    expect_raises(trainrt.UsageError, m.register_state_dict, "s.", {"lr": 0.2}, contains=("'s.@json'", "twice"))
    expect_raises(trainrt.UsageError, m.register, "s.@json", np.zeros(2, dtype=np.float32), contains=("twice",))
    expect_raises(trainrt.UsageError, m.register, "strided", np.zeros((8, 8), dtype=np.float32)[::2],
                  contains=("'strided'", "not contiguous"))
    expect_raises(trainrt.UsageError, m.register, "list", [1, 2, 3], contains=("'list'",))
    expect_raises(trainrt.UsageError, m.save, -1, contains=("step",))
    expect_raises(trainrt.UsageError, m.save, 1, {"k": object()}, contains=("'k'",))
    expect_raises(trainrt.UsageError, checkpoint.Manager, str(tmp_path / "k"), keep_last=0, contains=("keep_last",))
    expect_raises(trainrt.UsageError, m.register, "dev7", FakeTensor(device_type=7), contains=("device type 7",))
    closed = checkpoint.Manager(str(tmp_path / "closed"))
    closed.close()
    closed.close()  # twice is fine
    expect_raises(trainrt.UsageError, closed.save, 1, contains=("closed",))
    if not trainrt.has_cuda:  # CUDA builds take device tensors (test_cuda.py, on a GPU)
        expect_raises(trainrt.UsageError, m.register, "gpu", FakeTensor(device_type=2), contains=("without CUDA",))
    m.close()


def test_stop_signal_sets_the_flag(tmp_path):
    m = checkpoint.Manager(str(tmp_path))  # installs the handlers
    assert not m.stop_requested()
    os.kill(os.getpid(), signal.SIGUSR1)
    assert m.stop_requested() and checkpoint.stop_requested()
    m.close()


def test_save_and_exit_commits_and_exits_75(tmp_path):
    d = str(tmp_path)
    script = textwrap.dedent(f"""
        import numpy as np, trainrt
        from trainrt import checkpoint
        trainrt.init(quiet=True)
        m = checkpoint.Manager({d!r})
        a = np.full(100, 7.0)
        m.register("a", a)
        print("before exit", flush=False)
        m.save_and_exit(5, {{"why": "signal"}})
        print("not reached")
    """)
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert p.returncode == 75, (p.returncode, p.stdout, p.stderr)
    assert "before exit" in p.stdout and "not reached" not in p.stdout, p.stdout
    rep = checkpoint.verify(d)
    assert rep.intact and rep.step == 5 and rep.metadata == {"why": "signal"}, rep



def test_with_block_keeps_the_error_on_its_way_out(tmp_path, capsys):
    # An error inside `with Manager(...)` is what propagates, even when closing fails too (a save
    # whose commit fails); close()'s error is printed, not raised over it.
    m = checkpoint.Manager(tmp_path / "c")
    m.register("a", np.zeros(4, dtype=np.float32))

    def close_fails(*_args, **_kwargs):
        raise trainrt.CheckpointError("checkpoint: the save in flight failed")

    try:
        with m:
            m._settle_pending = close_fails
            raise ValueError("training failed")
    except ValueError as e:
        assert str(e) == "training failed"
    else:
        raise AssertionError("the ValueError did not propagate")
    assert "the save in flight failed" in capsys.readouterr().err
    # Without an error in the block, close()'s error is raised as before.
    m2 = checkpoint.Manager(tmp_path / "d")
    m2.register("a", np.zeros(4, dtype=np.float32))
    import pytest
    with pytest.raises(trainrt.CheckpointError):
        with m2:
            m2._settle_pending = close_fails
