"""Gives a lazily-initialised torch optimizer its state before the first step (what
Manager.register_optimizer registers), without changing what a fresh run computes next."""
from __future__ import annotations

from typing import Any, List

from ._trainrt import UsageError


def materialize_optimizer_state(torch: Any, optimizer: Any, params: List[Any]) -> None:
    """Creates a lazily-initialised optimizer's state without changing the parameters or what a
    fresh run computes next (see Manager.register_optimizer)."""
    trainable = [p for p in params if p.requires_grad]
    if any(p.grad is not None for p in trainable):
        raise UsageError("checkpoint: register_optimizer on an optimizer without state needs parameters without "
                         "gradients (call optimizer.zero_grad(set_to_none=True) first)")
    lrs = []
    for g in optimizer.param_groups:
        lrs.append(g.get("lr"))
        if "lr" in g:
            g["lr"] = 0.0
    try:
        for p in trainable:
            p.grad = torch.zeros_like(p)
        optimizer.step()
    finally:
        for g, lr in zip(optimizer.param_groups, lrs):
            if lr is not None:
                g["lr"] = lr
        for p in trainable:
            p.grad = None
    with torch.no_grad():
        for st in optimizer.state.values():
            for k, v in list(st.items()):
                if isinstance(v, torch.Tensor):
                    v.zero_()
                elif isinstance(v, (int, float)) and not isinstance(v, bool):
                    st[k] = type(v)(0)  # a step counter kept as a number
