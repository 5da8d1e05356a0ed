"""The cases of hostile_doctor.py, by class: redirect (links, FIFOs, a file swapped for a FIFO after the
listing), bounds (files at and past the caps), users (another uid: a permission error is never
"absent", for trainrt-doctor, --can-shrink, trainrt-ckpt, trainrt-topo --cache and train.sbatch)."""
import os
import threading

import hostile_lib as H

CASES = {"redirect": [], "bounds": [], "users": []}


def case(klass, name):
    def register(fn):
        CASES[klass].append((name, fn))
        return fn
    return register


def metrics(rank, node, world, steps=6, end=True, start_wall=1000.0):
    s = (f'{{"event":"start","wall":{start_wall},"world":{world},"node":"{node}","rank":{rank},'
         f'"local_rank":{rank % 2}}}\n')
    for i in range(1, steps + 1):
        s += f'{{"event":"step","step":{i},"wall":{start_wall + i},"step_s":0.012,"allreduce_s":0.002}}\n'
    if end:
        s += f'{{"event":"end","wall":{start_wall + steps + 1},"step":{steps}}}\n'
    return s


def flight(rank, reason, last_completed=6, in_flight=7, ops=None):
    if ops is None:
        ops = (f'{{"seq":{last_completed},"op":"allreduce(grads)","bytes":4096,"start_s":1.0,"end_s":1.5}},'
               f'{{"seq":{in_flight},"op":"allreduce(grads)","bytes":4096,"start_s":2.0,"end_s":null}}')
    return (f'{{"rank":{rank},"reason":"{reason}","last_completed":{last_completed},"in_flight":{in_flight},'
            f'"ops":[{ops}]}}\n')


def write(d, name, text, mode="w"):
    with open(os.path.join(d, name), mode) as f:
        f.write(text)


def healthy(c, world=2):
    d = c.env.fresh()
    for r in range(world):
        write(d, f"metrics_rank{r}.jsonl", metrics(r, "n1", world))
    return d


def hang_named_3(r):
    """The verdict of Check.run_dir(): rank 3 on n2 never arrived."""
    assert r.rc == 1 and "never arrived: rank 3 on n2" in r.out, f"wanted the hang verdict naming rank 3: {r}"


# ============================================================ redirect

@case("redirect", "a rank file that is a symlink to a valid file outside is not followed")
def _(c):
    d = healthy(c)
    outside = c.env.fresh("outside")
    write(outside, "other.jsonl", metrics(1, "n1", 2))
    os.unlink(os.path.join(d, "metrics_rank1.jsonl"))
    os.symlink(os.path.join(outside, "other.jsonl"), os.path.join(d, "metrics_rank1.jsonl"))
    r = c.doctor(d, rcs=(2,))
    assert "metrics_rank1.jsonl: a symbolic link" in r.out, r


@case("redirect", "flight files that are links to /dev/zero and /dev/urandom, a FIFO, a directory: not opened")
def _(c):
    d = c.run_dir()
    os.symlink("/dev/zero", os.path.join(d, "flight_rank3.json"))
    os.symlink("/dev/urandom", os.path.join(d, "metrics_rank5.jsonl"))
    os.mkfifo(os.path.join(d, "flight_rank4.json"))
    os.mkdir(os.path.join(d, "flight_rank6.json"))
    r = c.doctor(d, rcs=(1,))
    for part in ("flight_rank3.json: a symbolic link", "flight_rank4.json: a FIFO", "flight_rank6.json: a directory"):
        assert part in r.out, f"no note '{part}': {r}"


@case("redirect", "a rank file swapped for a FIFO between the listing and the read (200 runs): never a hang")
def _(c):
    d = healthy(c)
    os.rename(os.path.join(d, "metrics_rank1.jsonl"), os.path.join(d, "r1.regular"))
    os.mkfifo(os.path.join(d, "r1.fifo"))
    target = os.path.join(d, "metrics_rank1.jsonl")
    stop = threading.Event()

    def flip():
        n = 0
        while not stop.is_set():
            n += 1
            tmp = os.path.join(d, f".swap{n % 2}")
            os.link(os.path.join(d, "r1.fifo" if n % 2 else "r1.regular"), tmp)
            os.rename(tmp, target)  # atomic: the name is always one or the other

    t = threading.Thread(target=flip, daemon=True)
    t.start()
    try:
        for _ in range(200):
            c.doctor(d, timeout=10)  # a FIFO opened for reading without O_NONBLOCK waits for a writer forever
    finally:
        stop.set()
        t.join()


# ============================================================ bounds

