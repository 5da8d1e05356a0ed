"""train-runtime from Python: the job's world (ranks, host collectives, byte exchange over the
PMIx session) and fault-tolerant checkpoints (trainrt.checkpoint). docs/python.md.

    import trainrt
    world = trainrt.init()
    world.allreduce(t, op="avg")      # in place, CPU tensors / numpy arrays, zero-copy

Every blocking call releases the GIL. Errors are trainrt.Error and its subclasses PeerError (a rank
or the transport failed), UsageError (this program called the API wrongly; also a ValueError) and
CheckpointError (and its WorldSizeError).
"""
from __future__ import annotations

import threading
from typing import Any, List, Optional

from . import _trainrt
from ._trainrt import CheckpointError, Error, PeerError, UsageError, WorldSizeError, WORLD_SIZE_EXIT_CODE

__version__ = _trainrt.__version__
has_cuda: bool = _trainrt.has_cuda

__all__ = [
    "init", "world", "is_initialized", "World",
    "Error", "PeerError", "UsageError", "CheckpointError", "WorldSizeError", "WORLD_SIZE_EXIT_CODE", "has_cuda",
]

_lock = threading.Lock()
_world: Optional["World"] = None


def _as_dlpack_ready(t: Any) -> Any:
    """The same memory in a form DLPack exports: a torch tensor that requires grad cannot be
    exported, its detached alias (same storage) can, so in-place results land in the caller's
    tensor."""
    if getattr(t, "requires_grad", False) and hasattr(t, "detach"):
        t = t.detach()
    # Older torch (1.13) cannot export bool tensors through DLPack; the uint8 view is the same bytes.
    if type(t).__module__.startswith("torch") and str(getattr(t, "dtype", "")) == "torch.bool":
        t = t.view(dtype=__import__("torch").uint8)
    return t


class World:
    """This process's place in the job and its host collectives (use trainrt.init())."""

    __slots__ = ("_w",)

    def __init__(self, native: "_trainrt.World") -> None:
        self._w = native

    @property
    def rank(self) -> int:
        return self._w.rank

    @property
    def world_size(self) -> int:
        return self._w.world_size

    @property
    def local_rank(self) -> int:
        return self._w.local_rank

    @property
    def local_world_size(self) -> int:
        return self._w.local_world_size

    @property
    def node_id(self) -> int:
        return self._w.node_id

    @property
    def job_id(self) -> str:
        """The PMIx namespace; "single" for a one-process world."""
        return self._w.job_id

    @property
    def restart_count(self) -> int:
        """SLURM_RESTART_COUNT: how often Slurm requeued this job."""
        return self._w.restart_count

    @property
    def backend(self) -> str:
        """The host communicator: "shm" inside one node, "gloo" or "hierarchical" across nodes."""
        return self._w.backend

    def describe(self) -> str:
        """One line for logs: ranks, backends, placement, restart count."""
        return self._w.describe()

    def allreduce(self, tensor: Any, op: str = "sum") -> Any:
        """Reduces `tensor` across all ranks in place and returns it. CPU torch tensors, numpy
        arrays or any __dlpack__ object, C-contiguous, float32/float64/float16/bfloat16/int32/int64.
        op: "sum", "avg", "min" or "max". Deterministic (a fixed order). Releases the GIL."""
        self._w.allreduce(_as_dlpack_ready(tensor), op)
        return tensor

    def allreduce_async(self, tensor: Any, op: str = "sum") -> "_trainrt.Work":
        """allreduce, started and returned at once: a Work whose wait() (GIL released) returns
        when the tensor holds the result, or raises the collective's error; done() polls. Do not
        touch the tensor before wait(). Collectives run in call order, blocking ones included.
        A Work dropped unwaited waits in its destructor (its error then only goes to stderr)."""
        return self._w.allreduce_async(_as_dlpack_ready(tensor), op)

    def barrier(self) -> None:
        """Returns once every rank has entered it. Releases the GIL."""
        self._w.barrier()

    def broadcast_bytes(self, data: Optional[bytes], root: int = 0) -> bytes:
        """Root's `data` on every rank (others may pass None). Over the bootstrap session (PMIx):
        meant for small control data (addresses, configs), not tensors. Waits first for any save
        of this world's Managers still in flight (its commit uses the same session)."""
        return self._w.broadcast_bytes(None if data is None else bytes(data), root)

    def allgather_bytes(self, data: bytes) -> List[bytes]:
        """Every rank's `data` (sizes may differ), indexed by rank. Over the bootstrap session:
        waits first for any save of this world's Managers still in flight."""
        return self._w.allgather_bytes(bytes(data))

    def publish_bytes(self, key: str, data: bytes) -> None:
        """Makes `data` visible to every rank under `key` (not a collective). A key is published
        once per rank; lookup_bytes(owner, key) names the rank that published it."""
        self._w.publish_bytes(key, bytes(data))

    def lookup_bytes(self, owner: int, key: str) -> bytes:
        """What rank `owner` published under `key`, waiting (up to the timeout) until it has."""
        return self._w.lookup_bytes(owner, key)

    def __repr__(self) -> str:
        return f"<trainrt.World {self.describe()}>"


def init(timeout: float = 300.0, quiet: bool = False, nccl: str = "off") -> World:
    """Joins the job: PMIx under srun --mpi=pmix or mpirun, else a one-process world. Idempotent:
    later calls return the same World (their arguments are then ignored).

    timeout: seconds a peer may stay silent (bootstrap and collectives) before PeerError.
    quiet:   do not announce the one-process fallback on stderr.
    nccl:    "off" (default; PyTorch brings its own NCCL), "auto" or "required": the runtime's own
             NCCL communicator, used by nothing in this module yet.
    """
    global _world
    with _lock:
        if _world is None:
            _world = World(_trainrt.World(float(timeout), bool(quiet), str(nccl)))
        return _world


def world() -> World:
    """The World of init(); UsageError before init()."""
    if _world is None:
        raise UsageError("trainrt.init() has not been called")
    return _world


def is_initialized() -> bool:
    return _world is not None


from . import checkpoint  # noqa: E402  (needs init and World above)
