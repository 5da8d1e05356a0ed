"""Fault-tolerant checkpoints from Python: trainrt's checkpoint::Manager over the job's bootstrap
session (docs/checkpoint.md for the format, docs/python.md for this surface).

    mgr = trainrt.checkpoint.Manager("/scratch/ckpt", keep_last=2)
    mgr.register_state_dict("model.", model.state_dict(), replicated=True)
    step = mgr.restore()                 # None: nothing to resume
    ...
    fut = mgr.save(step)                 # returns once staged; written in the background
    fut.done(), fut.result()             # committed yet? / wait for it (trainrt.checkpoint.SaveFuture)
    if mgr.stop_requested():             # SIGTERM / SIGUSR1 (Slurm's --signal, scancel)
        mgr.save_and_exit(step)          # commits, exits 75 (requeue)

Registered tensors are saved and restored in place (their memory, no copies by Python): keep
using the same tensor objects, and do not resize or replace them after registering.
"""
from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from . import _dtensor, _trainrt, _as_dlpack_ready, init, is_initialized, world as _world
from ._optimizer_state import materialize_optimizer_state as _materialize_optimizer_state
from ._save_future import SaveFuture, SaveResult
from ._state_tree import assign as _assign, get as _get, is_tensor as _is_tensor, jsonable as _jsonable, key as _key, \
    set_at as _set, walk as _walk
from ._trainrt import CheckpointError, Error, UsageError

__all__ = ["Manager", "Shard", "SaveFuture", "SaveResult", "VerifyReport", "verify", "stop_requested",
           "CheckpointError"]


def _dims(what: str, value: Any) -> Tuple[int, ...]:
    try:
        dims = tuple(value)
    except TypeError:
        raise UsageError(f"checkpoint: Shard {what} must be a sequence of ints, got {value!r}") from None
    for d in dims:
        if isinstance(d, bool) or not isinstance(d, int) and not hasattr(d, "__index__") or int(d) < 0:
            raise UsageError(f"checkpoint: Shard {what} {value!r} holds {d!r}: every entry must be an int >= 0")
    return tuple(int(d) for d in dims)


@dataclass(frozen=True)
class Shard:
    """This rank's chunk of a global tensor: the registered tensor holds the elements at `offsets`
    (one per dimension) of a tensor of `global_shape`, row-major in its own shape. Chunks may be
    uneven; a rank without a chunk registers an empty one. save() checks across ranks that the
    chunks of a name tile its tensor exactly; restore() reassembles them at any world size or split
    and checks the content (docs/checkpoint.md "Sharded tensors")."""
    global_shape: Tuple[int, ...]
    offsets: Tuple[int, ...]

    def __post_init__(self) -> None:
        g, o = _dims("global_shape", self.global_shape), _dims("offsets", self.offsets)
        if len(g) != len(o):
            raise UsageError(f"checkpoint: Shard global_shape {g} and offsets {o} differ in length")
        object.__setattr__(self, "global_shape", g)
        object.__setattr__(self, "offsets", o)


@dataclass(frozen=True)
class VerifyReport:
    """What verify() found. `intact`: the step is committed and every shard and entry matches its
    checksum (what restore requires). `problems`: one line each, naming the shard and entry."""
    directory: str
    step: int                       # the step checked; -1 when there was none
    intact: bool
    problems: List[str]
    metadata: Dict[str, str] = field(default_factory=dict)
    world_size: int = 0
    bytes: int = 0
    entries: List[Dict[str, Any]] = field(default_factory=list)   # name, rank, dtype, shape, ...
    steps: List[Dict[str, Any]] = field(default_factory=list)     # every step found, newest first

    def __bool__(self) -> bool:
        return self.intact


def stop_requested() -> bool:
    """True once SIGTERM or SIGUSR1 arrived (handlers installed by the first Manager)."""
    return _trainrt.stop_requested()


def _path(p: Any) -> str:
    """A directory argument as the runtime takes it: a str, bytes (os.fsdecode'd, never str(b'...'),
    which would name a folder "b'...'") or any os.PathLike. Anything else, an empty path, a NUL
    character (the C side would stop there) or a name that is not UTF-8 (the C side takes UTF-8) is
    a UsageError naming it."""
    try:
        p = os.fspath(p)
    except TypeError:
        raise UsageError(f"checkpoint: a directory must be a str, bytes or os.PathLike, got a {type(p).__name__}") \
            from None
    if isinstance(p, bytes):
        p = os.fsdecode(p)
    if not p:
        raise UsageError("checkpoint: the directory is an empty path")
    if "\0" in p:
        raise UsageError(f"checkpoint: the directory {p!r} holds a NUL character")
    try:
        p.encode("utf-8")
    except UnicodeEncodeError:
        raise UsageError(f"checkpoint: the directory {p!r} is not valid UTF-8 (bytes that are not UTF-8 cannot reach "
                         "the runtime); rename it") from None
    return p


