"""benchmarks/scale_fit.py on figures made from known coefficients: every term set of a design
(init_last's 'tail' and 'grow' among them) recovers its coefficients, predicts the held-out points
exactly, and projects with every term it uses (a term it cannot project is an error)."""
import contextlib
import io
import math
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "benchmarks"))
import scale_fit  # noqa: E402

points = [(r, n, d) for r in (64, 128, 256, 512, 768, 1024, 1536) for n in (1, 2, 4, 8, 16, 24, 32)
          for d in (0, 20, 100) if r >= 4 * n and r % n == 0]  # 24 nodes: 768 and 1,536 ranks
rtt = {k: [30.0 + 2 * k[2]] for k in points}  # us, as scale.sh records them
truth = {"const": 50.0, "ranks": 0.3, "nodes": 4.0, "tree_rtt": 20.0, "ring_rtt": 2.0, "ranks2": 1e-4,
         "per_node": 0.8, "rtt": 30.0, "ranks_levels": 0.05, "emu_ranks_levels": 0.02, "ranks_log2": 0.07,
         "emu_ranks_log2": 0.03}
failed = []


def independent_feature(term, ranks, nodes, rtt_ms, delay_us=0):
    """The terms as docs/scale.md states them, written here apart from scale_fit.feature."""
    levels = 0 if nodes == 1 else (1 if nodes <= 16 else 2)  # TreeWidth 16, up to 256 nodes
    return {"const": 1.0, "ranks": ranks, "nodes": nodes, "tree_rtt": levels * rtt_ms, "ring_rtt": 0 if nodes == 1 else nodes * rtt_ms,
            "per_node": ranks / nodes, "rtt": rtt_ms if nodes > 1 else 0.0, "ranks_levels": ranks * levels,
            "emu_ranks_levels": ranks * levels if delay_us > 0 else 0.0, "ranks_log2": ranks * math.log2(nodes),
            "emu_ranks_log2": ranks * math.log2(nodes) if delay_us > 0 else 0.0}[term]

for design, terms in scale_fit.INIT_MODELS.items():
    med = {}
    for k in points:
        ms = sum(truth[t] * independent_feature(t, k[0], k[1], rtt[k][0] / 1e3) for t in terms)
        med[k] = {"init_last": ms}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        scale_fit.fit_command(med, rtt, "ranks>=512,delay==20", init_model=design)
    text = out.getvalue()
    line = next((l for l in text.splitlines() if l.startswith("init_last = ")), "")
    for t in terms:
        want = f"{truth[t]:.4g}*{t}"
        if want not in line:
            failed.append(f"{design}: {want} not in '{line}'")
    held = [l for l in text.splitlines() if "held-out error" in l and "init_last" not in l]
    if not held or "median 0%, max 0%" not in held[0]:
        failed.append(f"{design}: held-out error not 0: {held[:1]}")
    if "init_last" not in text.split("projection")[-1]:
        failed.append(f"{design}: no projection of init_last")
    for r in (1024, 10240, 102400):
        v = scale_fit.project([truth[t] for t in terms], terms, 2, r)
        if not (v > 0 and math.isfinite(v)):
            failed.append(f"{design}: projection at {r} ranks is {v}")