@case("bounds", "a flight file at the 16 MiB cap of minimal ops: read as it streams, the verdict still given")
def _(c):
    d = c.run_dir()
    op = '{"seq":1,"op":"x","bytes":1,"start_s":1}'
    n = (16 << 20) // (len(op) + 1) - 8
    ops = ",".join([op] * n)
    write(d, "flight_rank0.json", '{"rank":0,"reason":"timed out after 5000 ms waiting for rank(s) 3",'
          '"last_completed":6,"in_flight":7,"ops":[' + ops + "]}")
    assert os.path.getsize(os.path.join(d, "flight_rank0.json")) <= 16 << 20
    hang_named_3(c.doctor(d, rcs=(1,)))


@case("bounds", "a 60 MiB flight file of empty ops (the old cap was 64 MiB): refused by size, no bad_alloc")
def _(c):
    d = c.run_dir()
    write(d, "flight_rank0.json", '{"rank":0,"reason":"x","last_completed":6,"in_flight":7,"ops":[' +
          ",".join(["{}"] * (20 << 20)) + "]}")
    r = c.doctor(d, rcs=(1,))
    hang_named_3(r)
    assert "flight_rank0.json:" in r.out and "a flight recorder may have" in r.out, r


@case("bounds", "a 16 MiB string and a 16 MiB nesting bomb in flight files: bounded memory, notes")
def _(c):
    d = c.run_dir()
    write(d, "flight_rank0.json", '{"rank":0,"reason":"' + "r" * ((16 << 20) - 200) +
          '","last_completed":6,"in_flight":7,"ops":[]}')
    write(d, "flight_rank1.json", "[" * ((16 << 20) - 10))
    r = c.doctor(d, rcs=(1,))
    hang_named_3(r)
    assert "flight_rank1.json: not complete JSON" in r.out, r


