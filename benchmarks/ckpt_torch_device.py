"""PyTorch DCP's async_save of device tensors: the peer of benchmarks/ckpt-device-bench.

    PY benchmarks/ckpt_torch.py --device cuda [--dir DIR] [--tensors 16] [--reps N] [MiB ...=1024 8192]

The same tensors as the C++ bench: N per size (f32 and bf16 alternating, 4 KiB-multiple sizes, the
last taking the rest), random bits, on the GPU. One process in a one-rank **gloo** process group
(async_save refuses a group without a CPU backend; with one rank no bytes cross ranks).
Per size and variant, median of `reps` saves (3 up to 2 GiB, 2 above), each to a new directory
that is removed once its future completes:
  default   dcp.async_save(state, checkpoint_id=...) as documented: staged into fresh pageable
            host memory before it returns
  pinned    the same with a DefaultStager(StagingOptions(use_pinned_memory=True,
            use_shared_memory=False, use_async_staging=False, use_non_blocking_copy=True)), a new
            one per save: torch 2.11's stager serves one stage() (it empties its copy table and
            its pinned cache at the end of each), so its pinned staging is allocated every time
  async     DefaultStager with use_async_staging=True as well: async_save returns before the copy
            is done; "staged" is when its staging_completion resolves, the earliest moment the
            tensors may be written again (the fair figure to set against our stall)
For each: blocked = until async_save returns; staged = until the tensors are safe to modify; total =
until the upload future completes (written and fsynced by FileSystemWriter). The last default
checkpoint of each size is loaded back with dcp.load and compared bit for bit (wrong -> exit 1).
Prints human lines and "#torch-device" lines for benchmarks/checkpoint_vs_torch.sh --device.
Exit: 0 measured, 1 a wrong byte or an error, 2 usage / torch without async_save, 77 no CUDA device.
"""
import argparse, os, shutil, statistics, sys, tempfile, time, traceback

KIB4, MIB = 4096, 1 << 20