# Every figure but torch's (which needs more ranks than a node count here gives it), with either
# count of rounds behind N ranks, from all its terms at once: the fit recovers each coefficient, the
# emulator's term among them, and the projection drops that term (a real fabric has no emulator).
for rank_term in ("log2", "levels"):
    models = scale_fit.models_for(rank_term)
    med = {}
    for k in points:
        med[k] = {fig: sum(truth[t] * independent_feature(t, k[0], k[1], rtt[k][0] / 1e3, k[2]) for t in terms)
                  for fig, terms in models.items() if fig not in ("torch_last", "init_last")}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        scale_fit.fit_command(med, rtt, "ranks>=512,delay==20", rank_term=rank_term)
    for fig, terms in models.items():
        if fig in ("torch_last", "init_last"):
            continue
        block = out.getvalue().split(f"\n{fig} = ", 1)[-1].split("\n\n", 1)[0]
        for t in terms:
            if f"{truth[t]:.4g}*{t}" not in block.splitlines()[0]:
                failed.append(f"{rank_term}: {fig}: {truth[t]:.4g}*{t} not in '{block.splitlines()[0]}'")
        if "held-out error: median 0%, max 0%" not in block:  # the 20 us points: the emulator is on there too
            failed.append(f"{rank_term}: {fig}: held-out points not predicted exactly: {block[-200:]}")
    text = out.getvalue()
    if "(init_own, floor_own, ckpt_commit), held-out points: median error 0%, max 0%" not in text:
        failed.append("no error line for the ready world from main() and the commit")
    # The root's serial bound: N ids for one NCCL root, one bundle per node for the commit.
    for fig in ("uid_1root", "ckpt_commit"):
        lines = text.split("projection")[-1].splitlines()
        at = next(i for i, l in enumerate(lines) if l.strip().startswith(fig + " "))
        want = scale_fit.project([truth[t] for t in models[fig]], models[fig], 2, 1024, scale_fit.ROOT_SERIAL[fig])
        if f"{want:10.2f}" not in lines[at + 1] or "root-serial" not in lines[at + 1]:
            failed.append(f"{rank_term}: {fig}: root-serial row '{lines[at + 1]}', want {want:.2f} at 1k")
    # predict: the emulator's term with a link delay, none with a round trip given for a real link.
    for kw, emu_on in (({"delay_us": 50}, True), ({"rtt_us": 130.0}, False)):
        got = io.StringIO()
        with contextlib.redirect_stdout(got):
            scale_fit.predict_command(med, rtt, 768, 24, rank_term=rank_term, **kw)
        want = sum(truth[t] * independent_feature(t, 768, 24, 0.130, 50 if emu_on else 0) for t in models["ckpt_commit"])
        line = next((l for l in got.getvalue().splitlines() if l.strip().startswith("ckpt_commit")), "")
        if f"{want:10.1f}" not in line:
            failed.append(f"{rank_term}: predict {kw}: ckpt_commit want {want:.1f}, got '{line}'")
    emu = models["ckpt_commit"]
    with_emu = [truth[t] for t in emu]
    without = [0.0 if t.startswith("emu_") else truth[t] for t in emu]
    if scale_fit.project(with_emu, emu, 2, 10240) != scale_fit.project(without, emu, 2, 10240):
        failed.append("the link emulator's term is projected to a real cluster")

# Leave-one-out on figures made from the terms: every point predicted exactly by the others.
got = io.StringIO()
with contextlib.redirect_stdout(got):
    scale_fit.loo_command(med, rtt, rank_term="levels")
loo = [l for l in got.getvalue().splitlines() if "median" in l]
if len(loo) < 7 or any("median 0%, max 0%" not in l for l in loo):
    failed.append(f"leave-one-out on exact figures: {loo}")
# A round's wait projects as one rank's share of it per round: coefficient x cores x rounds, at
# 102,400 ranks on 12,800 nodes 4 levels of 16 or log2(12,800).
for term, rounds in (("ranks_levels", 4), ("ranks_log2", math.log2(12800))):
    got = scale_fit.project([0.05], (term,), 2, 102400)
    if abs(got - 0.05 * 2 * rounds / 1e3) > 1e-12:
        failed.append(f"{term} projected to {got} s at 102,400 ranks")
# log2(n) rounds are the default, in the library and on the command line (docs/scale.md "Fourth check").
if scale_fit.MODELS != scale_fit.models_for("log2") or "ranks_log2" not in scale_fit.MODELS["init_own"]:
    failed.append(f"scale_fit.MODELS is not the log2 rounds: {scale_fit.MODELS['init_own']}")

# The root's serial bound: N blobs for one NCCL root, one bundle per node (8 ranks each) for the commit.
for what, want in (("ranks", 10.24), ("nodes", 1.28)):
    got = scale_fit.project([1.0], ("ranks",), 2, 10240, what)
    if abs(got - want) > 1e-9:
        failed.append(f"root-serial by {what} at 10,240 ranks: {got} s, want {want}")

# The tail design does not grow with the job: the same ranks per node, 16x the nodes, same time.
tail = scale_fit.INIT_MODELS["tail"]
a = scale_fit.project([truth[t] for t in tail], tail, 2, 1024)
b = scale_fit.project([truth[t] for t in tail], tail, 2, 16384)
if abs(a - b) > 1e-12:
    failed.append(f"tail: {a} s at 1,024 ranks but {b} s at 16,384")

# The median's interval: the same every call (a fixed seed), around the median, within the runs,
# wider for scattered runs than for tight ones; none from a single run.
tight, loose = [100.0, 101, 99, 100.5, 99.5, 100], [20.0, 300, 60, 100, 150, 40]
lo, hi = scale_fit.median_interval(tight)
if not (99 <= lo <= 100 <= hi <= 101) or scale_fit.median_interval(tight) != (lo, hi):
    failed.append(f"median_interval of tight runs: {lo}-{hi}")
llo, lhi = scale_fit.median_interval(loose)
if not (min(loose) <= llo < 80 and 125 < lhi <= max(loose)):
    failed.append(f"median_interval of scattered runs: {llo}-{lhi}")
if scale_fit.median_interval([5.0]) is not None:
    failed.append("median_interval of one run is not None")
