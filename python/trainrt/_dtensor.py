"""DTensors (torch.distributed.tensor: FSDP2's fully_shard, tensor parallelism) as checkpoint
entries: each rank's local shard becomes a chunk of the global tensor (trainrt.checkpoint.Shard),
placed by torch's own compute_local_shape_and_global_offset, so a restore at another world size or
mesh reassembles it without DCP.

A chunk is a box of the global tensor, which Shard and Replicate placements give. Partial
placements hold partial sums (no box holds the value) and _StridedShard (FSDP2 over tensor
parallelism) interleaves chunks: both are refused, naming the tensor. Where a Replicate mesh
dimension sits beside a Shard one (HSDP), several ranks hold the same box; the format wants each
box once, so the rank at coordinate 0 of every Replicate dimension registers it and the others
register an empty chunk and receive the values by broadcast over those dimensions after restore.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, List, Optional, Tuple

from ._trainrt import UsageError


def is_dtensor(v: Any) -> bool:
    t = type(v)
    return t.__name__ == "DTensor" and t.__module__.startswith("torch.distributed")


@dataclass
class Plan:
    """What this rank registers for one DTensor."""
    local: Any                                   # the local tensor (the DTensor's own storage)
    global_shape: Optional[Tuple[int, ...]]      # None: replicated on every mesh dimension
    offsets: Optional[Tuple[int, ...]]
    primary: bool = True                         # False: another rank saves this box
    replicate_groups: List[Any] = field(default_factory=list)  # broadcast from coordinate 0 after restore


def _local_shape_and_offset(dt: Any):
    try:
        from torch.distributed.tensor._utils import compute_local_shape_and_global_offset
    except ImportError:  # torch 2.0-2.3 kept it under the private _tensor package
        from torch.distributed._tensor._utils import compute_local_shape_and_global_offset
    return compute_local_shape_and_global_offset(dt.shape, dt.device_mesh, dt.placements)


def plan(name: str, dt: Any) -> Plan:
    """How `dt`'s local shard is registered under `name`; UsageError naming it when it cannot be."""
    mesh, placements = dt.device_mesh, tuple(dt.placements)
    for i, p in enumerate(placements):
        kind = type(p).__name__
        if "StridedShard" in kind:
            raise UsageError(f"checkpoint: tensor '{name}' has a {p} placement on mesh dimension {i} (FSDP2 over tensor "
                             "parallelism): its local rows interleave with other ranks', so they are no box of the "
                             "global tensor; save it with trainrt.dcp.Writer, or redistribute it to Shard/Replicate")
        if p.is_partial():
            raise UsageError(f"checkpoint: tensor '{name}' has a Partial placement ({p}) on mesh dimension {i}: its local "
                             "values are partial results, not a chunk of the tensor; redistribute it to Replicate or "
                             "Shard first")
        if not (p.is_shard() or p.is_replicate()):
            raise UsageError(f"checkpoint: tensor '{name}' has placement {p} ({kind}) on mesh dimension {i}: only Shard "
                             "and Replicate placements can be saved as chunks")
    local = dt.to_local()
    if all(p.is_replicate() for p in placements):
        return Plan(local, None, None)
    coord = mesh.get_coordinate()
    if coord is None:
        raise UsageError(f"checkpoint: tensor '{name}' lives on a device mesh this rank is not part of")
    local_shape, offsets = _local_shape_and_offset(dt)
    if tuple(local.shape) != tuple(local_shape):
        raise UsageError(f"checkpoint: tensor '{name}': its local tensor has shape {tuple(local.shape)}, but its "
                         f"placements {placements} on mesh {tuple(mesh.shape)} give {tuple(local_shape)} (padded local "
                         "shards cannot be saved as chunks)")
    replicate_dims = [i for i, p in enumerate(placements) if p.is_replicate()]
    primary = all(coord[i] == 0 for i in replicate_dims)
    groups = [mesh.get_group(i) for i in replicate_dims]
    return Plan(local, tuple(int(s) for s in dt.shape), tuple(int(o) for o in offsets), primary, groups)


def broadcast_replicas(local: Any, groups: List[Any]) -> None:
    """After restore: coordinate 0 of each Replicate mesh dimension sends its box to the others,
    one dimension after the other (so a box reaches every rank of a 2-D replicate layout)."""
    import torch.distributed as dist

    for g in groups:
        dist.broadcast(local, src=dist.get_global_rank(g, 0), group=g)
