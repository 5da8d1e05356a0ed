"""Hostile-input cases, continued: the commit protocol, what the tool prints, and other users."""
import hashlib
import json
import os
import shutil

import hostile_lib as H


def digest(folder):
    """Every file of a step, by name, as a hash of its bytes."""
    return {n: hashlib.sha256(open(os.path.join(folder, n), "rb").read()).hexdigest() for n in sorted(os.listdir(folder))}


def as_nobody_tree(path, mode=None):
    for root, dirs, files in os.walk(path):
        for n in [root] + [os.path.join(root, f) for f in files + dirs]:
            os.lchown(n, H.NOBODY, H.NOBODY)
    if mode is not None:
        os.chmod(path, mode)


def register_more(case, sd):
    # ============================================================ commit: one commit point

    @case("commit", "saving a committed step again (save_and_exit after a save) rewrites nothing, keeps metadata")
    def _(c):
        d = c.base()
        before = digest(sd(d))
        r = H.run([c.env.mp, "resave", d])
        assert r.rc == 0 and "ALREADY-COMMITTED 2" in r.out, r
        assert digest(sd(d)) == before, "the committed step changed"
        assert H.load_manifest(sd(d))["metadata"] == {"saved_by": "cycle", "step": "2"}
        c.restores(d, 2)

    @case("commit", "save_and_exit of the restored step: exit 75, the step byte for byte as it was")
    def _(c):
        d = c.base()
        before = digest(sd(d))
        r = H.run([c.env.mp, "save-and-exit", d])
        assert r.rc == 75, r
        assert digest(sd(d)) == before
        c.restores(d, 2)

    @case("commit", "re-saving a committed step while every write fails: still nothing unlinked")
    def _(c):
        d = c.base()
        before = digest(sd(d))
        r = H.run([c.env.mp, "resave", d], env={"TRAINRT_CKPT_FAIL_WRITE_AFTER": "0"})
        assert r.rc == 0 and "ALREADY-COMMITTED 2" in r.out, r
        assert digest(sd(d)) == before
        c.restores(d, 2)

    @case("commit", "a write failing before the commit point (test hook): nothing of the step is left")
    def _(c):
        if not c.env.hooks:
            print("     (hooks not compiled in: the MANIFEST.json.tmp case below covers a failure before the commit)")
            return
        d = c.base()
        r = H.run([c.env.mp, "expect-fail", d], env={"TRAINRT_CKPT_FAIL_WRITE_AFTER": "0"})
        assert r.rc == 0 and "NO-COMMIT" in r.out and "PREVIOUS-INTACT" in r.out, r
        assert not os.path.exists(sd(d, 3)), os.listdir(sd(d, 3))
        c.judged(d, intact_step=2)

    @case("commit", "the manifest's temporary name blocked (failure before the commit point): no shard left")
    def _(c):
        d = c.base()
        os.makedirs(os.path.join(sd(d, 3), "MANIFEST.json.tmp", "in-the-way"))
        r = H.run([c.env.mp, "cycle", d, "1"])
        assert r.rc == 1 and "step 3 not committed" in r.err, r
        assert sorted(os.listdir(sd(d, 3))) == ["MANIFEST.json.tmp"], os.listdir(sd(d, 3))
        c.judged(d, intact_step=2)
        c.restores(d, 2)

    @case("commit", "`latest` cannot be replaced (failure after the commit point): the step stays whole")
    def _(c):
        d = c.base()
        os.unlink(os.path.join(d, "latest"))
        os.makedirs(os.path.join(d, "latest", "in-the-way"))
        r = H.run([c.env.mp, "cycle", d, "1"])
        assert r.rc == 0 and "SAVED 3" in r.out, r
        c.judged(d, intact_step=3)
        c.restores(d, 3)

    @case("commit", "retention counts committed steps only (a damaged newer step does not push out a good one)")
    def _(c):
        d = c.base()
        H.write_raw(os.path.join(sd(d, 2), "MANIFEST.json"), b"{")
        os.makedirs(sd(d, 0))  # an uncommitted leftover
        r = H.run([c.env.mp, "cycle", d, "2"])  # restores 1; 2 is committed (damaged): left alone; saves 3
        assert r.rc == 0 and "RESTORED 1" in r.out, r
        assert os.path.exists(os.path.join(sd(d, 1), "MANIFEST.json")), "the good step 1 was deleted"
        assert not os.path.exists(sd(d, 0)) and not os.path.exists(sd(d, 2))
        c.judged(d, intact_step=3)

    # ============================================================ output: the tools never die on input

    @case("output", "metadata with control bytes, escapes and a fake OK line: escaped in text, exact in JSON")
    def _(c):
        d = c.base()
        m = H.load_manifest(sd(d))
        evil = {"note": "x\nOK: step 9 is intact\n", "esc": "\x1b[2J\x1b[31mred", "bidi": "\u202eabc", "c1": "\u0085\u009b",
                "bs": "\\x0a"}
        m["metadata"] = evil
        H.save_manifest(sd(d), m)  # metadata is not pinned: the step stays intact
        for sub in ("list", "verify"):
            r = c.tool(sub, d, rcs=(0,))
            assert "OK: step 9" not in "\n".join(l for l in r.out.splitlines() if l.startswith("OK:")), r
            assert not any(ch in r.out for ch in "\x1b\u202e\u0085\u009b"), r
            assert "x\\x0aOK: step 9" in r.out, r
        j = json.loads(c.tool("verify", d, "--json", rcs=(0,)).out)
        assert [s for s in j["steps"] if s["step"] == 2][0]["metadata"] == evil

    @case("output", "an entry name holding a newline and a fake OK line, in a problem line: escaped")
    def _(c):
        d = c.base()
        name = "w\nOK: step 7 is intact"

        def rename(h):
            h["entries"][0]["name"] = name
            h["entries"][0]["checksum"] = "0" * 16  # and make it fail, so it is printed as a problem
            return h
        H.edit_header(c.env, sd(d), rename)
        r = c.judged(d, damaged_step=2, fallback=1)
        assert "w\\x0aOK: step 7 is intact" in r.out, r
        c.restores(d, 1)

    @case("output", "a directory path with a newline, a fake OK line and a byte that is not UTF-8")
    def _(c):
        d = c.base()
        odd = os.fsencode(d) + b"-\xff\nOK: step 5 is intact"
        os.rename(d, odd)
        r = H.run([os.fsencode(c.env.tool), b"verify", odd, b"--json"])
        assert r.rc == 0 and json.loads(r.out)["steps"][0]["step"] == 2, r
        r = H.run([os.fsencode(c.env.tool), b"verify", odd + b"-missing"])
        assert r.rc == 2 and len(r.err.strip().splitlines()) == 1 and not r.out.startswith("OK"), r

    for args in (["verify", "/nonexistent-trainrt-hostile"], ["verify", "/etc/hostname"], ["list", "/dev/null"],
                 ["verify", "/tmp", "--step", "18446744073709551616"], ["verify", "/tmp", "--step", "-1"],
                 ["verify"], ["frobnicate", "/tmp"], []):
        @case("output", f"trainrt-ckpt {' '.join(args)}: exit 2, one line")
        def _(c, args=args):
            c.tool(*args, rcs=(2,))

    # ============================================================ users: other users' directories

    @case("users", "a directory owned by another user: root's save refused, restore reads it")
    def _(c):
        d = c.base()
        as_nobody_tree(d)
        r = H.run([c.env.mp, "cycle", d, "1"])
        assert r.rc == 1 and "owned by uid 65534" in r.err, r
        assert not os.path.exists(sd(d, 3))
        c.restores(d, 2)

    for mode in (0o777, 0o1777):
        @case("users", f"a directory of mode {mode:o}: save refused, restore reads it")
        def _(c, mode=mode):
            d = c.base()
            os.chmod(d, mode)
            r = H.run([c.env.mp, "cycle", d, "1"])
            assert r.rc == 1 and "writable by others" in r.err, r
            assert not os.path.exists(sd(d, 3))
            c.restores(d, 2)

    @case("users", "a group-writable directory of one's own (0775): saving works (documented)")
    def _(c):
        d = c.base()
        os.chmod(d, 0o775)
        assert H.run([c.env.mp, "cycle", d, "1"]).rc == 0
        c.judged(d, intact_step=3)

    @case("users", "uid 65534 in root's checkpoint: restore and verify work, saving is refused, nothing changes")
    def _(c):
        d = c.base()
        before = digest(sd(d))
        c.restores(d, 2, as_nobody=True)
        r = H.run([c.env.mp, "cycle", d, "1"], as_nobody=True)
        assert r.rc == 1 and "owned by uid 0" in r.err, r
        assert digest(sd(d)) == before and not os.path.exists(sd(d, 3))
        c.judged(d, intact_step=2, as_nobody=True)
        os.chmod(d, 0o700)
        r = c.tool("verify", d, as_nobody=True, rcs=(2,))
        assert "Permission denied" in r.err, r

    @case("users", "uid 65534 plants a symlink where root's checkpoint directory will be: refused")
    def _(c):
        victim = c.base()
        before = digest(sd(victim))
        shared = c.env.fresh("shared")
        os.chmod(shared, 0o1777)
        r = H.run(["ln", "-s", victim, os.path.join(shared, "ckpt")], as_nobody=True)
        assert r.rc == 0, r
        r = H.run([c.env.mp, "cycle", os.path.join(shared, "ckpt"), "1"])
        assert r.rc == 1 and "symbolic link" in r.err, r
        assert digest(sd(victim)) == before and not os.path.exists(sd(victim, 3))

    @case("users", "uid 65534 creates root's checkpoint directory first: root does not save into it")
    def _(c):
        shared = c.env.fresh("shared")
        os.chmod(shared, 0o1777)
        assert H.run(["mkdir", os.path.join(shared, "ckpt")], as_nobody=True).rc == 0
        r = H.run([c.env.mp, "cycle", os.path.join(shared, "ckpt"), "1"])
        assert r.rc == 1 and "owned by uid 65534" in r.err, r
        assert os.listdir(os.path.join(shared, "ckpt")) == []

    @case("users", "in a group-writable directory, uid 65534's planted steps are never written into or removed")
    def _(c):
        d, o = c.base(), c.outside()
        os.chown(d, 0, H.NOBODY)
        os.chmod(d, 0o775)
        plant = ("mkdir {d}/{s3} {d}/{s0} && ln -s {o}/precious {d}/{s3}/rank_00000.shard && "
                 "echo keep > {d}/{s0}/mine").format(d=d, o=o, s3=H.step_name(3), s0=H.step_name(0))
        r = H.run(["sh", "-c", plant], as_nobody=True, env={"HOME": "/"})
        assert r.rc == 0, r
        r = H.run([c.env.mp, "cycle", d, "1"])  # saves 3: a directory of uid 65534
        assert r.rc == 1 and "owned by uid 65534" in r.err, r
        c.intact(o)
        shutil.rmtree(sd(d, 3))
        assert H.run([c.env.mp, "cycle", d, "3"]).rc == 0  # 3, 4, 5: retention runs
        assert open(os.path.join(sd(d, 0), "mine")).read() == "keep\n", "uid 65534's directory was touched"
        c.intact(o)
        c.judged(d, intact_step=5)

    @case("users", "uid 65534 puts a FIFO where root reads a manifest: root's verify and restore do not hang")
    def _(c):
        d = c.base()
        os.chown(d, 0, H.NOBODY)
        os.chmod(d, 0o775)
        r = H.run(["sh", "-c", f"mkdir {d}/{H.step_name(9)} && mkfifo {d}/{H.step_name(9)}/MANIFEST.json"], as_nobody=True)
        assert r.rc == 0, r
        c.judged(d, damaged_step=9, fallback=2)
        c.restores(d, 2)
