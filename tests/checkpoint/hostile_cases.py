"""The cases of the checkpoint hostile-input suite, by class (see hostile_inputs.py). Each takes a
Check and raises AssertionError when something did not hold."""
import json
import os
import shutil
import stat

import hostile_lib as H

CASES = {"redirect": [], "bounds": [], "commit": [], "output": [], "users": []}


def case(klass, name):
    def register(fn):
        CASES[klass].append((name, fn))
        return fn
    return register


def sd(d, step=2):
    return os.path.join(d, H.step_name(step))


def replace_with_symlink(path, target):
    os.unlink(path)
    os.symlink(target, path)


# ================================================================ redirect: nothing is followed

@case("redirect", "latest is a symlink to a file outside: ignored, then replaced, never written through")
def _(c):
    d, o = c.base(), c.outside()
    replace_with_symlink(os.path.join(d, "latest"), os.path.join(o, "precious"))
    r = c.judged(d, intact_step=2)
    assert "<- latest" not in r.out
    assert H.run([c.env.mp, "cycle", d, "1"]).rc == 0
    c.intact(o)
    assert not os.path.islink(os.path.join(d, "latest"))


for what in ("MANIFEST.json", "rank_00000.shard"):
    @case("redirect", f"{what} is a symlink to a valid copy outside: not followed")
    def _(c, what=what):
        d, o = c.base(), c.outside()
        shutil.copy(os.path.join(sd(d), what), os.path.join(o, what))
        replace_with_symlink(os.path.join(sd(d), what), os.path.join(o, what))
        c.damaged_newest(d)

    @case("redirect", f"{what} is a FIFO: refused at once, no hang")
    def _(c, what=what):
        d = c.base()
        os.unlink(os.path.join(sd(d), what))
        os.mkfifo(os.path.join(sd(d), what))
        c.damaged_newest(d)

    @case("redirect", f"{what} is a directory: refused")
    def _(c, what=what):
        d = c.base()
        os.unlink(os.path.join(sd(d), what))
        os.mkdir(os.path.join(sd(d), what))
        c.damaged_newest(d)

    @case("redirect", f"{what} is a symlink to /dev/zero: refused")
    def _(c, what=what):
        d = c.base()
        replace_with_symlink(os.path.join(sd(d), what), "/dev/zero")
        c.damaged_newest(d)


@case("redirect", "the shard is a character device (/dev/zero's numbers): never opened")
def _(c):
    d = c.base()
    p = os.path.join(sd(d), "rank_00000.shard")
    os.unlink(p)
    try:
        os.mknod(p, 0o644 | stat.S_IFCHR, os.makedev(1, 5))
    except PermissionError:
        os.mkfifo(p)  # not root: a FIFO stands in
    c.damaged_newest(d)


@case("redirect", "a step directory that is a symlink to a valid step outside: not a step")
def _(c):
    d, o = c.base(), c.outside()
    shutil.copytree(sd(d), os.path.join(o, "s"))
    m = H.load_manifest(os.path.join(o, "s"))
    os.symlink(os.path.join(o, "s"), sd(d, 9))
    assert m["step"] == 2
    r = c.judged(d, intact_step=2)
    assert " 9 " not in r.out
    c.restores(d, 2)


@case("redirect", "the checkpoint directory itself is a symlink (also with a trailing slash): refused")
def _(c):
    d = c.base()
    link = d + "-link"
    os.symlink(d, link)
    for path in (link, link + "/"):
        r = c.tool("verify", path, rcs=(2,))
        assert "symbolic link" in r.err, r
        m = H.run([c.env.mp, "cycle", path, "1"])
        assert m.rc == 1 and "symbolic link" in m.err, m
    c.judged(d, intact_step=2)


@case("redirect", "retention meets a step-named symlink to an outside folder: the folder is untouched")
def _(c):
    d, o = c.base(), c.outside()
    shutil.copytree(sd(d, 1), os.path.join(o, "victim"))
    os.symlink(os.path.join(o, "victim"), sd(d, 0))
    assert H.run([c.env.mp, "cycle", d, "4"]).rc == 0
    c.intact(o)
    assert sorted(os.listdir(os.path.join(o, "victim"))) == ["MANIFEST.json", "rank_00000.shard"]
    c.judged(d, intact_step=6)