# fit_command with the runs: the held-out lines name the interval and the summary counts it.
med = {k: {"fence_nodata": 10.0 + k[0] * 0.05} for k in points}
runs = {k: {"fence_nodata": [v["fence_nodata"] * f for f in (0.9, 1.0, 1.1)]} for k, v in med.items()}
out = io.StringIO()
with contextlib.redirect_stdout(out):
    scale_fit.fit_command(med, rtt, "ranks>=512,delay==20", runs=runs)
if "the median's 90% interval" not in out.getvalue() or "inside that interval at" not in out.getvalue():
    failed.append("fit_command with runs names no interval")

# predict_command: a configuration not among the points (768 ranks on 24 nodes, a link delay of
# 50 us between the measured 20 and 100) gets the true value of the design's terms, the round trip
# interpolated from the data's delays.
tail = scale_fit.INIT_MODELS["tail"]
med = {k: {"init_last": sum(truth[t] * independent_feature(t, k[0], k[1], rtt[k][0] / 1e3) for t in tail)} for k in points}
out = io.StringIO()
with contextlib.redirect_stdout(out):
    scale_fit.predict_command(med, rtt, 768, 24, delay_us=50)
want = sum(truth[t] * independent_feature(t, 768, 24, (30.0 + 2 * 50) / 1e3) for t in tail)
line = next((l for l in out.getvalue().splitlines() if l.strip().startswith("init_last")), "")
if f"{want:10.1f}" not in line or "round trip 130 us" not in out.getvalue():
    failed.append(f"predict 768/24/50 us: want {want:.1f} ms at 130 us, got '{line}' in {out.getvalue()[:200]}")
# Bad input is named: a hold-out that leaves nothing out (or nothing in), a non-number, ranks that
# do not divide.
for call, text in ((lambda: scale_fit.fit_command(med, rtt, "ranks>=99999"), "holds out none"),
                   (lambda: scale_fit.fit_command(med, rtt, "ranks>=1"), "holds out every point"),
                   (lambda: scale_fit.held_out("ranks>=abc"), "'abc' in 'ranks>=abc' is not a number"),
                   (lambda: scale_fit.predict_command(med, rtt, 100, 8, delay_us=0), "multiple of --nodes")):
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            call()
        failed.append(f"no error for the case '{text}'")
    except SystemExit as e:
        if text not in str(e):
            failed.append(f"error '{e}' does not say '{text}'")

# scale_model.py fit --check: the other run's points are held out (their errors stated, 0 here),
# and a configuration in both runs is refused by name.
import subprocess  # noqa: E402
import tempfile  # noqa: E402

cols = "point ranks nodes delay_us rtt_us rep mode figure ms srun_s load_before load_after".split()


def raw_file(path, keys):
    with open(path, "w") as f:
        f.write("\t".join(cols) + "\n")
        for r, n, d in keys:
            ms = sum(truth[t] * independent_feature(t, r, n, rtt[(r, n, d)][0] / 1e3, d) for t in scale_fit.MODELS["ckpt_commit"])
            f.write("\t".join(map(str, (f"{r}/{n}/{d}", r, n, d, rtt[(r, n, d)][0], 1, "init", "ckpt_commit", ms, 1, 0, 0))) + "\n")


model = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "scale_model.py"
with tempfile.TemporaryDirectory() as tmp:
    fit_keys = [k for k in points if k[0] < 1024]
    check_keys = [k for k in points if k[0] == 1024]
    raw_file(f"{tmp}/fit.tsv", fit_keys)
    raw_file(f"{tmp}/check.tsv", check_keys)
    run = subprocess.run([sys.executable, str(model), "fit", f"{tmp}/fit.tsv", "--check", f"{tmp}/check.tsv"],
                         capture_output=True, text=True)
    held = [l for l in run.stdout.splitlines() if l.startswith("  held out")]
    if "rounds behind N ranks: log2" not in run.stdout:
        failed.append("fit's default rounds are not log2")
    if run.returncode != 0 or len(held) != len(check_keys) or any("  1024 ranks" not in l for l in held) \
            or f"held-out error: median 0%, max 0% over {len(check_keys)} points" not in run.stdout:
        failed.append(f"fit --check: rc {run.returncode}, {len(held)} held-out lines: {run.stdout[-300:]}{run.stderr[-300:]}")
    raw_file(f"{tmp}/both.tsv", check_keys[:1] + fit_keys[:1])
    run = subprocess.run([sys.executable, str(model), "fit", f"{tmp}/fit.tsv", "--check", f"{tmp}/both.tsv"],
                         capture_output=True, text=True)
    k = fit_keys[0]
    if run.returncode == 0 or f"{k[0]}/{k[1]}/{k[2]} us" not in run.stderr:
        failed.append(f"fit --check with a fitted configuration: rc {run.returncode}, '{run.stderr.strip()}'")

print("\n".join(failed) if failed else "scale_fit: every design's coefficients recovered; intervals as expected")
sys.exit(1 if failed else 0)
