"""Checks the trainrt Python tests share (they run under pytest: conftest.py, pytest.ini)."""
import os

import pytest

try:
    import torch
except ImportError:  # Debian's python3-torch is expected; without it the torch tests skip
    torch = None

# A test that needs torch: skipped, saying so, where torch cannot be imported (never passed).
needs_torch = pytest.mark.skipif(torch is None, reason="torch is not importable")


def skip_unless_mpirun():
    """The multi-process files run only under mpirun (a PMIx server); anywhere else they skip whole."""
    if "PMIX_RANK" not in os.environ:
        pytest.skip("run under mpirun (PMIX_RANK is not set)", allow_module_level=True)


def expect_raises(exc_type, fn, *args, contains=(), **kw):
    """Calls fn; it must raise exc_type whose message holds every string of `contains`."""
    with pytest.raises(exc_type) as info:
        fn(*args, **kw)
    msg = str(info.value)
    for c in contains:
        assert c in msg, f"{exc_type.__name__} message {msg!r} lacks {c!r}"
    return info.value
