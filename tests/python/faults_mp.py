"""Typed errors across ranks, from Python (run under mpirun through tests/runtime/expect_all_ranks.sh):
  die:      rank 1 exits abruptly; every other rank's allreduce raises trainrt.PeerError naming it,
            within seconds, and the world stays failed (the next call raises PeerError too).
  mismatch: ranks reduce different element counts; every rank gets trainrt.UsageError."""
import os
import sys
import time

# A script (the checks count its lines), not a pytest file: it runs only under mpirun.
if "PMIX_RANK" not in os.environ:
    print("SKIPPED: run under mpirun (PMIX_RANK is not set)", flush=True)
    sys.exit(77)

import numpy as np  # noqa: E402

import trainrt  # noqa: E402

mode = sys.argv[1]


def say(line):
    os.write(1, (line + "\n").encode())  # one write: mpirun forwards it whole, before any kill

world = trainrt.init(timeout=10)
r = world.rank
buf = np.ones(1000, dtype=np.float32)
world.barrier()

if mode == "die":
    if r == 1:
        os._exit(9)
    t0 = time.monotonic()
    try:
        for _ in range(100):
            world.allreduce(buf)
        say(f"rank {r}: death NOT detected")
        sys.exit(1)
    except trainrt.PeerError as e:
        took = time.monotonic() - t0
        try:
            world.allreduce(buf)
            again = False
        except trainrt.PeerError:
            again = True
        # The fields say what the message says: decided on without reading it.
        ok = took < 8 and again and "rank 1" in str(e) and e.kind == "dead_peer" and e.ranks == (1,)
        say(f"rank {r}: {'DEATH-DETECTED' if ok else 'WRONG-ERROR'} after {took:.2f} s, again={again}: {e}")
        sys.exit(0 if ok else 1)  # a normal exit (PMIx finalized): mpirun leaves the other survivors alone
    except Exception as e:  # noqa: BLE001 - any other type is the failure this test looks for
        say(f"rank {r}: WRONG-ERROR {type(e).__name__}: {e}")
        sys.exit(1)
elif mode == "mismatch":
    mine = np.ones(1000 + r, dtype=np.float32)
    try:
        world.allreduce(mine)
        say(f"rank {r}: mismatch NOT detected")
    except trainrt.UsageError as e:
        typed = getattr(e, "kind", None) == "mismatch"
        say(f"rank {r}: {'MISMATCH-DETECTED' if typed else 'WRONG-ERROR (no kind mismatch)'} ({type(e).__name__}): {e}")
    except Exception as e:  # noqa: BLE001
        say(f"rank {r}: WRONG-ERROR {type(e).__name__}: {e}")
    world.allgather_bytes(b"")  # every rank said its line before any exits (over the bootstrap)
else:
    sys.exit(f"unknown mode {mode!r}: die or mismatch")
