"""The FSDP2 model and the global-state comparison the torch2_* tests share (imported by a rank)."""
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.state_dict import get_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor


def make_model():
    """Uneven shards on purpose: 24x13, 7x24 and 7-element tensors over 2, 3 and 4 ranks."""
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(13, 24), nn.ReLU(), nn.Linear(24, 7), nn.LayerNorm(7))
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    for layer in (m[0], m[2]):
        fully_shard(layer, mesh=mesh)
    fully_shard(m, mesh=mesh)
    return m


def make_optimizer(model):
    return torch.optim.AdamW(model.parameters(), lr=0.01, weight_decay=0.1)


def train(model, opt, steps, seed):
    for i in range(steps):
        g = torch.Generator().manual_seed(seed * 1000 + i * 10 + dist.get_rank())
        x = torch.randn(8, 13, generator=g)
        model(x).square().mean().backward()
        opt.step()
        opt.zero_grad()


def state(model, opt):
    msd, osd = get_state_dict(model, opt)
    return {"model": msd, "optim": osd}


def full(obj):
    """The global value of a state dict: every DTensor gathered (collective, same order on every
    rank), plain tensors cloned, the rest as it is."""
    if isinstance(obj, DTensor):
        return obj.full_tensor().clone()
    if isinstance(obj, torch.Tensor):
        return obj.detach().clone()
    if isinstance(obj, dict):
        return {k: full(obj[k]) for k in sorted(obj, key=str)}
    if isinstance(obj, (list, tuple)):
        return type(obj)(full(v) for v in obj)
    return obj


def differences(got, want, path=""):
    """Where two global states differ (empty when equal, bit for bit)."""
    if isinstance(want, torch.Tensor):
        if not isinstance(got, torch.Tensor) or got.dtype != want.dtype or got.shape != want.shape:
            return [f"{path}: {type(got).__name__} {getattr(got, 'shape', '')} vs {want.dtype} {tuple(want.shape)}"]
        return [] if torch.equal(got, want) else [f"{path}: values differ"]
    if isinstance(want, dict):
        if set(got) != set(want):
            return [f"{path}: keys {sorted(map(str, set(got) ^ set(want)))[:5]} differ"]
        return [d for k in want for d in differences(got[k], want[k], f"{path}.{k}")]
    if isinstance(want, (list, tuple)):
        if len(got) != len(want):
            return [f"{path}: lengths {len(got)} vs {len(want)}"]
        return [d for i, (a, b) in enumerate(zip(got, want)) for d in differences(a, b, f"{path}[{i}]")]
    return [] if got == want else [f"{path}: {got!r} vs {want!r}"]
