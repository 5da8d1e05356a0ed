"""trainrt.dcp.Reader: DCP's StorageReader over trainrt steps (the module docstring of trainrt.dcp
says what it guarantees)."""
from __future__ import annotations

import io
import uuid
from typing import Any, Dict, List, Optional, Tuple

import torch
import torch.distributed as dist
from torch.distributed._shard._utils import narrow_tensor_by_index
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta
from torch.distributed.checkpoint.planner import LoadItemType, LoadPlan, LoadPlanner
from torch.distributed.checkpoint.storage import StorageReader
from torch.futures import Future

from . import _dcp_meta, _trainrt
from ._trainrt import CheckpointError, UsageError
from .dcp import _TYPED, ATTACHMENT, _CheckpointId, StorageInfo, _bytes_of, _fspath, _log, _need_path, _resolve, _step_arg, committed_steps

Candidate = Tuple[int, Any, Metadata]  # step, its _trainrt.StepReader, its DCP metadata


class Reader(_CheckpointId, StorageReader):
    """DCP StorageReader of trainrt steps at `path` (see trainrt.dcp).

    step: load exactly this step (no fallback), else the checkpoint_id's step, else the newest
    intact one. The ranks agree on the step and on falling back through `process_group` (None: the
    default group, as dcp.load; pass the group you give dcp.load); coordinate=False never
    communicates (dcp.load(..., no_dist=True)). verbose: skipped steps and fallbacks on stderr
    (None: rank 0's). After a load, `step` is the step that was read."""

    def __init__(self, path: Any = None, step: Optional[int] = None, *, process_group: Any = None,
                 coordinate: bool = True, verbose: Optional[bool] = None) -> None:
        super().__init__()
        self._root = None if path is None else _fspath(path, "path")
        self._given_step = _step_arg(step)
        self._pg, self._coordinate, self.verbose = process_group, bool(coordinate), verbose
        self._bad: set = set()  # steps that failed a read through this reader: skipped from now on
        self.step: Optional[int] = None
        self.reset()

    def reset(self, checkpoint_id: Any = None) -> None:
        self.path, self._fixed_step = _resolve(self._root, self._given_step, checkpoint_id, "Reader")
        self._current: Optional[Candidate] = None
        self._error: Optional[Exception] = None
        self.load_id = str(uuid.uuid4())

    # ---------------------------------------------------------------- agreement between ranks
    def _distributed(self) -> bool:
        return self._coordinate and dist.is_available() and dist.is_initialized()

    def _gather(self, obj: Any) -> List[Any]:
        if not self._distributed():
            return [obj]
        out: List[Any] = [None] * dist.get_world_size(self._pg)
        dist.all_gather_object(out, obj, group=self._pg)
        return out

    def _say(self, msg: str) -> None:
        rank0 = not self._distributed() or dist.get_rank() == 0
        _log(rank0 if self.verbose is None else self.verbose, msg)

    def _open(self, step: int) -> Tuple[Optional[Candidate], str]:
        """The step opened with every check short of reading data, or why it cannot be."""
        try:
            r = _trainrt.StepReader(self.path, step)
            why = r.check_shards()
            if why:
                return None, why
            md = _dcp_meta.loads(r.attachment(ATTACHMENT), StorageInfo, f"step {step}'s {ATTACHMENT}")
            return (step, r, md), ""
        except Exception as e:  # any reason makes the step unusable here; every rank goes on to agree
            return None, f"{type(e).__name__}: {e}"

    def _choose(self, below: Optional[int] = None) -> Tuple[Optional[Candidate], str]:
        """The newest step under `below` that every rank opened, or None and why. Collective: each
        rank offers its newest usable step, all go down to the oldest offer until they agree."""
        opened: Dict[int, Candidate] = {}
        reasons: Dict[int, str] = {}
        try:
            if self._fixed_step is not None:
                candidates = [self._fixed_step]
            else:
                candidates = committed_steps(self.path)
            candidates = [s for s in candidates if (below is None or s < below) and s not in self._bad]
        except OSError as e:
            candidates, reasons[-1] = [], f"cannot list {self.path}: {e}"
        bound = None
        while True:
            mine = None
            for s in candidates:
                if bound is not None and s > bound:
                    continue
                if s not in opened and s not in reasons:
                    c, why = self._open(s)
                    if c is None:
                        reasons[s] = why
                        self._say(f"dcp: skipping step {s} of {self.path}: {why}")
                    else:
                        opened[s] = c
                if s in opened:
                    mine = s
                    break
            offers = self._gather((mine, None if mine is not None else reasons))
            if any(m is None for m, _ in offers):
                why = "; ".join(f"rank {r}: " + (", ".join(f"step {s}: {w}" for s, w in rs.items()) or "no committed step")
                                for r, (m, rs) in enumerate(offers) if m is None)
                return None, why
            low = min(m for m, _ in offers)
            if all(m == low for m, _ in offers):
                return opened[low], ""
            bound = low

    # ---------------------------------------------------------------- DCP's StorageReader
    def read_metadata(self, *args: Any) -> Metadata:
        # No **kwargs on purpose: dcp.load would then retry with a rank-local metadata file.
        try:
            _need_path(self.path, "Reader")
        except UsageError as e:
            self._error = e
            return Metadata(state_dict_metadata={})
        chosen, why = self._choose()
        if chosen is None:
            # dcp.load swallows an exception raised here (and asserts on None): keep it for
            # set_up_storage_reader, which dcp.load lets through with its message.
            self._error = CheckpointError(f"dcp: no step of {self.path} is intact on every rank: {why}")
            return Metadata(state_dict_metadata={})
        self._current = chosen
        step, _, md = chosen
        self.step = step
        md.storage_meta = md.storage_meta or StorageMeta()
        md.storage_meta.load_id = self.load_id
        self._say(f"dcp: loading step {step} of {self.path}")
        return md

    def set_up_storage_reader(self, metadata: Metadata, is_coordinator: bool, *args: Any, **kwargs: Any) -> None:
        if self._error is not None:
            raise self._error
        if self._current is None or self._current[2] is not metadata:
            raise UsageError("dcp: set_up_storage_reader got metadata this Reader did not read")

    def prepare_local_plan(self, plan: LoadPlan) -> LoadPlan:
        return plan

    def prepare_global_plan(self, plans: List[LoadPlan]) -> List[LoadPlan]:
        return plans

    def read_data(self, plan: LoadPlan, planner: LoadPlanner) -> Future:
        step, reader, md = self._current
        while True:
            outcome = self._read_all(plan, planner, step, reader, md)
            outcomes = self._gather(outcome)
            if not any(outcomes):
                break
            what = "; ".join(f"rank {r}: {o[1]}" for r, o in enumerate(outcomes) if o)
            if any(o[0] == "error" for o in outcomes if o) or self._fixed_step is not None:
                raise CheckpointError(f"dcp: loading step {step} of {self.path} failed: {what}")
            self._bad.add(step)
            self._say(f"dcp: step {step} failed verification ({what}); falling back to an older step")
            chosen, why = self._choose(below=step)
            if chosen is None:
                raise CheckpointError(f"dcp: step {step} of {self.path} failed verification ({what}), and no older "
                                      f"step is intact on every rank: {why}")
            if not _same_layout(md, chosen[2]):
                raise CheckpointError(f"dcp: step {step} of {self.path} failed verification ({what}); the newest "
                                      f"intact step, {chosen[0]}, was saved with other tensors or chunks, so this plan "
                                      "cannot read it: call dcp.load again (this Reader now skips the failed step)")
            step, reader, md = chosen
            self._current, self.step = chosen, step
            self._say(f"dcp: loading step {step} of {self.path} instead")
        fut: Future = Future()
        fut.set_result(None)
        return fut

    def _read_all(self, plan: LoadPlan, planner: LoadPlanner, step: int, reader: Any,
                  md: Metadata) -> Optional[Tuple[str, str]]:
        """None, ("damaged", why) when the step's bytes fail a check, or ("error", why)."""
        groups: Dict[Tuple[int, str], List[Any]] = {}
        for req in plan.items:
            info = md.storage_data.get(req.storage_index)
            if info is None:
                return "error", f"step {step} holds no item {req.storage_index.fqn!r} at {req.storage_index.offset}"
            groups.setdefault((info.rank, info.entry), []).append(req)
        try:
            for (rank, entry), reqs in groups.items():
                if reqs[0].type == LoadItemType.BYTE_IO:
                    data = reader.read_bytes(rank, entry)
                    for req in reqs:
                        planner.load_bytes(req, io.BytesIO(data))
                    continue
                self._read_tensor(planner, reader, md, rank, entry, reqs)
        except CheckpointError as e:
            return "damaged", str(e)
        except Exception as e:  # every rank must reach the agreement in read_data, whatever happened
            return "error", f"{type(e).__name__}: {e}"
        return None

    @staticmethod
    def _read_tensor(planner: LoadPlanner, reader: Any, md: Metadata, rank: int, entry: str, reqs: List[Any]) -> None:
        index = reqs[0].storage_index
        tmd = md.state_dict_metadata[index.fqn]
        sizes = next((c.sizes for c in tmd.chunks if tuple(c.offsets) == tuple(index.offset)), None)
        if sizes is None:
            raise CheckpointError(f"dcp: {index.fqn!r} has no chunk at {tuple(index.offset)} in the metadata")
        dtype = tmd.properties.dtype
        view = (lambda t: t) if dtype in _TYPED else _bytes_of
        if len(reqs) == 1 and tuple(reqs[0].lengths) == tuple(sizes):
            # The whole chunk into one tensor of its own shape (a same-layout load): read in place.
            target = planner.resolve_tensor(reqs[0]).detach()
            if (target.device.type == "cpu" and target.dtype == dtype and target.is_contiguous()
                    and tuple(target.shape) == tuple(sizes)):
                reader.read_into(rank, entry, view(target))
                planner.commit_tensor(reqs[0], target)
                return
        buf = torch.empty(tuple(sizes), dtype=dtype)
        reader.read_into(rank, entry, view(buf))
        for req in reqs:
            src = narrow_tensor_by_index(buf, req.storage_offsets, req.lengths)
            target = planner.resolve_tensor(req).detach()
            if target.size() != src.size():
                raise UsageError(f"dcp: {req.storage_index.fqn!r}: the plan reads {tuple(src.size())} into a tensor "
                                 f"of {tuple(target.size())}")
            target.copy_(src)
            planner.commit_tensor(req, target)


def _same_layout(a: Metadata, b: Metadata) -> bool:
    """Whether a load plan made from `a` reads `b` the same way (same tensors, chunks and keys)."""
    return a.state_dict_metadata == b.state_dict_metadata and a.planner_data == b.planner_data
