"""pytest's hooks for the trainrt Python tests (CTest runs one file per test through pytest).

CTest knows three outcomes and pytest more. A file is reported skipped (exit 77, CTest's
SKIP_RETURN_CODE) only when nothing in it ran: every test skipped, or the module skipped itself
(pytest's exit 5, "no tests collected", then means that). A file with some tests passed and some
skipped passes; pytest.ini's -rs prints the skip reasons either way. A failure, an error or a file
that holds no test at all stays a failure."""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # _checks, _fake_dlpack

SKIPPED = 77


def pytest_sessionfinish(session, exitstatus):
    stats = session.config.pluginmanager.get_plugin("terminalreporter").stats
    ran = sum(len(stats.get(k, [])) for k in ("passed", "failed", "error", "xfailed", "xpassed"))
    if exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED) and stats.get("skipped") and not ran:
        session.exitstatus = SKIPPED