class Manager:
    """Checkpoints of this job's registered state into `directory` (see the module docstring).

    The world is trainrt.init()'s (called here if it was not). keep_last: committed steps kept.
    verify_before_load: restore() touches the tensors only once every rank verified the step (one
    more copy). verbose: progress lines on stderr (None: rank 0 only). Creating a Manager installs the
    runtime's SIGTERM/SIGUSR1 handlers (they set the flag stop_requested() reads, replacing any
    Python handler of those two signals)."""

    def __init__(self, directory: "str | bytes | os.PathLike", keep_last: int = 2, *,
                 verify_before_load: bool = False, verbose: Optional[bool] = None) -> None:
        directory = _path(directory)
        w = _world() if is_initialized() else init()
        self._world = w
        # verbose: the runtime's progress lines (commits, removed and skipped steps, restores) on
        # stderr; None: rank 0's only.
        log = (w.rank == 0) if verbose is None else bool(verbose)
        self._m = _trainrt.Manager(w._w, directory, int(keep_last), bool(verify_before_load), log)
        self._tensors: Dict[str, Any] = {}     # name -> the caller's object, kept alive
        # Non-tensor values saved as one JSON entry per registration:
        # blob name -> [(key, read the live value, write a restored value)]
        self._extras: Dict[str, List[Tuple[str, Callable[[], Any], Callable[[Any], None]]]] = {}
        # DTensor boxes held by several ranks (Replicate beside Shard): (local tensor, the process
        # groups of its Replicate mesh dimensions), refilled by broadcast after every restore.
        self._replicas: List[Tuple[Any, List[Any]]] = []
        self._pending: Optional[SaveFuture] = None   # the last save(), until something settles it

    @property
    def _native(self) -> "_trainrt.Manager":
        if self._m is None:
            raise UsageError("checkpoint: this Manager is closed")
        return self._m

    # ------------------------------------------------------------------ registration
    def register(self, name: str, tensor: Any, replicated: bool = False, *, shard: Optional[Shard] = None) -> None:
        """Saves and restores `tensor` in place under `name`. CPU tensors/arrays of any element type
        (float32/64/16, bfloat16, int32/64 as typed entries; others as bytes), CUDA tensors of the
        typed ones where this trainrt was built with CUDA. `replicated`: the same on every rank
        (data-parallel weights): restorable at another world size. `shard`: `tensor` is this rank's
        chunk of a global tensor (a typed one), restorable at any world size and split. A DTensor
        is placed by its mesh and placements (see register_state_dict)."""
        if not isinstance(name, str):
            raise UsageError(f"checkpoint: an entry name must be a str, got {type(name).__name__}")
        if _dtensor.is_dtensor(tensor):
            if shard is not None:
                raise UsageError(f"checkpoint: tensor '{name}' is a DTensor: its placements say where its local shard "
                                 "sits, so it takes no shard=")
            self._register_dtensor(name, tensor, replicated)
            return
        native_shard = None
        if shard is not None:
            if not isinstance(shard, Shard):
                raise UsageError(f"checkpoint: tensor '{name}': shard= takes a trainrt.checkpoint.Shard, got a "
                                 f"{type(shard).__name__}")
            if replicated:
                raise UsageError(f"checkpoint: tensor '{name}' is registered both replicated and as a Shard: choose one")
            ndim = len(getattr(tensor, "shape", ()))
            if len(shard.global_shape) != ndim:
                raise UsageError(f"checkpoint: tensor '{name}' has {ndim} dimensions, its Shard global_shape "
                                 f"{shard.global_shape} has {len(shard.global_shape)}")
            native_shard = (list(shard.global_shape), list(shard.offsets))
        self._native.register_tensor(name, _as_dlpack_ready(tensor), bool(replicated), native_shard)
        self._tensors[name] = tensor

    def _register_dtensor(self, name: str, dt: Any, replicated: bool) -> None:
        """A DTensor's local shard, placed by its mesh and placements (trainrt/_dtensor.py)."""
        p = _dtensor.plan(name, dt)
        if p.global_shape is None:
            self.register(name, p.local, True)
            return
        local = p.local
        if not p.primary:  # another rank saves this box; this one receives it after restore
            local = p.local.new_empty((0,) + tuple(p.local.shape[1:]))
        self.register(name, local, shard=Shard(p.global_shape, p.offsets))
        if p.replicate_groups:
            self._replicas.append((p.local, p.replicate_groups))

    def register_state_dict(self, prefix: str, state_dict: Mapping[str, Any], replicated: bool = False) -> List[str]:
        """Registers every tensor of `state_dict` (nested dicts and lists too, e.g. an optimizer's)
        as prefix + dotted key. Non-tensor leaves (an optimizer's lr, betas, step counts, ...) that
        JSON can hold are saved together as one entry, prefix + "@json", and written back into
        `state_dict` by restore(): call optimizer.load_state_dict(state_dict) after restore() for
        them to take effect. A leaf JSON cannot hold is a UsageError naming it. Returns the
        registered tensor names.

        DTensors (FSDP2's fully_shard, tensor parallelism; 1-D or 2-D meshes) are registered by
        their placements, whatever `replicated` says: Shard placements as chunks of the global
        tensor (restorable at another world size or mesh), all-Replicate ones as replicated
        entries; Partial and _StridedShard placements are a UsageError naming the tensor.
        `replicated` applies to the plain tensors beside them (buffers, Adam's step counts).

        For a torch optimizer use register_optimizer(): optimizer.state_dict() misses the state
        torch creates at the first step(), and optimizer.load_state_dict() replaces the state
        tensors, so later saves would miss them."""
        if not isinstance(state_dict, Mapping):
            raise UsageError(f"checkpoint: register_state_dict takes a mapping, got {type(state_dict).__name__}")
        names, extras = [], []
        for path, value in _walk(state_dict, ()):
            if _dtensor.is_dtensor(value):
                name = prefix + _key(path)
                self._register_dtensor(name, value, replicated)
                names.append(name)
            elif _is_tensor(value):
                name = prefix + _key(path)
                self.register(name, value, replicated)
                names.append(name)
            elif _jsonable(value):
                extras.append(path)
            else:
                raise UsageError(f"checkpoint: '{prefix}{_key(path)}' is a {type(value).__name__}: neither a tensor "
                                 "nor JSON-serialisable")
        self._register_extras(prefix + "@json", [
            (_key(p), (lambda p=p: _get(state_dict, p)), (lambda v, p=p: _set(state_dict, p, v))) for p in extras
        ], replicated)
        return names

    def register_optimizer(self, prefix: str, optimizer: Any, replicated: bool = False) -> List[str]:
        """Registers a torch optimizer's live state in place: every state tensor of parameter i
        (its index over param_groups) as prefix + "state.<i>.<name>", and its non-tensor state and
        hyper-parameters (lr, betas, ...) as one JSON entry, prefix + "@json", written straight back
        into optimizer.state and optimizer.param_groups by restore(). No load_state_dict needed
        (and none allowed after registering: it replaces the state tensors).

        Torch creates most optimizers' state at the first step(). An optimizer with no state yet is
        given it here, as torch.distributed.checkpoint does: zero gradients, one step() with lr 0,
        then every state tensor zeroed, so a run that restores nothing continues as a fresh one
        (exact for Adam, AdamW, SGD with momentum and no dampening, RMSprop; check others).
        Parameters must not hold gradients then. DTensor state (FSDP2) is registered by its
        placements, as in register_state_dict. Returns the registered tensor names."""
        import torch  # only this method needs torch

        params = [p for g in optimizer.param_groups for p in g["params"]]
        if not any(optimizer.state.get(p) for p in params):
            _materialize_optimizer_state(torch, optimizer, params)
        missing = [i for i, p in enumerate(params) if p.requires_grad and not optimizer.state.get(p)]
        if missing and any(optimizer.state.get(p) for p in params):
            raise UsageError(f"checkpoint: optimizer parameters {missing[:8]} have no state while others do: "
                             "register after a step() that updated every parameter")
        names, extras = [], []
        for i, p in enumerate(params):
            st = optimizer.state.get(p, {})
            for k, v in st.items():
                key = f"state.{i}.{k}"
                if _dtensor.is_dtensor(v):
                    self._register_dtensor(prefix + key, v, replicated)
                    names.append(prefix + key)
                elif isinstance(v, torch.Tensor):
                    self.register(prefix + key, v, replicated)
                    names.append(prefix + key)
                elif _jsonable(v):
                    extras.append((key, (lambda st=st, k=k: st[k]), (lambda x, st=st, k=k: _assign(st, k, x))))
                else:
                    raise UsageError(f"checkpoint: '{prefix}{key}' is a {type(v).__name__}: neither a tensor nor "
                                     "JSON-serialisable")
        for gi, g in enumerate(optimizer.param_groups):
            for k, v in g.items():
                if k == "params":
                    continue
                key = f"param_groups.{gi}.{k}"
                if not _jsonable(v):
                    raise UsageError(f"checkpoint: '{prefix}{key}' is a {type(v).__name__}: not JSON-serialisable")
                extras.append((key, (lambda g=g, k=k: g[k]), (lambda x, g=g, k=k: _assign(g, k, x))))
        self._register_extras(prefix + "@json", extras, replicated)
        return names

    def _register_extras(self, blob: str, extras, replicated: bool) -> None:
        if not extras:
            return
        self._native.register_blob(blob, bool(replicated))
        self._extras[blob] = extras

    # ------------------------------------------------------------------ save / restore
    def _stage_extras(self) -> None:
        for blob, extras in self._extras.items():
            values = {key: get() for key, get, _ in extras}
            self._native.set_blob(blob, json.dumps(values, sort_keys=True).encode())

    def _unstage_extras(self) -> None:
        for blob, extras in self._extras.items():
            raw = self._native.get_blob(blob)
            try:
                values = json.loads(raw.decode()) if raw else {}
            except ValueError as e:
                raise CheckpointError(f"checkpoint: entry '{blob}' is not the JSON this module writes: {e}") from None
            for key, _, put in extras:
                if key in values:
                    put(values[key])

    @staticmethod
    def _metadata(metadata: Optional[Mapping[str, Any]]) -> Dict[str, str]:
        if metadata is None:
            return {}
        if not isinstance(metadata, Mapping):
            raise UsageError(f"checkpoint: metadata must be a dict, got {type(metadata).__name__}")
        out = {}
        for k, v in metadata.items():
            if not isinstance(k, str):
                raise UsageError(f"checkpoint: metadata key {k!r} is not a str")
            if isinstance(v, str):
                out[k] = v
            elif _jsonable(v):
                out[k] = json.dumps(v)
            else:
                raise UsageError(f"checkpoint: metadata '{k}' is a {type(v).__name__}: neither str nor JSON-serialisable")
        return out

    def save(self, step: int, metadata: Optional[Mapping[str, Any]] = None) -> SaveFuture:
        """Stages every registered tensor and returns a SaveFuture; a background thread writes,
        fsyncs and (once every rank has) commits step `step`. Every rank calls it with the same
        step. metadata: str values stored as they are, other values as their JSON text (rank 0's
        are kept). The previous save is settled first: its error is raised here, as by the next
        wait() or restore()."""
        step = _step(step)
        md = self._metadata(metadata)
        self._settle_pending(self._native.finish)
        self._stage_extras()
        self._native.save(step, md)
        native = self._native
        fut = SaveFuture(step, native.save_done, lambda: self._settle_pending(native.finish, fut))
        self._pending = fut
        return fut

    def wait(self, watch_peers: bool = False) -> Optional[SaveResult]:
        """Blocks (GIL released) until the last save() is committed on every rank and old steps
        are removed; its SaveResult, or None when no save was pending. Raises its error.
        watch_peers=True (every rank must call it so, e.g. after the last step): the ranks agree
        every 0.1 s through the world's host backend whether each save is done, so a rank that
        died raises trainrt.PeerError on the others at once, where the commit alone waits for it
        until the bootstrap's timeout (init()'s, 300 s by default) or until Slurm ends the step
        (KillWait, 30 s by default). No other thread may use the world's collectives meanwhile.
        A Manager that raised so is done: its save waits for the dead rank, so its other calls
        raise trainrt.Error and closing it (or the process's end) does not wait."""
        # No local of the native Manager: a raised error's traceback keeps this frame (and the
        # SaveFuture keeps the error), which must not keep the native Manager alive after close().
        return self._settle_pending(self._native.wait_watching_peers if watch_peers else self._native.wait)

    def _settle_pending(self, collect: Callable[[], Any], only: Optional[SaveFuture] = None) -> Optional[SaveResult]:
        """Runs `collect` (the native call that finishes the pending save) and hands its outcome to
        the pending SaveFuture. `only`: do nothing unless that future is still the pending one."""
        fut = self._pending
        if only is not None and fut is not only:
            return None
        self._pending = None
        try:
            r = collect()
        except BaseException as e:
            collect = None  # this frame stays in e's traceback: not the native Manager with it
            if fut is not None:
                fut._settle(None, e)
            raise
        result = None if r is None else SaveResult(**r)
        if fut is not None:
            fut._settle(result, None if result is not None else
                        CheckpointError(f"checkpoint: step {fut.step}: the runtime had no outcome for this save"))
        return result

    def restore(self) -> Optional[int]:
        """Loads the newest step every rank can verify into the registered tensors (in place) and
        returns it; None when there is none (the tensors untouched)."""
        self._settle_pending(self._native.finish)
        step = self._native.restore()
        if step < 0:
            return None
        self._unstage_extras()
        for local, groups in self._replicas:
            _dtensor.broadcast_replicas(local, groups)
        return step

    @property
    def restored_metadata(self) -> Dict[str, str]:
        """The metadata saved with the step restore() returned ({} before or when none)."""
        return dict(self._native.restored_metadata)

    @property
    def last_restore(self) -> Dict[str, Any]:
        """What the last restore() did: step and source ("memory", "disk"; None when nothing was
        restored), seconds, fallbacks (why newer steps were passed over), the memory tier's copies,
        and phases: [{"phase", "step", "seconds"}] in order (find, memory tier, check, read,
        fingerprint, install; docs/checkpoint.md "Restore"), adding up to seconds when a step was
        restored. The Python side's
        own work after it (blobs, replicated DTensors) is not in it."""
        return self._native.last_restore

    @property
    def directory(self) -> str:
        return self._native.directory

    @property
    def world(self):
        return self._world

    def stop_requested(self) -> bool:
        """True once SIGTERM or SIGUSR1 arrived: save_and_exit() next."""
        return _trainrt.stop_requested()

    def save_and_exit(self, step: int, metadata: Optional[Mapping[str, Any]] = None) -> "NoReturn":  # noqa: F821
        """Saves `step`, waits for its commit on every rank, passes a barrier and exits the
        process with 75 (sbatch templates requeue on it), or 1 when the save failed. A step
        already committed is left as it is (success). Python's stdout/stderr are flushed first;
        no other Python cleanup (atexit, finalizers) runs."""
        md = self._metadata(metadata)
        self._stage_extras()
        sys.stdout.flush()
        sys.stderr.flush()
        self._native.save_and_exit(_step(step), md)

    def close(self) -> None:
        """Waits for a save in flight and releases the staging memory and registered tensors.
        After a PeerError from wait(watch_peers=True) it does not wait (the save waits for the
        dead rank) and raises nothing: in a `with` block the PeerError is what propagates."""
        if self._m is not None:
            try:
                if self._m.peers_failed:
                    fut, self._pending = self._pending, None
                    if fut is not None:  # it never commits: its waiters learn so
                        fut._settle(None, Error(f"checkpoint: step {fut.step}: a rank failed while this save was in "
                                                "flight; it never commits"))
                else:
                    self._settle_pending(self._m.wait)
            finally:
                self._m = None
                self._tensors.clear()
                self._extras.clear()

    def __enter__(self) -> "Manager":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
            return
        # An error is already on its way out of the block: closing must not replace it.
        try:
            self.close()
        except Exception as e:  # noqa: BLE001
            print(f"trainrt: checkpoint: closing the Manager after {exc_type.__name__}: {e}", file=sys.stderr, flush=True)


