"""What Manager.save() returns: the step's commit, which finishes in the background."""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional


@dataclass(frozen=True)
class SaveResult:
    step: int
    stall_seconds: float      # how long save() blocked the caller (the copy into staging)
    persist_seconds: float    # write + fsync + agreement + commit, in the background
    shard_bytes: int
    already_committed: bool   # the step was committed before: nothing was rewritten


class SaveFuture:
    """The commit of one save() on every rank, as concurrent.futures.Future reads it:

        fut = mgr.save(step)       # returns once staged
        ...                        # train on
        fut.done()                 # committed (or failed) yet? never blocks
        fut.result()               # blocks until committed: its SaveResult, or raises its error

    Nothing has to be collected: the next save(), wait(), restore() or close() settles it (and
    raises its error there, as they always did); afterwards result() and exception() only report."""

    __slots__ = ("step", "_lock", "_settled_event", "_result", "_error", "_native_done", "_collect")

    def __init__(self, step: int, native_done: Callable[[], bool], collect: Callable[[], Any]) -> None:
        self.step = step
        self._lock = threading.Lock()
        self._settled_event = threading.Event()  # set once the outcome below is in place
        self._result: Optional[SaveResult] = None
        self._error: Optional[BaseException] = None
        self._native_done = native_done
        self._collect = collect  # blocks until this save is settled on every rank

    def done(self) -> bool:
        """True once the step is committed on every rank or failed; never blocks."""
        native_done = self._native_done  # None once settled
        return self._settled_event.is_set() or (native_done is not None and native_done())

    def result(self, timeout: Optional[float] = None) -> SaveResult:
        """Blocks (GIL released) until the step is committed on every rank; its SaveResult. Raises
        the save's error, or TimeoutError when `timeout` seconds pass first (the save goes on)."""
        self._wait(timeout)
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result

    def exception(self, timeout: Optional[float] = None) -> Optional[BaseException]:
        """The save's error once it is settled (None when it committed); TimeoutError as result()."""
        self._wait(timeout)
        return self._error

    def _wait(self, timeout: Optional[float]) -> None:
        if self._settled_event.is_set():
            return
        if timeout is not None:
            deadline = time.monotonic() + max(0.0, float(timeout))
            while not self.done():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"checkpoint: step {self.step} not committed within {timeout} s")
                time.sleep(min(0.01, left))
        collect = self._collect
        try:
            if collect is not None:
                collect()
        except BaseException:  # noqa: B036 (settled by _collect before it re-raises)
            pass
        # Another thread took this save to settle (its save() or wait() is finishing it): its
        # outcome comes from there.
        self._settled_event.wait()

    def _settle(self, result: Optional[SaveResult], error: Optional[BaseException]) -> None:
        with self._lock:
            if not self._settled_event.is_set():
                self._result, self._error = result, error
                # A settled future holds nothing of its Manager (the native one is freed at close).
                self._native_done = self._collect = None
                self._settled_event.set()

    def __repr__(self) -> str:
        if not self._settled_event.is_set():
            return f"<SaveFuture step={self.step} {'done' if self.done() else 'running'}>"
        return f"<SaveFuture step={self.step} {'failed' if self._error else 'committed'}>"
