"""Shared pieces of the checkpoint hostile-input suite (hostile_inputs.py): running the programs
under a timeout and an address-space limit (optionally as uid 65534), and crafting checkpoints
the way an attacker who can write the directory would (headers re-pinned in the manifest)."""
import json
import os
import resource
import shutil
import struct
import subprocess
import sys
import tempfile

TIMEOUT_S = 20
MEMORY_BYTES = 1 << 30  # RLIMIT_AS: the `ulimit -v` every run gets
NOBODY = 65534


class Env:
    def __init__(self, tool, mp, xxh3, hooks):
        self.tool, self.mp, self.xxh3, self.hooks = tool, mp, xxh3, hooks
        self.base = tempfile.mkdtemp(prefix="trainrt-hostile-")
        os.chmod(self.base, 0o755)  # the unprivileged cases must be able to reach their folders
        self.n = 0

    def fresh(self, name="ckpt"):
        self.n += 1
        d = os.path.join(self.base, f"{self.n:03d}-{name}")
        os.makedirs(d)
        return d

    def close(self):
        shutil.rmtree(self.base, ignore_errors=True)

    def reach_for_nobody(self):
        """Makes the programs runnable by uid 65534, wherever the build folder is: a clone in a 0700
        home is out of its reach. They are copied into this 0755 folder, with every library of
        theirs it cannot read (libtrainrt.so beside them, found through LD_LIBRARY_PATH; the
        build's own search path then points nowhere it can go). Returns "" when uid 65534 runs the
        copies, else why not (then the cases cannot run here)."""
        bin_dir = os.path.join(self.base, "bin")
        os.makedirs(bin_dir)
        os.chmod(bin_dir, 0o755)
        libs = set()
        for prog in (self.tool, self.mp):
            ldd = subprocess.run(["ldd", prog], capture_output=True, text=True)
            libs.update(w for line in ldd.stdout.splitlines() for w in line.split() if w.startswith("/"))
        unreadable = run(["sh", "-c", 'for f; do [ -r "$f" ] || echo "$f"; done', "sh", *sorted(libs)], as_nobody=True)
        for lib in unreadable.out.split():
            shutil.copy(lib, bin_dir)
        self.tool, self.mp = shutil.copy(self.tool, bin_dir), shutil.copy(self.mp, bin_dir)
        for p in os.listdir(bin_dir):
            os.chmod(os.path.join(bin_dir, p), 0o755)
        os.environ["LD_LIBRARY_PATH"] = ":".join(x for x in (bin_dir, os.environ.get("LD_LIBRARY_PATH")) if x)
        probe = run([self.tool, "--help"], as_nobody=True)
        if probe.rc != 0:
            return f"uid 65534 cannot run trainrt-ckpt copied to {bin_dir} (is {self.base} out of its reach?): {probe}"
        return ""


def _limits(as_nobody):
    def apply():
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if as_nobody:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
    return apply


class Result:
    def __init__(self, rc, out, err, seconds):
        self.rc, self.out, self.err, self.seconds = rc, out, err, seconds

    @property
    def text(self):
        return self.out + self.err

    def __repr__(self):
        return f"rc={self.rc} ({self.seconds:.1f} s) out={self.out[-400:]!r} err={self.err[-400:]!r}"


def run(argv, as_nobody=False, env=None, timeout=TIMEOUT_S):
    """rc is 'TIMEOUT' when the run hung, a negative number when a signal ended it."""
    import time
    t0 = time.monotonic()
    e = dict(os.environ)
    e.update(env or {})
    try:
        p = subprocess.run(argv, capture_output=True, timeout=timeout, preexec_fn=_limits(as_nobody), env=e)
        return Result(p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace"),
                      time.monotonic() - t0)
    except subprocess.TimeoutExpired as x:
        return Result("TIMEOUT", (x.stdout or b"").decode("utf-8", "replace"),
                      (x.stderr or b"").decode("utf-8", "replace"), time.monotonic() - t0)


def step_name(step):
    return f"step_{step:012d}"


def restored(result):
    """The step ckpt_mp restored, or None."""
    for line in result.out.splitlines():
        if "RESTORED" in line:
            return int(line.split()[-1])
    return None


# ---------------------------------------------------------------- crafting

def read_shard(path):
    data = open(path, "rb").read()
    length = struct.unpack_from("<I", data, 12)[0]
    start = (16 + length + 4095) // 4096 * 4096
    return json.loads(data[16:16 + length]), data[start:]


def header_bytes(header):
    return header if isinstance(header, bytes) else json.dumps(header, separators=(",", ":")).encode()


def write_shard(path, header, body, length=None):
    text = header_bytes(header)
    head = b"TRTSHRD1" + struct.pack("<II", 1, len(text) if length is None else length) + text
    head += b"\0" * ((-len(head)) % 4096)
    if os.path.lexists(path):
        os.unlink(path)
    with open(path, "wb") as f:
        f.write(head + body)


def xxh3(env, data):
    p = subprocess.run([env.xxh3], input=data, capture_output=True, check=True)
    return p.stdout.decode().strip()


def load_manifest(step_dir):
    return json.load(open(os.path.join(step_dir, "MANIFEST.json")))


def save_manifest(step_dir, manifest):
    path = os.path.join(step_dir, "MANIFEST.json")
    if os.path.lexists(path):
        os.unlink(path)
    with open(path, "w") as f:
        json.dump(manifest, f)


def repin(env, step_dir):
    """Make the manifest agree with the shards as they now are (size and header hash)."""
    m = load_manifest(step_dir)
    for s in m["shards"]:
        path = os.path.join(step_dir, s["file"])
        with open(path, "rb") as f:  # the header only: crafted shards may be terabytes of holes
            head = f.read(16)
            length = struct.unpack_from("<I", head, 12)[0]
            text = f.read(min(length, 64 << 20))
        s["bytes"] = os.path.getsize(path)
        s["header_xxh3"] = xxh3(env, text)
    save_manifest(step_dir, m)


def edit_header(env, step_dir, change, rank=0):
    """Apply change(header) -> header (dict or raw bytes) to a shard and re-pin it."""
    path = os.path.join(step_dir, f"rank_{rank:05d}.shard")
    header, body = read_shard(path)
    write_shard(path, change(header), body)
    repin(env, step_dir)


def write_raw(path, data):
    if os.path.lexists(path):
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.unlink(path)
    with open(path, "wb") as f:
        f.write(data)


def sparse(path, size):
    """`path` becomes a file of `size` bytes, nearly all of it a hole."""
    with open(path, "r+b") as f:
        f.truncate(size)


def run_cases(title, cases, env, check):
    """Runs every (name, case) on check(env), closes env, prints one line per case and a summary;
    0 when every case held, else 1. A crafting step that raised fails its case, never the run."""
    held = 0
    try:
        for name, case in cases:
            try:
                case(check(env))
                held += 1
                print(f"ok   {name}")
            except AssertionError as e:
                print(f"FAIL {name}: {e}")
            except Exception as e:
                print(f"FAIL {name}: {type(e).__name__}: {e}")
            sys.stdout.flush()
    finally:
        env.close()
    print(f"{title}: {len(cases)} cases, {held} held (timeout {TIMEOUT_S} s, RLIMIT_AS {MEMORY_BYTES >> 20} MiB)")
    return 0 if held == len(cases) else 1