def _step(step: Any) -> int:
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise UsageError(f"checkpoint: step must be an int >= 0, got {step!r}")
    return step


def verify(directory: "str | bytes | os.PathLike", step: Optional[int] = None) -> VerifyReport:
    """Reads every checksum of one step without a job (what `trainrt-ckpt verify` does): `step`,
    or the newest committed step when None. Never raises for a damaged checkpoint: the report says
    what is wrong. Raises CheckpointError when `directory` cannot be read at all."""
    directory = _path(directory)
    if step is not None:
        _step(step)
    steps = _trainrt.inspect(directory, step)
    if step is not None:
        chosen = next((s for s in steps if s["step"] == step), None)
        if chosen is None:
            return VerifyReport(directory, step, False, [f"step {step}: not found in {directory}"], steps=steps)
    else:
        chosen = next((s for s in steps if s["committed"]), None)
        if chosen is None:
            why = "no committed step" if steps else "no step at all"
            return VerifyReport(directory, -1, False, [f"{directory}: {why}"], steps=steps)
    return VerifyReport(directory, chosen["step"], bool(chosen["intact"]), list(chosen["problems"]),
                        metadata=dict(chosen["metadata"]), world_size=chosen["world_size"], bytes=chosen["bytes"],
                        entries=list(chosen["entries"]), steps=steps)
