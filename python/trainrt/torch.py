"""PyTorch process groups without MASTER_PORT: the rendezvous is carried by the trainrt world.

    import trainrt.torch
    world = trainrt.torch.init_process_group("nccl")   # or "gloo"; rank and size from PMIx
    model = torch.nn.parallel.DistributedDataParallel(model.to(trainrt.torch.device()))

torch's Gloo and NCCL backends need a key-value store to exchange their addresses (and NCCL's
unique id). torch's usual `env://` store is a TCP server on MASTER_ADDR:MASTER_PORT, a port chosen
before launch that may be taken, raced for by a second job, or blocked. Here rank 0 starts that
server on a port the kernel assigns (port 0, free by construction), and its address travels to
every rank through the PMIx session the job already has (trainrt's broadcast_bytes): no port is
chosen by anybody, none is exported, and a failure names the address it could not reach.

Why a TCP server at all: torch's store protocol is point-to-point and asynchronous (rank 0 sets
NCCL's id and never reads it back; others block in get()), which the session's collectives
(allgather, broadcast: every rank must call them) cannot carry. The server listens on a
kernel-assigned port only for the lifetime of the process group. See docs/performance.md
"PyTorch rendezvous" for what it costs against env://.
"""
from __future__ import annotations

import atexit
import datetime
import fcntl
import gc
import os
import socket
import struct

import torch
import torch.distributed as dist

import trainrt

__all__ = ["SessionStore", "StoreError", "ArgumentError", "init_process_group", "destroy_process_group", "device",
           "world"]

_DEFAULT_TIMEOUT = datetime.timedelta(minutes=30)  # torch's own default for process groups
_exit_hooks: list = []  # registered once per process, whatever the number of init/destroy rounds
_state: dict = {}  # the world and store of the live process group (the server lives in rank 0's)


class StoreError(trainrt.Error):
    """The session store could not be created or reached; the message names host:port. A
    trainrt.Error, so a RuntimeError as before."""


class ArgumentError(trainrt.UsageError, TypeError):
    """A keyword init_process_group takes from the trainrt world instead; a TypeError, as Python's
    own for a keyword, and a trainrt.UsageError."""


def _ipv4_of(ifname: str, var: str = "TRAINRT_IFNAME") -> str:
    """IPv4 address of a network interface (SIOCGIFADDR), the way Gloo and NCCL pick theirs."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            packed = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", ifname[:15].encode()))
        except OSError as e:
            raise StoreError(f"trainrt.torch: interface {ifname!r} ({var}) has no IPv4 address: {e}") from None
    return socket.inet_ntoa(packed[20:24])


def _advertised_host(w) -> str:
    """The address of rank 0's node that every rank can reach."""
    if w.local_world_size == w.world_size:
        return "127.0.0.1"  # one node: loopback, whatever the hostname resolves to
    # Not a rule of our own: the C++ one (trainrt/data_interface.hpp) by which the plugin chose MASTER_ADDR.
    name, var = trainrt._trainrt.data_interface()
    if name:
        return _ipv4_of(name, var)
    if os.environ.get("MASTER_ADDR"):  # the plugin's resolution of the step's first node (numeric)
        return os.environ["MASTER_ADDR"]
    try:
        for *_, addr in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET):
            if not addr[0].startswith("127."):
                return addr[0]
    except OSError:
        pass
    raise StoreError(f"trainrt.torch: {socket.gethostname()} resolves only to loopback and no data network is "
                     "named: set TRAINRT_IFNAME (or the plugin's ifname=) to the interface the nodes share")


class SessionStore(dist.Store):
    """A torch.distributed.Store whose server address came through the PMIx session.

    Delegates every operation to a TCPStore client of rank 0's kernel-port server; errors are
    re-raised as StoreError naming the server, the operation and the key.
    """

    def __init__(self, client: dist.TCPStore, address: str, server: dist.TCPStore | None = None):
        super().__init__()
        self._client, self._server, self.address = client, server, address

    @classmethod
    def create(cls, w, timeout: datetime.timedelta = _DEFAULT_TIMEOUT) -> "SessionStore":
        """Collective over the world `w` (every rank calls it): rank 0 serves, the others connect."""
        server = None
        if w.rank == 0:
            try:
                host = _advertised_host(w)
                # Port 0: the kernel picks a free port; .port reads it back. No wait for workers:
                # they connect after the broadcast below.
                server = dist.TCPStore(host, 0, None, True, timeout, wait_for_workers=False)
                msg = f"ok {host} {server.port}"
            except Exception as e:  # every rank must leave the broadcast with the reason
                msg = f"error rank 0 could not start the store server: {e}"
            reply = w.broadcast_bytes(msg.encode(), 0).decode()
        else:
            reply = w.broadcast_bytes(b"", 0).decode()
        if not reply.startswith("ok "):
            raise StoreError(f"trainrt.torch: {reply[6:]}")
        _, host, port = reply.split(" ")
        address = f"{host}:{port}"
        if server is not None:
            return cls(server, address, server)
        return cls.connect(host, int(port), timeout, w.rank)

    @classmethod
    def connect(cls, host: str, port: int, timeout: datetime.timedelta, rank: int) -> "SessionStore":
        """A client of the server at host:port (what the ranks but 0 do in create())."""
        try:
            client = dist.TCPStore(host, port, None, False, timeout)
        except Exception as e:
            raise StoreError(f"trainrt.torch: rank {rank} could not reach rank 0's store at {host}:{port}: {e} "
                             "(a firewall, or rank 0's address is not on a network this node shares: "
                             "set TRAINRT_IFNAME)") from None
        return cls(client, f"{host}:{port}")

    def _call(self, op: str, key, fn):
        try:
            return fn()
        except Exception as e:
            raise StoreError(f"trainrt.torch store {self.address}: {op}({key!r}) failed: {e}") from None

    def set(self, key, value):
        return self._call("set", key, lambda: self._client.set(key, value))

    def get(self, key):
        return self._call("get", key, lambda: self._client.get(key))

    def add(self, key, value):
        return self._call("add", key, lambda: self._client.add(key, value))

    def compare_set(self, key, expected, desired):
        return self._call("compare_set", key, lambda: self._client.compare_set(key, expected, desired))

    def delete_key(self, key):
        return self._call("delete_key", key, lambda: self._client.delete_key(key))

    def num_keys(self):
        return self._call("num_keys", "", lambda: self._client.num_keys())

    def set_timeout(self, timeout):
        return self._client.set_timeout(timeout)

    def wait(self, keys, timeout=None):
        if timeout is None:
            return self._call("wait", keys, lambda: self._client.wait(keys))
        return self._call("wait", keys, lambda: self._client.wait(keys, timeout))


