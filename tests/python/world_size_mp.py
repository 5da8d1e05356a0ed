"""Per-rank state saved by one world size, restored by another: restore() raises
trainrt.WorldSizeError (a CheckpointError) rather than start from scratch; at the size that saved
it, it restores. Run by world_size_mp.sh: `world_size_mp.py save|restore DIR`."""
import sys

import numpy as np

import trainrt
from trainrt import checkpoint

mode, directory = sys.argv[1], sys.argv[2]
world = trainrt.init()
r = world.rank
mgr = checkpoint.Manager(directory, verbose=False)
state = np.full(100 + r, r, dtype=np.float32)  # per rank: its own size and content
mgr.register("state", state)
if mode == "save":
    mgr.save(3)
    mgr.wait()
    print(f"SAVED rank {r}", flush=True)
else:
    state[...] = -1
    try:
        step = mgr.restore()
        ok = step == 3 and bool((state == r).all())
        print(f"RESTORED {step} rank {r} content {'ok' if ok else 'bad'}", flush=True)
    except trainrt.WorldSizeError as e:
        untouched = bool((state == -1).all())
        print(f"WORLD-SIZE-ERROR rank {r} checkpoint_error={isinstance(e, trainrt.CheckpointError)} "
              f"exit_code={trainrt.WORLD_SIZE_EXIT_CODE} untouched={untouched}: {e}", flush=True)
mgr.close()
