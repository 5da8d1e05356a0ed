"""A tiny runner for the trainrt Python tests: every `test_*` function of the calling module runs
in order; any exception fails the script (exit 1). Skip: raise Skip("why") (exit 77, SKIPPED)."""
import atexit
import os
import shutil
import sys
import tempfile
import traceback


class Skip(Exception):
    pass


def run(namespace, only=None):
    names = [n for n in namespace if n.startswith("test_") and callable(namespace[n])]
    if only:
        names = [n for n in names if n in only]
    failed = 0
    rank = os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PMIX_RANK", "0"))
    for name in names:
        try:
            namespace[name]()
            print(f"[rank {rank}] PASS {name}", flush=True)
        except Skip as e:
            print(f"SKIPPED: {name}: {e}", flush=True)
            sys.exit(77)
        except Exception:
            failed += 1
            print(f"[rank {rank}] FAIL {name}", flush=True)
            traceback.print_exc()
    if failed:
        print(f"[rank {rank}] {failed} of {len(names)} failed", flush=True)
        sys.exit(1)
    print(f"[rank {rank}] all {len(names)} passed", flush=True)


def require_mpirun():
    """The multi-process scripts run only under mpirun (a PMIx server); anywhere else they skip."""
    if "PMIX_RANK" not in os.environ:
        print("SKIPPED: run under mpirun (PMIX_RANK is not set)", flush=True)
        sys.exit(77)


def expect_raises(exc_type, fn, *args, contains=(), **kw):
    """Calls fn; it must raise exc_type whose message holds every string of `contains`."""
    try:
        fn(*args, **kw)
    except exc_type as e:
        msg = str(e)
        for c in contains:
            assert c in msg, f"{exc_type.__name__} message {msg!r} lacks {c!r}"
        return e
    raise AssertionError(f"{getattr(fn, '__name__', fn)} did not raise {exc_type.__name__}")


def tmpdir(prefix="trainrt-py-"):
    """A fresh directory, removed when this process exits."""
    d = tempfile.mkdtemp(prefix=prefix)
    pid = os.getpid()
    # Only by this process: a forked child runs the parent's atexit handlers too.
    atexit.register(lambda: os.getpid() == pid and shutil.rmtree(d, ignore_errors=True))
    return d
