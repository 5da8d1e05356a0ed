#!/usr/bin/env python3
"""Hostile inputs for checkpoints (docs/hostile-inputs.md "Checkpoints").

Usage: hostile_inputs.py CLASS TRAINRT_CKPT CKPT_MP CKPT_XXH3 HOOKS
CLASS: redirect | bounds | commit | output | users.  Every program runs under a 20 s timeout and
a 1 GiB address-space limit; a hang, a signal, an allocation failure that kills, a step called
intact that restore cannot use, or a file outside the checkpoint touched is a failure. Prints one
line per case and "hostile CLASS: N cases, N held"; exit 0 when all held, 77 when the class
cannot run here (users: not root, or uid 65534 cannot run copies of the programs), 1 otherwise.
The users class runs copies of the programs that uid 65534 can reach (hostile_lib.Env), so the
build folder may sit anywhere, a 0700 home included."""
import json
import os
import shutil
import sys

import hostile_lib as H
from hostile_cases import CASES

GOOD = 2  # the newest step of the base checkpoint; 1 is the one before it


class Check:
    def __init__(self, env):
        self.env = env

    def base(self, steps=3):
        """A checkpoint written by ckpt_mp: steps 1 and 2 committed (keep_last 2)."""
        d = self.env.fresh()
        r = H.run([self.env.mp, "cycle", d, str(steps)])
        assert r.rc == 0, f"ckpt_mp could not write the base checkpoint: {r}"
        return d

    def tool(self, *args, as_nobody=False, rcs=(0, 1, 2)):
        r = H.run([self.env.tool, *args], as_nobody=as_nobody)
        assert r.rc != "TIMEOUT", f"trainrt-ckpt {' '.join(args)} hung: {r}"
        assert isinstance(r.rc, int) and r.rc >= 0, f"trainrt-ckpt {' '.join(args)} died by a signal: {r}"
        assert r.rc in rcs, f"trainrt-ckpt {' '.join(args)}: rc {r.rc}, wanted one of {rcs}: {r}"
        if r.rc == 2:
            lines = [l for l in r.err.splitlines() if l.strip()]
            assert len(lines) == 1 and lines[0].startswith("trainrt-ckpt: "), f"exit 2 without one error line: {r}"
        if "--json" in args and r.rc in (0, 1):
            json.loads(r.out)  # strict: a raw control byte or bad UTF-8 in a string fails here
        return r

    def judged(self, d, intact_step=None, damaged_step=None, fallback=None, as_nobody=False):
        """verify's verdict, in text and JSON, and list, all without hanging or dying."""
        r = self.tool("verify", d, as_nobody=as_nobody, rcs=(0, 1))
        oks = [l for l in r.out.splitlines() if l.startswith("OK:")]
        if intact_step is not None:
            assert r.rc == 0 and oks == [f"OK: step {intact_step} is intact"], f"wanted step {intact_step} intact: {r}"
        if damaged_step is not None:
            assert r.rc == 1 and not oks, f"wanted step {damaged_step} judged damaged: {r}"
            assert f"DAMAGED: step {damaged_step} is damaged" in r.out, f"wanted step {damaged_step} named damaged: {r}"
        if fallback is not None:
            assert f"a restore would fall back to step {fallback}" in r.out, f"wanted fallback {fallback}: {r}"
        j = self.tool("verify", d, "--json", as_nobody=as_nobody, rcs=(0, 1))
        assert j.rc == r.rc, f"--json verdict {j.rc} differs from the text one {r.rc}"
        self.tool("list", d, as_nobody=as_nobody, rcs=(0,))
        self.tool("list", d, "--json", as_nobody=as_nobody, rcs=(0,))
        return r

    def restores(self, d, step, as_nobody=False, env=None):
        r = H.run([self.env.mp, "cycle", d, "0"], as_nobody=as_nobody, env=env)
        assert r.rc == 0 and "TORN" not in r.text, f"restore failed: {r}"
        got = H.restored(r)
        assert got == step, f"restore gave {got}, wanted {step}: {r}"

    def damaged_newest(self, d):
        """The crafted newest step is damaged; restore and verify fall back to step 1."""
        self.judged(d, damaged_step=GOOD, fallback=1)
        self.restores(d, 1)

    def outside(self):
        """A folder outside every checkpoint with a file whose content must survive."""
        o = self.env.fresh("outside")
        with open(os.path.join(o, "precious"), "w") as f:
            f.write("precious")
        return o

    @staticmethod
    def intact(outside):
        p = os.path.join(outside, "precious")
        assert os.path.isfile(p) and not os.path.islink(p) and open(p).read() == "precious", "a file outside was touched"


def main():
    if len(sys.argv) != 6 or sys.argv[1] not in CASES:
        print(__doc__)
        return 2
    klass, tool, mp, xxh3, hooks = sys.argv[1:]
    if klass == "users" and os.geteuid() != 0:
        print("SKIPPED: the other-user cases need root (to act as uid 65534 and to own directories)")
        return 77
    env = H.Env(tool, mp, xxh3, hooks.upper() in ("1", "ON", "TRUE"))
    if klass == "users":
        why = env.reach_for_nobody()
        if why:
            env.close()
            print(f"SKIPPED: {why}")
            return 77
    return H.run_cases(f"hostile {klass}", CASES[klass], env, Check)

if __name__ == "__main__":
    sys.exit(main())
