"""DCP's Metadata as JSON, for trainrt.dcp: the checkpoint format is pickle-free, so the object
DCP's FileSystemWriter pickles into `.metadata` is written field by field and rebuilt on load.

Tensor properties travel by name (dtype, layout, memory format: looked up on the torch module and
type-checked, never evaluated). planner_data (DefaultSavePlanner's key -> path mappings) and the
other free-form fields are encoded with explicit tags for lists, tuples, torch.Size and dicts
(any key type); anything else is a UsageError naming its place and type, at save, before a byte
is written.
"""
from __future__ import annotations

import json
from typing import Any, Dict

import torch
from torch.distributed.checkpoint.metadata import (
    BytesStorageMetadata,
    ChunkStorageMetadata,
    Metadata,
    MetadataIndex,
    StorageMeta,
    TensorProperties,
    TensorStorageMetadata,
)

from ._trainrt import CheckpointError, UsageError

FORMAT = "trainrt-dcp-1"


def _enc(v: Any, where: str) -> Any:
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, torch.Size):
        return {"s": [int(x) for x in v]}
    if isinstance(v, tuple):
        return {"t": [_enc(x, f"{where}[{i}]") for i, x in enumerate(v)]}
    if isinstance(v, list):
        return {"l": [_enc(x, f"{where}[{i}]") for i, x in enumerate(v)]}
    if isinstance(v, dict):
        return {"d": [[_enc(k, f"{where} key"), _enc(x, f"{where}[{k!r}]")] for k, x in v.items()]}
    raise UsageError(f"dcp: {where} is a {type(v).__module__}.{type(v).__name__}; trainrt stores DCP metadata "
                     "without pickle, as JSON with lists, tuples, dicts, str, numbers, bool and None")


def _dec(v: Any) -> Any:
    if not isinstance(v, dict):
        return v
    if len(v) != 1:
        raise ValueError(f"an object with keys {sorted(v)[:4]}, not one tag")
    (tag, x), = v.items()
    if tag == "s":
        return torch.Size(int(i) for i in x)
    if tag == "t":
        return tuple(_dec(i) for i in x)
    if tag == "l":
        return [_dec(i) for i in x]
    if tag == "d":
        return {_dec(k): _dec(i) for k, i in x}
    raise ValueError(f"unknown tag {tag!r}")


def _name(obj: Any) -> str:
    return str(obj).removeprefix("torch.")


def _torch_attr(name: Any, kind: type) -> Any:
    value = getattr(torch, name, None) if isinstance(name, str) and name.isidentifier() else None
    if not isinstance(value, kind):
        raise ValueError(f"{name!r} is not a torch.{kind.__name__}")
    return value


def dumps(md: Metadata) -> bytes:
    tensors, byte_items = [], []
    for fqn, m in md.state_dict_metadata.items():
        if isinstance(m, TensorStorageMetadata):
            p = m.properties
            tensors.append({"fqn": fqn, "dtype": _name(p.dtype), "layout": _name(p.layout),
                            "requires_grad": bool(p.requires_grad), "memory_format": _name(p.memory_format),
                            "pin_memory": bool(p.pin_memory), "size": [int(s) for s in m.size],
                            "chunks": [[[int(o) for o in c.offsets], [int(s) for s in c.sizes]] for c in m.chunks]})
        elif isinstance(m, BytesStorageMetadata):
            byte_items.append(fqn)
        else:
            raise UsageError(f"dcp: '{fqn}' has storage metadata of type {type(m).__name__}, which trainrt does not know")
    storage = []
    for index, info in (md.storage_data or {}).items():
        storage.append([index.fqn, None if index.offset is None else [int(o) for o in index.offset], index.index,
                        info.rank, info.entry])
    sm = md.storage_meta
    doc = {
        "format": FORMAT,
        "version": md.version,
        "tensors": tensors,
        "bytes": byte_items,
        "planner_data": _enc(md.planner_data, "the planner's data"),
        "storage": storage,
        "storage_meta": None if sm is None else {
            "checkpoint_id": None if sm.checkpoint_id is None else str(sm.checkpoint_id),
            "save_id": sm.save_id, "load_id": sm.load_id, "modules": list(getattr(sm, "modules", []) or [])},
    }
    return json.dumps(doc, separators=(",", ":")).encode()


def loads(data: bytes, storage_info: Any, where: str) -> Metadata:
    """The Metadata of `data` (what dumps wrote); `storage_info(rank, entry)` builds each item's
    storage_data. CheckpointError naming `where` when it is not that."""
    try:
        doc = json.loads(data)
        if doc.get("format") != FORMAT:
            raise ValueError(f"format {doc.get('format')!r}, this reader knows {FORMAT!r}")
        sdm: Dict[str, Any] = {}
        for t in doc["tensors"]:
            props = TensorProperties(dtype=_torch_attr(t["dtype"], torch.dtype),
                                     layout=_torch_attr(t["layout"], torch.layout),
                                     requires_grad=bool(t["requires_grad"]),
                                     memory_format=_torch_attr(t["memory_format"], torch.memory_format),
                                     pin_memory=bool(t["pin_memory"]))
            chunks = [ChunkStorageMetadata(offsets=torch.Size(o), sizes=torch.Size(s)) for o, s in t["chunks"]]
            sdm[t["fqn"]] = TensorStorageMetadata(properties=props, size=torch.Size(t["size"]), chunks=chunks)
        for fqn in doc["bytes"]:
            sdm[fqn] = BytesStorageMetadata()
        storage = {MetadataIndex(fqn, offset, index): storage_info(int(rank), str(entry))
                   for fqn, offset, index, rank, entry in doc["storage"]}
        sm = doc["storage_meta"]
        meta = None if sm is None else StorageMeta(checkpoint_id=sm["checkpoint_id"], save_id=sm["save_id"],
                                                   load_id=sm["load_id"], modules=list(sm["modules"]))
        return Metadata(state_dict_metadata=sdm, planner_data=_dec(doc["planner_data"]), storage_data=storage,
                        storage_meta=meta, version=doc["version"])
    except (KeyError, TypeError, ValueError) as e:
        raise CheckpointError(f"dcp: {where} is not DCP metadata this reader understands: {type(e).__name__}: {e}") \
            from None
