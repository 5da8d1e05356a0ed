"""PyTorch Distributed Checkpoint (DCP) storage in trainrt's checkpoint format (docs/python.md
"DCP storage"): DCP keeps planning and resharding, the bytes land as trainrt steps.

    import torch.distributed.checkpoint as dcp
    import trainrt.dcp
    dcp.save(state_dict, storage_writer=trainrt.dcp.Writer("/scratch/ckpt"))     # or async_save
    dcp.load(state_dict, storage_reader=trainrt.dcp.Reader("/scratch/ckpt"))

Each rank's items go into its own shard file (XXH3 per entry, written and fsynced by the C++
writer through the no-follow directory layer); once every rank has written, DCP's coordinator
commits the step with one manifest rename (checkpoint/step_io.hpp). Chunks of tensors that tile
their global tensor (DTensor and FSDP2 shards) are sharded entries, so `trainrt-ckpt
list/verify/export` see global tensors with their fingerprints. DCP's own Metadata is kept as a
JSON attachment (dcp.json, no pickle), checked against the size and XXH3 its manifest holds.

Loading takes the newest step that every rank finds committed and intact (manifest, every shard
header, dcp.json), checks each entry's XXH3 as it reads it, and when a read fails anywhere (a
flipped bit, a shard gone since) the ranks agree and read the next older intact step instead,
naming the rank, entry and step that failed. Steps: Writer(path, step=N), or a checkpoint_id
"PATH/<anything>N" under the Writer's path, else one above the newest committed step.
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
import sys
import threading
from typing import Any, Dict, List, Optional, Tuple

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.metadata import Metadata, MetadataIndex, StorageMeta
from torch.distributed.checkpoint.planner import SavePlan, SavePlanner, WriteItemType
from torch.distributed.checkpoint.staging import AsyncStager
from torch.distributed.checkpoint.storage import StorageWriter, WriteResult
from torch.futures import Future

from . import _dcp_meta, _trainrt
from ._trainrt import CheckpointError, UsageError

__all__ = ["Writer", "Reader", "StorageInfo", "committed_steps"]

ATTACHMENT = "dcp.json"
_SHARD_RECORD = "trainrt:shard"  # the fqn of the extra WriteResult carrying a rank's shard record
_TYPED = {torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.int64}
try:  # what FileSystemWriter stamps on its metadata
    from torch.distributed.checkpoint.filesystem import CURRENT_DCP_VERSION as _DCP_VERSION
except ImportError:
    _DCP_VERSION = "1.0.0"
_STEP_DIR = re.compile(r"^step_(\d{12,19})$")


@dataclasses.dataclass(frozen=True)
class StorageInfo:
    """Where one DCP item lives in a trainrt step (Metadata.storage_data's values)."""
    rank: int
    entry: str


@dataclasses.dataclass(frozen=True)
class _Local:  # a rank's SavePlan.storage_data on the way to the coordinator
    step: int


@dataclasses.dataclass(frozen=True)
class _Assigned:  # the coordinator's answer in each rank's SavePlan.storage_data
    rank: int
    world_size: int
    step: int
    sharded: frozenset  # fqns this rank stores as chunks of a global tensor


@dataclasses.dataclass(frozen=True)
class _ShardDone:  # storage_data of the extra WriteResult: what commit_step needs of this rank
    record: Dict[str, Any]


def _fspath(p: Any, what: str) -> str:
    try:
        p = os.fsdecode(os.fspath(p))
    except TypeError:
        raise UsageError(f"dcp: {what} must be a str, bytes or os.PathLike, got a {type(p).__name__}") from None
    if not p or "\0" in p:
        raise UsageError(f"dcp: {what} {p!r} is empty or holds a NUL character")
    return p


def _step_arg(step: Any) -> Optional[int]:
    if step is None:
        return None
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise UsageError(f"dcp: step must be an int >= 0, got {step!r}")
    return step


def committed_steps(path: str) -> List[int]:
    """Steps of `path` with a manifest (committed; not yet checked), newest first."""
    try:
        names = os.listdir(path)
    except FileNotFoundError:
        return []
    steps = [int(m.group(1)) for m in map(_STEP_DIR.match, names) if m]
    return sorted((s for s in steps if os.path.isfile(os.path.join(path, f"step_{s:012d}", "MANIFEST.json"))),
                  reverse=True)


def _resolve(path: Optional[str], step: Optional[int], checkpoint_id: Any, kind: str) -> Tuple[str, Optional[int]]:
    """(directory, step) of a Writer/Reader after DCP's reset(checkpoint_id)."""
    if not checkpoint_id:
        return path, step  # path None: DCP's reset(checkpoint_id) is still to come (_need_path)
    cid = os.path.normpath(_fspath(checkpoint_id, "checkpoint_id"))
    if path is None or cid == os.path.normpath(path):
        return cid, step
    parent, leaf = os.path.split(cid)
    m = re.search(r"(\d+)$", leaf)
    if parent != os.path.normpath(path) or not m:
        raise UsageError(f"dcp: checkpoint_id {cid!r} is neither the {kind}'s directory {path!r} nor a name ending in "
                         f"a step number inside it (like {os.path.join(path, 'step-100')!r})")
    if step is not None and step != int(m.group(1)):
        raise UsageError(f"dcp: checkpoint_id {cid!r} names step {int(m.group(1))}, the {kind} was given step={step}")
    return path, int(m.group(1))


def _need_path(path: Optional[str], kind: str) -> str:
    if path is None:
        raise UsageError(f"dcp: the {kind} has no directory: give {kind}(path), or a checkpoint_id to dcp")
    return path


def _log(verbose: bool, msg: str) -> None:
    if verbose:
        print(f"trainrt [rank {dist.get_rank() if dist.is_initialized() else 0}] {msg}", file=sys.stderr, flush=True)


def _bytes_of(t: torch.Tensor) -> torch.Tensor:
    """The bytes of a contiguous tensor as a uint8 view (dtypes the format has no name for)."""
    return t.reshape(-1).view(torch.uint8)


class _CheckpointId:
    """What DCP asks of a Writer and a Reader alike about checkpoint ids: the directory is the id."""

    path: Optional[str]

    @property
    def checkpoint_id(self) -> str:
        return self.path

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: Any) -> bool:
        return isinstance(checkpoint_id, (str, bytes, os.PathLike))


