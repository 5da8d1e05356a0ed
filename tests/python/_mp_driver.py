"""Shared by the multi-world-size tests (sharded_mp.py, torch2_*.py). Each file is its own driver:
run plainly it launches its phases under mpirun at several world sizes (a PMIx server, so
trainrt.torch sets up gloo without a port) and checks what they print; `FILE rank PHASE ...` is one
rank of a phase.

The torch2_* tests run in CI, where scripts/python-torch.sh installs torch 2.x: there a missing
or old torch is a failure, not a skip (require_torch2). Elsewhere they skip (77) saying how to
get it."""
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile


def require_torch2():
    try:
        import torch
        ok = int(torch.__version__.split(".")[0]) >= 2
        why = f"torch {torch.__version__} ({os.path.dirname(torch.__file__)}) is not 2.x"
    except ImportError as e:
        ok, why = False, f"torch is not importable ({e})"
    if ok:
        return
    if os.environ.get("CI"):
        print(f"FAIL: {why}: CI installs torch 2.x (scripts/python-torch.sh), so this must not skip", flush=True)
        sys.exit(1)
    print(f"SKIPPED: {why}; scripts/python-torch.sh installs torch 2.x into the venv", flush=True)
    sys.exit(77)


class Driver:
    """Runs phases of `script` under mpirun and collects failures."""

    def __init__(self, script, mpirun):
        self.script, self.mpirun, self.failures = script, mpirun, 0
        self.dir = tempfile.mkdtemp(prefix="trainrt-torch2-")

    def run(self, np, phase, *args, expect_rc=0):
        cmd = [self.mpirun, "--allow-run-as-root", "--oversubscribe", "-x", "PYTHONPATH", "-np", str(np),
               sys.executable, self.script, "rank", phase, *map(str, args)]
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
        if p.returncode != expect_rc:
            self.fail(f"{phase} at {np} ranks exited {p.returncode} (expected {expect_rc})", p.stdout)
        return p.stdout

    def expect(self, name, out, *patterns, count=None):
        """Every regex in `patterns` occurs in `out` (`count` times when given)."""
        for pat in patterns:
            n = len(re.findall(pat, out, re.M))
            if n == 0 or (count is not None and n != count):
                self.fail(f"{name}: {pat!r} found {n} times" + ("" if count is None else f", expected {count}"), out)
                return False
        print(f"PASS {name}", flush=True)
        return True

    def fail(self, what, out=""):
        self.failures += 1
        print(f"FAIL {what}", flush=True)
        if out:
            print("\n".join(out.splitlines()[-40:]), flush=True)

    def copy(self, src, name):
        dst = os.path.join(self.dir, name)
        shutil.rmtree(dst, ignore_errors=True)
        shutil.copytree(src, dst, symlinks=True)
        return dst

    def finish(self):
        shutil.rmtree(self.dir, ignore_errors=True)
        print(f"{self.failures} failed", flush=True)
        sys.exit(1 if self.failures else 0)


def step_dir(root, step):
    return os.path.join(root, f"step_{step:012d}")


def flip_bit_in_entry(shard_path, entry_name=None):
    """Flips one bit in the middle of an entry's data (the largest, or `entry_name`) of a shard
    file, found through its header (docs/checkpoint.md: magic, version, header length, JSON).
    Returns the entry's name."""
    import json
    with open(shard_path, "r+b") as f:
        head = f.read(16)
        (length,) = struct.unpack("<I", head[12:16])
        header = json.loads(f.read(length))
        data_start = (16 + length + 4095) // 4096 * 4096
        entries = [e for e in header["entries"] if e["bytes"] > 0]
        e = next(e for e in entries if e["name"] == entry_name) if entry_name else max(entries, key=lambda e: e["bytes"])
        at = data_start + e["offset"] + e["bytes"] // 2
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0x10]))
    return e["name"]


def init_gloo():
    """Rank's torch process group over the trainrt world (PMIx under mpirun)."""
    import trainrt.torch
    return trainrt.torch.init_process_group("gloo")