@case("redirect", "retention of a step holding a symlink out and a subdirectory: nothing outside goes")
def _(c):
    d, o = c.base(), c.outside()
    os.symlink(os.path.join(o, "precious"), os.path.join(sd(d, 1), "link"))
    os.makedirs(os.path.join(sd(d, 1), "sub"))
    shutil.copy(os.path.join(o, "precious"), os.path.join(sd(d, 1), "sub", "precious"))
    assert H.run([c.env.mp, "cycle", d, "3"]).rc == 0
    c.intact(o)
    assert os.path.isfile(os.path.join(sd(d, 1), "sub", "precious"))
    assert not os.path.exists(os.path.join(sd(d, 1), "MANIFEST.json"))
    c.judged(d, intact_step=5)


@case("redirect", "symlinks planted at every name a save writes: replaced, never written through")
def _(c):
    d, o = c.base(), c.outside()
    target = os.path.join(o, "precious")
    os.makedirs(sd(d, 3))
    for name in ("rank_00000.shard.tmp", "rank_00000.shard", "MANIFEST.json.tmp"):
        os.symlink(target, os.path.join(sd(d, 3), name))
    os.symlink(target, os.path.join(d, "latest.tmp"))
    replace_with_symlink(os.path.join(d, "latest"), target)
    r = H.run([c.env.mp, "cycle", d, "1"])
    assert r.rc == 0, r
    c.intact(o)
    c.judged(d, intact_step=3)
    c.restores(d, 3)


@case("redirect", "step names outside the one grammar are not steps (valid copies inside)")
def _(c):
    d = c.base()
    for name in ("step_9", "step_0000000000009", "step_000000000009x", "step_-00000000009", "step_99999999999999999999",
                 "step_000000000009 ", "step_000000000009.tmp", "Step_000000000009"):
        shutil.copytree(sd(d), os.path.join(d, name))
    r = c.judged(d, intact_step=2)
    assert r.out.count("committed") + r.out.count("intact") <= 3, r
    c.restores(d, 2)


# ================================================================ bounds: every number is capped

def manifest_case(name, change):
    @case("bounds", f"manifest: {name}")
    def _(c):
        d = c.base()
        m = H.load_manifest(sd(d))
        out = change(m)
        if isinstance(out, bytes):
            H.write_raw(os.path.join(sd(d), "MANIFEST.json"), out)
        else:
            H.save_manifest(sd(d), m if out is None else out)
        c.damaged_newest(d)


def setter(key, value, where=None):
    def change(m):
        (m["shards"][0] if where == "shard" else m)[key] = value
    return change


for v in (2**63, 2**64 - 1, 2**64, -1, 1e30, 2**32 + 1, 0, 1048577, "1", 1.5, None, 1000000):
    manifest_case(f"world_size {v!r}", setter("world_size", v))
for v in (2**63, -1, 1, "0"):
    manifest_case(f"shard rank {v!r}", setter("rank", v, "shard"))
for v in (2**64 - 1, -1, 2**70, 0):
    manifest_case(f"shard bytes {v!r}", setter("bytes", v, "shard"))
manifest_case("shard file ../../etc/shadow", setter("file", "../../etc/shadow", "shard"))
manifest_case("header_xxh3 not hex", setter("header_xxh3", "zz", "shard"))
manifest_case("format 3 (unknown)", setter("format", 3))
manifest_case("format 0", setter("format", 0))
manifest_case("step of another step", setter("step", 1))
manifest_case("zero ranks", lambda m: dict(m, world_size=0, shards=[]))
manifest_case("no shards for one rank", setter("shards", []))
manifest_case("the same rank twice", lambda m: dict(m, world_size=2, shards=[m["shards"][0]] * 2))
manifest_case("100000 ranks whose shards are missing", lambda m: dict(
    m, world_size=100000, shards=[dict(m["shards"][0], rank=r, file=f"rank_{r:05d}.shard") for r in range(100000)]))
