#!/usr/bin/env python3
"""Hostile inputs for trainrt-doctor and for every tool that answers a question about a folder
(docs/hostile-inputs.md "Doctor").

Usage: hostile_doctor.py CLASS TRAINRT_DOCTOR TRAINRT_CKPT CKPT_MP TRAINRT_TOPO TRAIN_SBATCH
CLASS: redirect | bounds | users. Every program runs under a timeout and a 1 GiB address-space
limit (tests/checkpoint/hostile_lib.py); a hang, a death by a signal, an exit 2 without naming the
problem, or an answer given on input that could not be read fails the case. The users class acts
as uid 65534 on copies of the programs in a folder that uid can reach, and says SKIPPED (77) when
not root. Prints one line per case and "hostile doctor CLASS: N cases, N held"; exit 0 when all
held, 1 otherwise."""
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "checkpoint"))
import hostile_lib as H  # noqa: E402
from hostile_doctor_cases import CASES, flight, metrics, write  # noqa: E402


class Env:
    """Programs (copied where uid 65534 can run them) and a scratch folder it can reach."""

    def __init__(self, doctor, ckpt, mp, topo, sbatch):
        self.base = tempfile.mkdtemp(prefix="trainrt-doctor-hostile-")
        os.chmod(self.base, 0o755)
        self.bin = os.path.join(self.base, "bin")
        os.makedirs(self.bin)
        self.libs = set()
        self.doctor, self.ckpt, self.topo = (self._copy(p) for p in (doctor, ckpt, topo))
        self.mp = mp  # run as root only
        self.sbatch = shutil.copy(sbatch, self.bin)
        self.env = {"LD_LIBRARY_PATH": ":".join(sorted(self.libs))} if self.libs else {}
        self.n = 0

    def _copy(self, program):
        """The program, and the libraries of its own build tree it loads, copied under bin/."""
        dst = shutil.copy(program, self.bin)
        os.chmod(dst, 0o755)
        build = os.path.dirname(os.path.dirname(os.path.abspath(program)))
        out = subprocess.run(["ldd", program], capture_output=True, text=True).stdout
        for line in out.splitlines():
            parts = line.split("=>")
            lib = parts[1].split()[0] if len(parts) == 2 and parts[1].split() else ""
            if lib.startswith(build + "/") or lib.startswith(os.path.dirname(os.path.abspath(program)) + "/"):
                shutil.copy(lib, self.bin)
                self.libs.add(self.bin)
        return dst

    def fresh(self, name="run"):
        self.n += 1
        d = os.path.join(self.base, f"{self.n:03d}-{name}")
        os.makedirs(d)
        return d

    def close(self):
        shutil.rmtree(self.base, ignore_errors=True)


class Check:
    def __init__(self, env):
        self.env = env

    def run(self, argv, as_nobody=False, env=None, timeout=H.TIMEOUT_S):
        e = dict(self.env.env)
        e.update(env or {})
        r = H.run(argv, as_nobody=as_nobody, env=e, timeout=timeout)
        name = os.path.basename(argv[0])
        assert r.rc != "TIMEOUT", f"{name} hung: {r}"
        assert isinstance(r.rc, int) and r.rc >= 0, f"{name} died by a signal: {r}"
        return r

    def doctor(self, *args, as_nobody=False, rcs=(0, 1, 2), timeout=H.TIMEOUT_S):
        r = self.run([self.env.doctor, *args], as_nobody=as_nobody, timeout=timeout)
        assert r.rc in rcs, f"trainrt-doctor {' '.join(args)}: rc {r.rc}, wanted one of {rcs}: {r}"
        assert "bad_alloc" not in r.text, f"trainrt-doctor ran out of memory: {r}"
        return r

    def run_dir(self, world=4, hung=3, reason=None, name="run"):
        """A hang: every rank but `hung` waited in collective #7 and its error names `hung`."""
        d = self.env.fresh(name)
        for r in range(world):
            write(d, f"metrics_rank{r}.jsonl", metrics(r, f"n{r // 2 + 1}", world, end=False))
        for r in range(world):
            if r != hung:
                why = reason or f"step 7: shm: rank {r}: allreduce #7 (arrive) timed out after 5000 ms waiting for rank(s) {hung}"
                write(d, f"flight_rank{r}.json", flight(r, why))
        return d


def main():
    if len(sys.argv) != 7 or sys.argv[1] not in CASES:
        print(__doc__)
        return 2
    klass = sys.argv[1]
    if klass == "users" and os.geteuid() != 0:
        print("SKIPPED: the other-user cases need root (to act as uid 65534 and to own folders)")
        return 77
    env = Env(*sys.argv[2:])
    return H.run_cases(f"hostile doctor {klass}", CASES[klass], env, Check)


if __name__ == "__main__":
    sys.exit(main())
