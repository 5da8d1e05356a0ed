#!/usr/bin/env python3
"""Crafted sharded steps (docs/hostile-inputs.md "Sharded tensors"): a step saved by 4 ranks
(reshard_mp), step 2 then damaged the ways an attacker or a bug would, including a forger who
flips a bit and re-checksums the entry and the header. Each time restore at 4 ranks (the same
layout) and at 3 (resharding) must skip step 2 naming why and restore step 1 byte for byte, and
trainrt-ckpt verify must call step 2 damaged with a fallback to 1, all within the time and memory
limits of the hostile suite.

Usage: sharded_cases.py MPIRUN RESHARD_MP TRAINRT_CKPT CKPT_XXH3"""
import json
import os
import struct
import sys

import hostile_lib as H


def main():
    mpirun, prog, tool, xxh3 = sys.argv[1:5]
    env = H.Env(tool, prog, xxh3, True)
    results = []

    def mp(n, *args):
        return H.run([mpirun, "--allow-run-as-root", "--oversubscribe", "-np", str(n), prog, *args], timeout=60)

    def base():
        d = env.fresh()
        for s in ("1", "2"):
            r = mp(4, "save", d, s)
            assert r.rc == 0, f"save {s}: {r}"
        return d, os.path.join(d, H.step_name(2))

    def case(name, damage, why, verify_why=None):
        """`why`: what restore says; `verify_why`: what trainrt-ckpt verify says (default: the same)."""
        try:
            d, step2 = base()
            damage(step2)
            for n in (4, 3):
                r = mp(n, "restore", d)
                assert r.rc == 0 and r.out.count("RESTORED 1") == n and r.out.count("CONTENT ok") == n, \
                    f"restore at {n} ranks did not fall back to step 1 whole: {r}"
                assert "skipped step 2" in r.err and why in r.err, f"restore at {n} ranks did not say '{why}': {r}"
            v = H.run([tool, "verify", d])
            assert v.rc == 1 and "DAMAGED: step 2 is damaged" in v.out and "fall back to step 1" in v.out, \
                f"verify did not judge step 2 damaged: {v}"
            vw = verify_why or why
            assert vw in v.out or vw in v.err, f"verify did not say '{vw}': {v}"
            results.append((name, None))
        except AssertionError as e:
            results.append((name, str(e)))

    def edit_manifest(change):
        def damage(step2):
            m = H.load_manifest(step2)
            change(m)
            H.save_manifest(step2, m)
        return damage

    def tensor(m, name):
        return next(t for t in m["tensors"] if t["name"] == name)

    def forged_flip(step2):
        path = os.path.join(step2, "rank_00001.shard")
        header, body = H.read_shard(path)
        entry = next(e for e in header["entries"] if e["name"] == "a")
        body = bytearray(body)
        body[entry["offset"] + 5] ^= 0x10
        entry["checksum"] = H.xxh3(env, bytes(body[entry["offset"]:entry["offset"] + entry["bytes"]]))
        H.write_shard(path, header, bytes(body))
        H.repin(env, step2)

    def edit_chunk_header(step2):
        H.edit_header(env, step2, lambda h: dict(h, entries=[
            dict(e, offsets=[e["offsets"][0] + 1]) if e["name"] == "a" else e for e in h["entries"]]), rank=2)

    case("a bit flipped and the entry and header re-checksummed", forged_flip, "match its fingerprint")
    case("a shard header's chunk offsets disagree with the manifest", edit_chunk_header, "disagree on its chunk")
    case("the manifest drops a chunk", edit_manifest(lambda m: tensor(m, "a")["chunks"].pop()), "a gap")
    case("the manifest's chunks overlap",
         edit_manifest(lambda m: tensor(m, "a")["chunks"][0]["shape"].__setitem__(0, tensor(m, "a")["chunks"][0]["shape"][0] + 1)),
         "both hold")
    case("the manifest's dtype disagrees with the shards", edit_manifest(lambda m: tensor(m, "b").__setitem__("dtype", "f16")),
         "tensor 'b' was saved as f16", "disagree on its chunk")
    case("a chunk of a rank beyond the world", edit_manifest(lambda m: tensor(m, "d")["chunks"][0].__setitem__("rank", 99)),
         "above the limit")
    case("two chunks of one rank", edit_manifest(lambda m: tensor(m, "d")["chunks"].append(dict(tensor(m, "d")["chunks"][0]))),
         "two chunks of rank 3")
    case("more chunks than ranks",
         edit_manifest(lambda m: tensor(m, "a")["chunks"].extend([tensor(m, "a")["chunks"][0]] * 4)), "more chunks than ranks")
    case("a negative offset", edit_manifest(lambda m: tensor(m, "a")["chunks"][0].__setitem__("offsets", [-1])),
         "not a non-negative integer")
    case("a global shape of 2^124 elements",
         edit_manifest(lambda m: tensor(m, "b").__setitem__("global_shape", [2 ** 62, 2 ** 62])), "impossible")
    case("33 dimensions", edit_manifest(lambda m: tensor(m, "d").__setitem__("global_shape", [1] * 33)), "at most 32")
    case("a tensor table in format 1", edit_manifest(lambda m: m.__setitem__("format", 1)), "format 1")
    case("a tensor the manifest leaves out", edit_manifest(lambda m: m["tensors"].remove(tensor(m, "d"))),
         "tensor 'd' is not in the step", "does not list")
    case("a malformed fingerprint", edit_manifest(lambda m: tensor(m, "c").__setitem__("fingerprint", "xyz")),
         "malformed fingerprint")
    env.close()
    held = sum(1 for _, e in results if e is None)
    for name, e in results:
        print(f"{'ok  ' if e is None else 'FAIL'} {name}{'' if e is None else ': ' + e[:1500]}")
    print(f"sharded hostile cases: {len(results)} cases, {held} held")
    return 0 if held == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