manifest_case("metadata value is an object", setter("metadata", {"k": {"nested": 1}}))
manifest_case("nested 100000 deep", lambda m: b"[" * 100000 + b"]" * 100000)
manifest_case("a byte that is not UTF-8", lambda m: json.dumps(m).encode().replace(b'"cycle"', b'"cy\xffcle"'))
manifest_case("truncated in half", lambda m: json.dumps(m).encode()[:len(json.dumps(m)) // 2])
manifest_case("17 MiB of whitespace around a valid manifest", lambda m: b" " * (17 << 20) + json.dumps(m).encode())


@case("bounds", "manifest: a sparse file claiming 1 TiB")
def _(c):
    d = c.base()
    H.sparse(os.path.join(sd(d), "MANIFEST.json"), 1 << 40)
    c.damaged_newest(d)


def header_case(name, change):
    @case("bounds", f"shard header (re-pinned in the manifest): {name}")
    def _(c):
        d = c.base()
        H.edit_header(c.env, sd(d), change)
        c.damaged_newest(d)


def entry(key, value):
    def change(h):
        h["entries"][0][key] = value
        return h
    return change


header_case("no entries", lambda h: dict(h, entries=[]))
header_case("one entry twice", lambda h: dict(h, entries=h["entries"] + h["entries"][:1]))
header_case("step of another step", lambda h: dict(h, step=1))
header_case("another rank", lambda h: dict(h, rank=1))
header_case("another world size", lambda h: dict(h, world_size=2))
header_case("format 3 (unknown)", lambda h: dict(h, format=3))
for k, v in (("offset", 2**64 - 1), ("offset", -1), ("bytes", 2**64 - 1), ("bytes", -1), ("bytes", 1e300),
             ("shape", [-1]), ("shape", [2**63]), ("shape", [1e300]), ("shape", [1] * 100), ("dtype", "f128"),
             ("kind", "pickle"), ("checksum", "xyz"), ("name", ""), ("replicated", "yes")):
    header_case(f"entry {k} {v!r}", entry(k, v))
header_case("offset + bytes overflows 2^64", lambda h: entry("bytes", 2**63)(entry("offset", 2**63)(h)))
header_case("nested 100000 deep", lambda h: b'{"entries":' + b"[" * 100000 + b"]" * 100000 + b"}")
header_case("an entry name that is not UTF-8", lambda h: json.dumps(h).encode().replace(b'"weights"', b'"we\xffghts"'))


@case("bounds", "shard header length 0xFFFFFFFF")
def _(c):
    d = c.base()
    p = os.path.join(sd(d), "rank_00000.shard")
    h, body = H.read_shard(p)
    H.write_shard(p, h, body, length=0xFFFFFFFF)
    m = H.load_manifest(sd(d))
    m["shards"][0]["bytes"] = os.path.getsize(p)
    H.save_manifest(sd(d), m)
    c.damaged_newest(d)


for size, label in ((100 << 30, "100 GiB"), (5 << 40, "5 TiB")):
    @case("bounds", f"shard grown to a sparse {label}, re-pinned")
    def _(c, size=size):
        d = c.base()
        H.sparse(os.path.join(sd(d), "rank_00000.shard"), size)
        H.repin(c.env, sd(d))
        c.damaged_newest(d)


@case("bounds", "shard with a 2 GiB blob in a sparse file, re-pinned")
def _(c):
    d = c.base()
    p = os.path.join(sd(d), "rank_00000.shard")
    h, body = H.read_shard(p)
    for e in h["entries"]:
        if e["kind"] == "blob":
            e["bytes"] = 2 << 30
    H.write_shard(p, h, body)
    H.sparse(p, 3 << 30)
    H.repin(c.env, sd(d))
    c.damaged_newest(d)


for repin in (False, True):
    @case("bounds", f"shard truncated by half{', re-pinned' if repin else ''}")
    def _(c, repin=repin):
        d = c.base()
        p = os.path.join(sd(d), "rank_00000.shard")
        os.truncate(p, os.path.getsize(p) // 2)
        if repin:
            H.repin(c.env, sd(d))
        c.damaged_newest(d)


@case("bounds", "step 1's shard as step 2's, re-pinned: another step")
def _(c):
    d = c.base()
    shutil.copy(os.path.join(sd(d, 1), "rank_00000.shard"), os.path.join(sd(d), "rank_00000.shard"))
    H.repin(c.env, sd(d))
    c.damaged_newest(d)


for content in (b"step_000000000002x\n", b"../../etc/shadow\n", b"step_2\n", b""):
    @case("bounds", f"latest holds {content!r}: no pointer, nothing else changes")
    def _(c, content=content):
        d = c.base()
        H.write_raw(os.path.join(d, "latest"), content)
        r = c.judged(d, intact_step=2)
        assert "<- latest" not in r.out


@case("bounds", "latest is a sparse 1 GiB file")
def _(c):
    d = c.base()
    H.sparse(os.path.join(d, "latest"), 1 << 30)
    assert "<- latest" not in c.judged(d, intact_step=2).out


from hostile_cases_more import register_more  # noqa: E402  (commit, output, users)

register_more(case, sd)
