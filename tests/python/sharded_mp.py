"""trainrt.checkpoint.Shard: numpy arrays and torch CPU tensors registered as chunks of global
tensors (1-D, 2-D, uneven, empty; float32/64, int64, bfloat16) saved at 4 ranks and restored at
1, 3 and 6 ranks with their own splits, every element checked; misuse is a UsageError naming the
tensor, and chunks that overlap are refused at save on every rank with nothing written.

Usage: sharded_mp.py MPIRUN                     (the driver; CTest runs this)
       sharded_mp.py rank PHASE DIR            (one rank of a phase, under mpirun)"""
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _mp_driver as drv  # noqa: E402

SHAPES = {"a": (10,), "b": (6, 5), "c": (7, 3), "e": (4,)}


def _cuts(n, parts):
    """numpy.array_split's boundaries: the first n % parts pieces one longer."""
    q, r = divmod(n, parts)
    return [i * q + min(i, r) for i in range(parts + 1)]


def split(name, shape, world, rank):
    """(offsets, chunk shape) of `rank`'s chunk of tensor `name` at `world` ranks."""
    if name == "e":  # every chunk but the last rank's is empty
        return ((0,), shape) if rank == world - 1 else ((0,), (0,))
    if len(shape) == 1:
        c = _cuts(shape[0], world)
        return (c[rank],), (c[rank + 1] - c[rank],)
    p = max(d for d in range(1, int(math.isqrt(world)) + 1) if world % d == 0)  # a p x q grid of ranks
    q = world // p
    rows, cols = _cuts(shape[0], p), _cuts(shape[1], q)
    i, j = divmod(rank, q)
    return (rows[i], cols[j]), (rows[i + 1] - rows[i], cols[j + 1] - cols[j])


def global_value(np, name, step):
    dtype = {"a": np.float32, "b": np.float64, "c": np.int64, "e": np.float32}[name]
    n = math.prod(SHAPES[name])
    return (np.arange(n, dtype=np.float64) * 0.5 + step * 1000 + ord(name)).astype(dtype).reshape(SHAPES[name])


def chunk_of(full, offsets, shape):
    return full[tuple(slice(o, o + s) for o, s in zip(offsets, shape))]


def rank_main(phase, d):
    import numpy as np

    import trainrt
    from trainrt.checkpoint import Manager, Shard
    try:
        import torch
        if int(torch.__version__.split(".")[0]) < 2:
            torch = None  # 1.13 cannot export bfloat16 through DLPack
    except ImportError:
        torch = None
    w = trainrt.init()
    mgr = Manager(d, keep_last=3, verbose=False)
    arrays = {}
    for name, shape in SHAPES.items():
        offsets, cshape = split(name, shape, w.world_size, w.rank)
        arrays[name] = np.zeros(cshape, dtype=global_value(np, name, 0).dtype)
        mgr.register(name, arrays[name], shard=Shard(shape, offsets))
    if torch is not None:  # a torch CPU tensor in bfloat16, 2-D
        offsets, cshape = split("t", (5, 8), w.world_size, w.rank)
        arrays["t"] = torch.zeros(cshape, dtype=torch.bfloat16)
        mgr.register("t", arrays["t"], shard=Shard((5, 8), offsets))

    def fill(step):
        for name, a in arrays.items():
            if name == "t":
                full = torch.arange(40, dtype=torch.float32).reshape(5, 8).add(step).bfloat16()
                offsets, cshape = split("t", (5, 8), w.world_size, w.rank)
                a.copy_(chunk_of(full, offsets, cshape))
            else:
                offsets, cshape = split(name, SHAPES[name], w.world_size, w.rank)
                a[...] = chunk_of(global_value(np, name, step), offsets, cshape)

    if phase == "save":
        for step in (1, 2):
            fill(step)
            mgr.save(step)
            mgr.wait()
        print(f"rank {w.rank} SAVED", flush=True)
    elif phase == "restore":
        step = mgr.restore()
        got = {n: (a.clone() if n == "t" else a.copy()) for n, a in arrays.items()}
        fill(step)  # the expectation: the restored step's values at this rank's own split
        bad = [n for n, a in arrays.items() if not (torch.equal(got[n], a) if n == "t" else np.array_equal(got[n], a))]
        print(f"rank {w.rank} RESTORED {step} {'OK' if not bad else 'WRONG ' + ','.join(bad)}", flush=True)
    mgr.close()


