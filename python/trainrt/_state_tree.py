"""Paths through a nested state (an optimizer's state_dict: dicts, lists and tuples of tensors and
plain values): the leaves with their paths, a leaf's dotted name, and reading or replacing the leaf
at a path. checkpoint.Manager registers and restores a state_dict through these."""
from __future__ import annotations

import json
from typing import Any, Mapping, Tuple


def is_tensor(v: Any) -> bool:
    return hasattr(v, "__dlpack__") or hasattr(v, "__array_interface__")


def walk(obj: Any, path: Tuple[Any, ...]):
    """Leaves of nested dicts/lists/tuples (an optimizer's state_dict), with their paths."""
    if isinstance(obj, Mapping):
        for k, v in obj.items():
            yield from walk(v, path + (k,))
    elif isinstance(obj, (list, tuple)) and any(is_tensor(x) or isinstance(x, (Mapping, list, tuple)) for x in obj):
        for i, v in enumerate(obj):
            yield from walk(v, path + (i,))
    else:
        yield path, obj


def key(path: Tuple[Any, ...]) -> str:
    return ".".join(str(p) for p in path)


def jsonable(v: Any) -> bool:
    try:
        json.dumps(v, allow_nan=True)
        return True
    except (TypeError, ValueError):
        return False


def get(obj: Any, path: Tuple[Any, ...]) -> Any:
    for p in path:
        obj = obj[p]
    return obj


def set_at(obj: Any, path: Tuple[Any, ...], value: Any) -> None:
    assign(get(obj, path[:-1]), path[-1], value)


def assign(container: Any, key: Any, value: Any) -> None:
    old = container[key]
    if isinstance(old, tuple) and isinstance(value, list):
        value = tuple(value)  # JSON has no tuples (Adam's betas)
    container[key] = value
