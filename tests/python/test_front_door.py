"""The Python front door: save() returns a SaveFuture that the next save/wait/restore settles (its
error kept and raised where it always was), restore() returns Optional[int], and the package ships
typed (py.typed and the extension's stubs, which name every public attribute of the extension)."""
import ast
import os
import shutil

from _checks import expect_raises

for var in list(os.environ):
    if var.startswith("PMIX_"):
        del os.environ[var]

import numpy as np  # noqa: E402

import trainrt  # noqa: E402
from trainrt import _trainrt, checkpoint  # noqa: E402
from trainrt._save_future import SaveFuture  # noqa: E402

trainrt.init(quiet=True)


def _manager(d):
    m = checkpoint.Manager(d, verbose=False)
    a = np.arange(1 << 16, dtype=np.float32)
    m.register("a", a)
    return m, a


def test_restore_is_none_then_the_step(tmp_path):
    m, a = _manager(str(tmp_path))
    assert m.restore() is None
    m.save(4).result()
    a[:] = 0
    assert m.restore() == 4 and a[7] == 7
    m.close()


def test_save_returns_a_future_that_reports_the_commit(tmp_path):
    m, _ = _manager(str(tmp_path))
    fut = m.save(1, {"loss": "1.5"})
    assert isinstance(fut, checkpoint.SaveFuture) and fut.step == 1
    r = fut.result(timeout=60)
    assert isinstance(r, checkpoint.SaveResult) and r.step == 1 and r.shard_bytes > 0
    assert fut.done() and fut.exception() is None and "committed" in repr(fut)
    assert fut.result() is r            # settled: the same result, nothing waited for again
    assert m.wait() is None             # the future took the outcome: nothing pending
    m.close()


def test_the_next_save_settles_the_previous_future(tmp_path):
    m, _ = _manager(str(tmp_path))
    first = m.save(1)
    second = m.save(2)
    assert first.done() and first.result().step == 1   # settled by save(2), no wait() called
    assert m.wait().step == 2 and second.done() and second.result().step == 2
    m.close()


def test_a_failed_background_write_is_raised_by_result_and_kept(tmp_path):
    d = str(tmp_path / "ckpt")
    m, _ = _manager(d)
    m.save(1).result()
    shutil.rmtree(d)
    with open(d, "w") as f:  # the directory gone, a file in its place: the writer cannot create the step
        f.write("x")
    fut = m.save(2)
    err = expect_raises(trainrt.CheckpointError, fut.result, timeout=60, contains=("step 2",))
    assert fut.done() and fut.exception() is err and "failed" in repr(fut)
    m.close()


def test_a_failed_write_is_raised_by_the_next_save_and_the_future_keeps_it(tmp_path):
    d = str(tmp_path / "ckpt")
    m, _ = _manager(d)
    shutil.rmtree(d)
    with open(d, "w") as f:
        f.write("x")
    fut = m.save(1)
    err = expect_raises(trainrt.CheckpointError, m.save, 2, contains=("step 1",))
    assert fut.exception() is err
    expect_raises(trainrt.CheckpointError, fut.result, contains=("step 1",))
    m.close()


def test_result_timeout_leaves_the_save_running():
    collected = []
    fut = SaveFuture(3, lambda: False, lambda: collected.append(1))
    expect_raises(TimeoutError, fut.result, timeout=0.05, contains=("step 3", "0.05"))
    assert collected == [] and not fut.done() and "running" in repr(fut)


def test_the_package_is_typed():
    pkg = os.path.dirname(trainrt.__file__)
    assert os.path.isfile(os.path.join(pkg, "py.typed")), f"{pkg}: no py.typed"
    stub = os.path.join(pkg, "_trainrt.pyi")
    assert os.path.isfile(stub), f"{pkg}: no _trainrt.pyi (nanobind's stubgen runs at build time)"
    tree = ast.parse(open(stub).read(), stub)
    declared = {n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
    declared |= {t.id for n in tree.body if isinstance(n, (ast.Assign, ast.AnnAssign))
                 for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) if isinstance(t, ast.Name)}
    declared |= {a.asname or a.name for n in tree.body if isinstance(n, ast.ImportFrom) for a in n.names}
    public = {n for n in dir(_trainrt) if not n.startswith("_")}
    assert public <= declared, f"the stub lacks {sorted(public - declared)}"
    manager = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Manager")
    methods = {f.name for f in manager.body if isinstance(f, ast.FunctionDef)}
    assert {"save", "finish", "save_done", "wait", "restore"} <= methods, methods