def misuse_main(d):
    """Each misuse is refused before anything is registered or written, naming the tensor."""
    import numpy as np

    import trainrt
    from trainrt.checkpoint import Manager, Shard
    w = trainrt.init()
    mgr = Manager(d, verbose=False)
    cases = [
        ("lengths", lambda: Shard((4, 4), (0,)), "differ in length"),
        ("negative", lambda: Shard((4,), (-1,)), "every entry must be an int >= 0"),
        ("dims", lambda: mgr.register("x1", np.zeros((2, 2), np.float32), shard=Shard((4,), (0,))), "'x1' has 2 dimensions"),
        ("outside", lambda: mgr.register("x2", np.zeros(3, np.float32), shard=Shard((4,), (2,))), "'x2'"),
        ("dtype", lambda: mgr.register("x3", np.zeros(3, np.uint8), shard=Shard((3,), (0,))), "tensor 'x3' is uint8"),
        ("both", lambda: mgr.register("x4", np.zeros(3, np.float32), True, shard=Shard((3,), (0,))), "'x4' is registered both"),
        ("type", lambda: mgr.register("x5", np.zeros(3, np.float32), shard=((3,), (0,))), "tensor 'x5': shard= takes"),
    ]
    for what, fn, needle in cases:
        try:
            fn()
            print(f"rank {w.rank} MISUSE {what} ACCEPTED", flush=True)
        except trainrt.UsageError as e:
            print(f"rank {w.rank} MISUSE {what} {'REFUSED' if needle in str(e) else 'UNNAMED ' + str(e)}", flush=True)
    # Overlapping chunks: ranks 0 and 1 both claim elements 2..3 of 'o'. Every rank's save fails.
    offsets = {0: (0,), 1: (2,)}.get(w.rank, (6,))
    lengths = {0: 4, 1: 4}.get(w.rank, 0)
    mgr.register("o", np.zeros(lengths, np.float32), shard=Shard((6,), offsets))
    try:
        mgr.save(1)
        mgr.wait()
        print(f"rank {w.rank} OVERLAP ACCEPTED", flush=True)
    except trainrt.UsageError as e:
        print(f"rank {w.rank} OVERLAP {'REFUSED' if chr(39) + 'o' + chr(39) in str(e) else 'UNNAMED ' + str(e)}", flush=True)
    mgr.close()


def main(mpirun):
    t = drv.Driver(os.path.abspath(__file__), mpirun)
    ckpt = os.path.join(t.dir, "ckpt")
    out = t.run(4, "save", ckpt)
    t.expect("save at 4 ranks", out, r"rank \d SAVED", count=4)
    for n in (1, 3, 6):
        out = t.run(n, "restore", ckpt)
        t.expect(f"4 -> {n} ranks: every chunk holds step 2's values", out, r"rank \d RESTORED 2 OK", count=n)
    out = t.run(3, "misuse", os.path.join(t.dir, "misuse"))
    t.expect("misuse refused, naming the tensor", out, r"MISUSE \w+ REFUSED", count=21)
    t.expect("overlapping chunks refused on every rank, naming 'o'", out, r"OVERLAP REFUSED", count=3)
    if os.path.exists(drv.step_dir(os.path.join(t.dir, "misuse"), 1)):
        t.fail("the refused save left step 1 behind")
    t.finish()


if __name__ == "__main__":
    if len(sys.argv) > 3 and sys.argv[1] == "rank":
        misuse_main(sys.argv[3]) if sys.argv[2] == "misuse" else rank_main(sys.argv[2], sys.argv[3])
    else:
        main(sys.argv[1])