@case("bounds", "64 MiB of minimal step lines: the newest step times kept in a ring, linear time")
def _(c):
    d = healthy(c)
    line = '{"event":"step","step":1,"step_s":1}\n'
    with open(os.path.join(d, "metrics_rank0.jsonl"), "a") as f:
        f.write(line * ((64 << 20) // len(line)))
        f.write('{"event":"end"}\n')
    r = c.doctor(d, rcs=(0, 1))
    assert r.seconds < 15, f"took {r.seconds:.1f} s: {r}"


@case("bounds", "a sparse 300 MiB metrics file whose last attempt is at its end: read from the end")
def _(c):
    d = healthy(c)
    p = os.path.join(d, "metrics_rank0.jsonl")
    with open(p, "r+b") as f:
        f.truncate(300 << 20)
        f.seek(0, os.SEEK_END)
        f.write(b"\n" + metrics(0, "n1", 2).encode())
    r = c.doctor(d, rcs=(2,))
    assert "only the last" in r.out and "no start event" not in r.out, r
    assert r.seconds < 15, f"took {r.seconds:.1f} s: {r}"


@case("bounds", "20000 ranks of small files: the per-rank keeps shrink, time stays bounded")
def _(c):
    world = 20000
    d = c.env.fresh()
    for r in range(world):
        write(d, f"metrics_rank{r}.jsonl", metrics(r, f"n{r // 8}", world, steps=3, end=False))
        if r != 3:
            write(d, f"flight_rank{r}.json", flight(r, "r" * 1000 + f" waiting for rank(s) 3"))
    r = c.doctor(d, rcs=(1,), timeout=60)
    assert "never arrived: rank 3 on n0" in r.out, r


# ============================================================ users (root only; the programs run as uid 65534)

def locked(c, name="locked"):
    """A folder only root may enter, inside the scratch folder."""
    p = c.env.fresh(name)
    os.chmod(p, 0o700)
    return p


@case("users", "a run folder inside a folder uid 65534 may not enter: exit 2 naming 'Permission denied'")
def _(c):
    d = os.path.join(locked(c), "run")
    os.makedirs(d)
    r = c.doctor(d, as_nobody=True, rcs=(2,))
    assert "Permission denied" in r.out, r


@case("users", "a run folder uid 65534 may not list: exit 2 naming 'Permission denied'")
def _(c):
    d = c.run_dir()
    os.chmod(d, 0o711)
    r = c.doctor(d, as_nobody=True, rcs=(2,))
    assert "Permission denied" in r.out, r


@case("users", "one rank's unreadable flight file is no absent rank: exit 2, no culprit for train.sbatch")
def _(c):
    d = c.run_dir(reason="step 7: nccl: allreduce did not complete within 5000 ms")
    write(d, "flight_rank3.json", flight(3, "watchdog: no step progress", last_completed=7, in_flight=8))
    os.chmod(os.path.join(d, "flight_rank3.json"), 0o600)
    r = c.doctor(d, as_nobody=True, rcs=(2,))
    assert "flight_rank3.json" in r.out and "Permission denied" in r.out, r
    r = c.doctor(d, "--culprit-nodes", as_nobody=True, rcs=(2,))
    assert r.out.strip() == "", f"culprit nodes named on unreadable input: {r}"


@case("users", "--can-shrink on a checkpoint behind a folder uid 65534 may not enter: exit 2, not 'no checkpoint'")
def _(c):
    ckpt = os.path.join(locked(c), "ckpt")
    assert H.run([c.env.mp, "cycle", ckpt, "2"]).rc == 0
    link = os.path.join(c.env.fresh("run"), "ckpt")
    os.symlink(ckpt, link)
    for path in (ckpt, link):
        r = c.doctor("--can-shrink", path, as_nobody=True, rcs=(2,))
        assert "Permission denied" in r.out, r


@case("users", "--can-shrink, trainrt-ckpt verify and list with a newer step uid 65534 may not read: exit 2")
def _(c):
    ckpt = c.env.fresh("ckpt")
    assert H.run([c.env.mp, "cycle", ckpt, "3"]).rc == 0  # steps 1 and 2 committed
    os.chmod(os.path.join(ckpt, H.step_name(2)), 0o700)
    r = c.doctor("--can-shrink", ckpt, as_nobody=True, rcs=(2,))
    assert "step 2" in r.out and "Permission denied" in r.out, r
    for args in (["verify", ckpt], ["verify", ckpt, "--json"], ["list", ckpt]):
        r = c.run([c.env.ckpt, *args], as_nobody=True)
        lines = [l for l in r.err.splitlines() if l.strip()]
        assert r.rc == 2 and len(lines) == 1 and "Permission denied" in lines[0], f"trainrt-ckpt {args[0]}: {r}"
    # As root (no permission error) the same checkpoint answers as usual.
    assert c.run([c.env.ckpt, "verify", ckpt]).rc == 0


@case("users", "trainrt-topo --cache with a cache uid 65534 may not read: exit 2 naming 'Permission denied'")
def _(c):
    d = c.env.fresh("cache")
    xml = os.path.join(d, "node.xml")
    write(d, "node.xml", '<system version="1"><cpu numaid="0" affinity="0000000f"><pci busid="0000:01:00.0" '
          'class="0x030200" vendor="0x10de" device="0x2330"/></cpu></system>\n')
    cache = os.path.join(d, "topology.cache")
    r = c.run([c.env.topo, "--nccl-xml", xml, "--write-cache", cache])
    assert r.rc == 0, r
    assert c.run([c.env.topo, "--nccl-xml", xml, "--cache", cache], as_nobody=True).rc == 0
    os.chmod(cache, 0o600)
    r = c.run([c.env.topo, "--nccl-xml", xml, "--cache", cache], as_nobody=True)
    assert r.rc == 2 and "Permission denied" in r.text, r


@case("users", "train.sbatch as uid 65534: a checkpoint it cannot read means 'do not shrink', never an exclusion")
def _(c):
    run_dir = c.run_dir(name="job")  # the doctor names rank 3 on n2
    os.rename(run_dir, run_dir + ".tmp")
    os.makedirs(run_dir)
    os.rename(run_dir + ".tmp", os.path.join(run_dir, "out"))
    ckpt = os.path.join(locked(c), "ckpt")
    assert H.run([c.env.mp, "cycle", ckpt, "2"]).rc == 0
    os.symlink(ckpt, os.path.join(run_dir, "ckpt"))
    stubs = c.env.fresh("stubs")
    log = os.path.join(stubs, "srun.log")
    write(stubs, "srun", f'#!/bin/bash\necho "$*" >> {log}\n[[ $(wc -l < {log}) -ge 2 ]]\n')
    write(stubs, "scontrol", '#!/bin/bash\n[[ $1 == show ]] && printf "n1\\nn2\\n"\n')
    for n in ("srun", "scontrol"):
        os.chmod(os.path.join(stubs, n), 0o755)
    os.chmod(stubs, 0o777)
    env = {"PATH": f"{stubs}:/usr/bin:/bin", "TRAINER": "/bin/true", "RUN_DIR": run_dir, "DOCTOR": c.env.doctor,
           "MAX_RERUNS": "1", "SLURM_JOB_ID": "77", "SLURM_JOB_NODELIST": "n[1-2]", "SLURM_NTASKS_PER_NODE": "2",
           "SLURM_SUBMIT_DIR": stubs}
    r = c.run(["bash", c.env.sbatch], as_nobody=True, env=env, timeout=60)
    calls = open(log).read().splitlines()
    assert r.rc == 0 and len(calls) == 2, f"wanted a failed step and one rerun: {calls} {r}"
    assert "never arrived: rank 3 on n2" in r.out, f"the doctor's verdict is not in the job log: {r}"
    assert "--exclude" not in calls[1] and "not excluding n2" in r.out, f"excluded on an unanswerable question: {calls} {r}"