class Writer(_CheckpointId, StorageWriter, AsyncStager):
    """DCP StorageWriter into trainrt's format at `path` (see the module docstring).

    step: the step to write (else from checkpoint_id, else newest committed + 1). keep_last:
    committed steps kept after a commit (the newest intact one always is). verbose: progress on
    stderr (None: the coordinator only). cache_staged_state_dict: async_save copies into CPU
    buffers kept between saves (pinned where CUDA is) instead of allocating a copy each time; wait
    for an async_save's future before the next one, as with DCP's own cache."""

    def __init__(self, path: Any = None, step: Optional[int] = None, *, keep_last: int = 2,
                 verbose: Optional[bool] = None, cache_staged_state_dict: bool = True) -> None:
        super().__init__()
        self._root = None if path is None else _fspath(path, "path")
        self._given_step = _step_arg(step)
        if isinstance(keep_last, bool) or not isinstance(keep_last, int) or keep_last < 1:
            raise UsageError(f"dcp: keep_last must be an int >= 1, got {keep_last!r}")
        self.keep_last, self.verbose, self.cache_staged_state_dict = keep_last, verbose, cache_staged_state_dict
        self._staged: Any = None
        self._retire: Optional[threading.Thread] = None
        self.reset()

    # ---------------------------------------------------------------- DCP's StorageWriter
    def reset(self, checkpoint_id: Any = None) -> None:
        self.path, self._fixed_step = _resolve(self._root, self._given_step, checkpoint_id, "Writer")
        self._step: Optional[int] = None
        self._coordinator = True

    def set_up_storage_writer(self, is_coordinator: bool, *args: Any, **kwargs: Any) -> None:
        self._coordinator = is_coordinator

    def prepare_local_plan(self, plan: SavePlan) -> SavePlan:
        self._join_retire()
        steps = committed_steps(_need_path(self.path, "Writer"))
        self._step = self._fixed_step if self._fixed_step is not None else (steps[0] + 1 if steps else 0)
        return dataclasses.replace(plan, storage_data=_Local(self._step))

    def prepare_global_plan(self, plans: List[SavePlan]) -> List[SavePlan]:
        chosen = {p.storage_data.step for p in plans if isinstance(p.storage_data, _Local)}
        if len(chosen) != 1:
            raise UsageError(f"dcp: the ranks chose different steps {sorted(chosen)} (their views of {self.path} "
                             "differ): give Writer(path, step=N)")
        step = chosen.pop()
        if step in committed_steps(self.path):
            raise CheckpointError(f"dcp: step {step} is already committed in {self.path}; a committed step is never "
                                  "rewritten (save another step)")
        # A tensor whose chunks tile it, at most one per rank, in a dtype the format names, becomes
        # a sharded entry (a global tensor with a fingerprint); others are entries of their rank.
        chunks: Dict[str, List[Tuple[int, Any]]] = {}
        for r, p in enumerate(plans):
            for it in p.items:
                if it.type != WriteItemType.BYTE_IO and it.tensor_data is not None:
                    chunks.setdefault(it.index.fqn, []).append((r, it.tensor_data))
        sharded = set()
        for fqn, cs in chunks.items():
            ranks = [r for r, _ in cs]
            td = cs[0][1]
            volume = sum(int(torch.Size(t.chunk.sizes).numel()) for _, t in cs)
            if (len(set(ranks)) == len(ranks) and td.properties.dtype in _TYPED and volume == td.size.numel()
                    and not fqn.startswith("dcp:")):
                sharded.add(fqn)
        return [dataclasses.replace(p, storage_data=_Assigned(
            r, len(plans), step, frozenset(it.index.fqn for it in p.items if it.index.fqn in sharded)))
            for r, p in enumerate(plans)]

    def write_data(self, plan: SavePlan, planner: SavePlanner) -> Future:
        info = plan.storage_data
        if not isinstance(info, _Assigned):
            raise UsageError("dcp: the plan carries no step from the coordinator (a planner replaced the storage data)")
        step = self._step if self._step is not None else info.step
        items, results = [], []
        for wi in plan.items:
            fqn = wi.index.fqn
            if fqn.startswith("dcp:") or fqn.startswith("trainrt:"):
                raise UsageError(f"dcp: state dict key {fqn!r}: names starting 'dcp:' or 'trainrt:' are the format's own")
            data = planner.resolve_data(wi)
            if wi.type == WriteItemType.BYTE_IO:
                name, payload = f"dcp:bytes:{fqn}", data.getvalue()
                items.append((name, payload, None, False))
                size = len(payload)
            else:
                t = data.detach()
                if t.device.type != "cpu":
                    t = t.to("cpu")
                t = t.contiguous()
                chunk = wi.tensor_data.chunk
                if tuple(t.shape) != tuple(chunk.sizes):
                    raise CheckpointError(f"dcp: '{fqn}' resolved to shape {tuple(t.shape)}, its plan says "
                                          f"{tuple(chunk.sizes)}")
                sharded = fqn in info.sharded
                offsets = [int(o) for o in chunk.offsets]
                name = fqn if sharded else f"dcp:chunk:{fqn}@{','.join(map(str, offsets))}"
                shard = ([int(s) for s in wi.tensor_data.size], offsets) if sharded else None
                items.append((name, t if t.dtype in _TYPED else _bytes_of(t), shard, False))
                size = t.numel() * t.element_size()
            results.append(WriteResult(index=wi.index, size_in_bytes=size, storage_data=StorageInfo(info.rank, name)))
        # Every shard holds an entry (the format wants one), also where DCP gave this rank no item.
        items.append(("dcp:rank", json.dumps({"rank": info.rank, "items": len(plan.items)}).encode(), None, False))
        try:
            record = _trainrt.write_shard(self.path, step, info.rank, info.world_size, items)
        except Exception:
            _trainrt.discard_shard(self.path, step, info.rank)
            raise
        results.append(WriteResult(index=MetadataIndex(_SHARD_RECORD, [info.rank]), size_in_bytes=record["bytes"],
                                   storage_data=_ShardDone(record)))
        fut: Future = Future()
        fut.set_result(results)
        return fut

    def finish(self, metadata: Metadata, results: List[List[WriteResult]]) -> None:
        records: Dict[int, Dict[str, Any]] = {}
        storage = {}
        for per_rank in results:
            for wr in per_rank:
                if isinstance(wr.storage_data, _ShardDone):
                    records[wr.storage_data.record["rank"]] = wr.storage_data.record
                else:
                    storage[wr.index] = wr.storage_data
        world = len(results)
        if sorted(records) != list(range(world)):
            raise CheckpointError(f"dcp: shard records of ranks {sorted(records)} for a world of {world}: not committed")
        step = self._step if self._step is not None else self._fixed_step
        md = dataclasses.replace(metadata, storage_data=storage, storage_meta=self.storage_meta(),
                                 version=metadata.version or _DCP_VERSION)
        verbose = bool(self._coordinator if self.verbose is None else self.verbose)
        _trainrt.commit_step(self.path, step, world, [records[r] for r in range(world)], {"trainrt.dcp": "1"},
                             {ATTACHMENT: _dcp_meta.dumps(md)}, self.keep_last, verbose, retire=False)
        # Removing old steps is no part of the commit (a GiB of shards takes a quarter of a second
        # to unlink): a thread does it, joined by the next save, close(), or the interpreter's exit.
        self._join_retire()
        self._retire = threading.Thread(target=_trainrt.retire_steps, name="trainrt-dcp-retire",
                                        args=(self.path, step, self.keep_last, verbose))
        self._retire.start()

    def _join_retire(self) -> None:
        if self._retire is not None:
            self._retire.join()
            self._retire = None

    def storage_meta(self) -> Optional[StorageMeta]:
        return StorageMeta(checkpoint_id=self.path)

    # ---------------------------------------------------------------- async_save's staging
    _synchronize_after_execute = False  # stage() returns a finished copy

    def stage(self, state_dict: Dict[str, Any]) -> Dict[str, Any]:
        """A copy of `state_dict` on the CPU for async_save to write while training goes on;
        with cache_staged_state_dict its buffers are reused by every later stage()."""
        from torch.distributed._state_dict_utils import _copy_state_dict, _create_cpu_state_dict

        if self._staged is None or not self.cache_staged_state_dict:
            staged = _create_cpu_state_dict(state_dict, pin_memory=torch.cuda.is_available())
            if not self.cache_staged_state_dict:
                return _copy_state_dict(state_dict, staged)
            self._staged = staged
        return _copy_state_dict(state_dict, self._staged)

    def synchronize_staging(self) -> None:
        """Staging is a blocking copy: nothing to wait for."""

    def close(self) -> None:
        """Waits for old steps' removal and drops the staging buffers."""
        self._join_retire()
        self._staged = None


from ._dcp_reader import Reader  # noqa: E402  (the reader uses the helpers above)