def _cuda_index(w) -> int:
    """The task's own GPU: the plugin's TRAINRT_CUDA_DEVICE, else LOCAL_RANK (docs/environment.md)."""
    if os.environ.get("TRAINRT_CUDA_DEVICE", "").isdigit():
        return int(os.environ["TRAINRT_CUDA_DEVICE"])
    count = torch.cuda.device_count()
    if count == 0:
        raise trainrt.Error("trainrt.torch: backend nccl needs a CUDA device and torch sees none")
    return w.local_rank % count


def init_process_group(backend: str = "gloo", *, world=None, timeout: datetime.timedelta | None = None,
                       set_device: bool = True, **kw):
    """Creates torch's default process group over the trainrt world and returns that world.

    Rank and world size come from trainrt.init() (PMIx). RANK, WORLD_SIZE, LOCAL_RANK and
    LOCAL_WORLD_SIZE are exported where missing (torchrun-style code reads them); with
    TRAINRT_IFNAME set, GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME default to it. With backend nccl
    the task's own GPU becomes the current device (set_device=False leaves it alone). Other
    keywords go to torch.distributed.init_process_group. MASTER_ADDR/MASTER_PORT are not read.
    """
    if dist.is_initialized():
        raise trainrt.UsageError("trainrt.torch: the default process group already exists")
    if backend not in ("gloo", "nccl"):
        raise trainrt.UsageError(f"trainrt.torch: backend {backend!r}: use 'gloo' or 'nccl'")
    for k in ("store", "init_method", "rank", "world_size"):
        if k in kw:
            raise ArgumentError(f"trainrt.torch.init_process_group: {k}= comes from the trainrt world")
    w = world if world is not None else trainrt.init()
    timeout = timeout or _DEFAULT_TIMEOUT
    for var, value in (("RANK", w.rank), ("WORLD_SIZE", w.world_size),
                       ("LOCAL_RANK", w.local_rank), ("LOCAL_WORLD_SIZE", w.local_world_size)):
        os.environ.setdefault(var, str(value))
    if os.environ.get("TRAINRT_IFNAME"):
        os.environ.setdefault("GLOO_SOCKET_IFNAME", os.environ["TRAINRT_IFNAME"])
        os.environ.setdefault("NCCL_SOCKET_IFNAME", os.environ["TRAINRT_IFNAME"])
    if backend == "nccl" and set_device:
        torch.cuda.set_device(_cuda_index(w))
    store = SessionStore.create(w, timeout)
    dist.init_process_group(backend, store=store, rank=w.rank, world_size=w.world_size, timeout=timeout, **kw)
    _state.update(world=w, store=store, backend=backend)
    if not _exit_hooks:
        atexit.register(_collect_before_finalizing)
        _exit_hooks.append(_collect_before_finalizing)
    return w


def _collect_before_finalizing() -> None:
    """Frees the process groups' garbage while other threads may still take the GIL.

    torch's gloo worker threads can hold the last reference to finished work (a barrier holds the
    work before it) and drop it, with its tensors, after wait() has returned. If that comes during
    Py_Finalize, the thread's GIL request ends it and the rank aborts ("terminate called without
    an active exception", exit 134), which a launcher counts as a failed task. Collected here (atexit
    runs before finalization), the groups' destructors join those threads with the GIL released."""
    gc.collect()


def destroy_process_group() -> None:
    """Destroys the default process group and, on rank 0, stops the store server."""
    if dist.is_initialized():
        dist.destroy_process_group()
    _state.clear()


def world():
    """The trainrt world of the live process group (None before init_process_group)."""
    return _state.get("world")


def device() -> torch.device:
    """The device tensors of the live process group belong on: the current GPU with nccl, else cpu."""
    if _state.get("backend") == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")