def layout(total, n):
    """(offset-free) tensor sizes in bytes, as ckpt-device-bench carves them."""
    chunk = max(KIB4, total // n // KIB4 * KIB4)
    sizes, off, i = [], 0, 0
    while off < total:
        b = total - off if i + 1 == n else min(chunk, total - off)
        sizes.append(b)
        off += b
        i += 1
    return sizes


def free_bytes(path):
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def mem_available():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def device_main(argv):
    p = argparse.ArgumentParser(prog="ckpt_torch.py --device")
    p.add_argument("--device", choices=["cuda", "cpu"], required=True, help="cpu: a logic check without a GPU")
    p.add_argument("--dir", default="/tmp")
    p.add_argument("--tensors", type=int, default=16)
    p.add_argument("--reps", type=int, default=0)
    p.add_argument("sizes", nargs="*", type=int, help="MiB per size (default 1024 8192)")
    a = p.parse_args(argv)
    sizes = a.sizes or [1024, 8192]
    if any(m < 1 or m > (1 << 20) for m in sizes) or not 1 <= a.tensors <= 4096 or not 0 <= a.reps <= 100:
        p.error("sizes are 1 MiB .. 1 TiB, tensors 1 .. 4096, reps 0 .. 100")
    try:
        import torch
    except ImportError as e:
        print(f"# no torch in {sys.executable} ({e}): DCP device checkpoints not measured", flush=True)
        return 77

    if a.device == "cuda" and not (torch.cuda.is_available() and torch.cuda.device_count() > 0):
        print(f"# no CUDA device: torch {torch.__version__} sees none (torch.cuda.is_available() is False); "
              "DCP device checkpoints not measured", flush=True)
        return 77
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp

    if not hasattr(dcp, "async_save"):
        print(f"ckpt_torch: torch {torch.__version__} has no torch.distributed.checkpoint.async_save", file=sys.stderr)
        return 2
    try:
        from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions
    except ImportError:  # older torch: only the documented default is measured
        DefaultStager = StagingOptions = None

    os.makedirs(a.dir, exist_ok=True)
    work = tempfile.mkdtemp(prefix="ckpt-torch-device.", dir=a.dir)
    dev = torch.device(a.device)
    try:
        dist.init_process_group("gloo", init_method=f"file://{work}/pg-store", rank=0, world_size=1)
        name = torch.cuda.get_device_name(0) if a.device == "cuda" else "cpu"
        print(f"# torch {torch.__version__} (CUDA {torch.version.cuda}) on {name}: dcp.async_save, one-rank gloo "
              f"process group, {a.tensors} tensors per size (f32/bf16 alternating), directory {work}", flush=True)
        sync = torch.cuda.synchronize if a.device == "cuda" else (lambda: None)
        wrong = 0
        # First-call costs (imports, planner caches, thread pools) stay out of every timed save.
        warm = {"w": torch.ones(1024, device=dev)}
        dcp.async_save(warm, checkpoint_id=os.path.join(work, "warmup")).result()
        shutil.rmtree(os.path.join(work, "warmup"), ignore_errors=True)
        for mib in sizes:
            wrong += measure(a, mib, work, dev, sync, torch, dcp, DefaultStager, StagingOptions)
        if wrong:
            print(f"FAIL: {wrong} wrong result(s)", flush=True)
            return 1
        return 0
    except Exception as e:  # an error is a failure with its reason, never a silent pass
        traceback.print_exc()  # where: a bare "KeyError: <class 'type'>" on the first GPU run said nothing more
        print(f"FAIL: {type(e).__name__}: {e}", flush=True)
        return 1
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
        shutil.rmtree(work, ignore_errors=True)


def measure(a, mib, work, dev, sync, torch, dcp, DefaultStager, StagingOptions):
    """One size; returns the number of wrong results (0 or 1)."""
    total = mib * MIB
    reps = a.reps or (3 if mib <= 2048 else 2)
    need_disk, need_host = total + (1 << 30), 2 * total + (1 << 30)
    if free_bytes(work) < need_disk:
        print(f"{mib:>5} MiB  not measured: only {free_bytes(work) / 2**30:.1f} GiB free in {work} "
              f"(needs {need_disk / 2**30:.1f})", flush=True)
        return 0
    if mem_available() < need_host:
        print(f"{mib:>5} MiB  not measured: only {mem_available() / 2**30:.1f} GiB of host memory available "
              f"(needs {need_host / 2**30:.1f})", flush=True)
        return 0
    if dev.type == "cuda" and torch.cuda.mem_get_info()[0] < 2 * total + 512 * MIB:
        print(f"{mib:>5} MiB  not measured: only {torch.cuda.mem_get_info()[0] / 2**30:.1f} GiB free on the device",
              flush=True)
        return 0
    g = torch.Generator(device=dev).manual_seed(mib)
    state = {}
    for i, b in enumerate(layout(total, a.tensors)):
        bits = torch.randint(-(2**31), 2**31 - 1, (b // 4,), dtype=torch.int32, device=dev, generator=g)
        state[f"t{i:02}"] = bits.view(torch.bfloat16 if i % 2 else torch.float32)
    sync()

    variants = [("default", None)]
    if DefaultStager is not None and dev.type == "cuda":  # pinned memory and non-blocking copies need CUDA
        variants.append(("pinned", lambda: DefaultStager(StagingOptions(use_pinned_memory=True, use_shared_memory=False, use_async_staging=False, use_non_blocking_copy=True))))
        variants.append(("async", lambda: DefaultStager(StagingOptions(use_pinned_memory=True, use_shared_memory=False, use_async_staging=True, use_non_blocking_copy=True))))
    elif DefaultStager is None:
        print(f"{mib:>5} MiB  pinned/async staging variants not measured: this torch has no DefaultStager", flush=True)
    kept = None
    for variant, make_stager in variants:
        blocked, ready, total_s = [], [], []
        for rep in range(reps):
            # One DefaultStager per save: torch 2.11's stage() ends by closing its StateDictStager,
            # which empties its copy table and its cache of pinned storages, so a second stage()
            # raises KeyError: <class 'type'> (the first GPU run). Its pinned staging is allocated
            # inside every timed save, as for anyone using this torch.
            stager = make_stager() if make_stager else None
            path = os.path.join(work, f"{variant}-{mib}-{rep}")
            extra = {"async_stager": stager} if stager is not None else {}
            sync()
            try:
                t0 = time.perf_counter()
                resp = dcp.async_save(state, checkpoint_id=path, **extra)
                blocked.append(time.perf_counter() - t0)
                staging = getattr(resp, "staging_completion", None)  # AsyncSaveResponse (async staging)
                upload = getattr(resp, "upload_completion", resp)
                if staging is not None:
                    staging.result()
                ready.append(time.perf_counter() - t0)
                upload.result()
                total_s.append(time.perf_counter() - t0)
            finally:  # its staging thread and pinned memory go with it, also when the save failed
                if stager is not None:
                    stager.close()
            if variant == "default" and rep == reps - 1:
                kept = path
            else:
                shutil.rmtree(path, ignore_errors=True)
        med = lambda xs: statistics.median(xs) * 1e3
        gbs = lambda ms: total / 1e9 / (ms / 1e3)
        print(f"{mib:>5} MiB  dcp.async_save [{variant:7}] blocks {med(blocked):9.2f} ms, tensors safe to modify after "
              f"{med(ready):9.2f} ms ({gbs(med(ready)):.1f} GB/s), persisted after {med(total_s):8.1f} ms "
              f"({gbs(med(total_s)):.2f} GB/s) [median of {reps}]", flush=True)
        print(f"#torch-device mib={mib} variant={variant} block_ms={med(blocked):.3f} ready_ms={med(ready):.3f} "
              f"total_ms={med(total_s):.2f}", flush=True)
    # The saved bytes are the tensors' bytes: load the last default checkpoint into zeroed tensors.
    back = {k: torch.zeros_like(v) for k, v in state.items()}
    dcp.load(back, checkpoint_id=kept)
    shutil.rmtree(kept, ignore_errors=True)
    ints = {torch.float32: torch.int32, torch.bfloat16: torch.int16}
    bad = [k for k, v in state.items() if not torch.equal(v.view(ints[v.dtype]), back[k].view(ints[v.dtype]))]
    del back, state
    if dev.type == "cuda":
        torch.cuda.empty_cache()
    if bad:
        print(f"FAIL: {mib} MiB: dcp.load gave other bytes than were saved in {len(bad)} tensor(s): {bad[:4]}", flush=True)
        return 1
    print(f"{mib:>5} MiB  dcp.load of the last default checkpoint equals the saved tensors bit for bit", flush=True)
    return 0
