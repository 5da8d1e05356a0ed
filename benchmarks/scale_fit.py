"""The model of docs/scale.md: fitted by least squares on part of benchmarks/scale.sh's medians,
checked on the points held out, projected to a real fabric (`scale_model.py fit`).

Every figure is a sum of terms whose cause is known (docs/scale.md "The model"):
  const       start-up and fixed per-step work
  ranks       N: every rank's own CPU work; on this machine all N ranks share its cores, so it
              grows with N here, and with ranks per node on a real cluster
  nodes       n: one slurmstepd + PMIx server per node, here again sharing the same cores
  tree_rtt    levels(n) x round trip: a data-free fence climbs Slurm's tree (TreeWidth 16; data
              measured before 2026-11-26 15:00 had TreeWidth 50, a tree of each node alone: its
              data-free fences crossed no node, docs/scale-measured.md "Slurm's tree")
  ring_rtt    n x round trip: a fence with data goes around a ring of nodes, one hop per node
  per_node    N / n: ranks per node, the node that starts last waking its ranks
  rtt         round trips of a fixed count (0 on one node): the last leaders' one connection round
  ranks_levels N x levels(n): each level of Slurm's tree a step climbs waits, on this machine, for
              a turn on cores that all N ranks share (a wake-up behind N runnable ranks); seen once
              steps ran past 16 nodes (2-level trees: docs/scale.md "Eighth run"), invisible below
              (levels(n) = 1 for 2..16 nodes, so it is the ranks term there)
  emu_ranks_levels  N x levels(n) while cluster.sh's link delay runs (delay > 0): link_delay, a
              real-time thread that takes every packet between nodes, costs these shared cores
              CPU of its own; a real fabric has no such cost (projected as 0)
  ranks_log2, emu_ranks_log2  the same two with log2(n) rounds in place of levels(n) (0 on one
              node): the leaders' 2^k mesh and their binomial-tree collectives take log2(n) rounds;
              chosen by cross-validation over the eighth run and its three checks, where it missed
              small launches (2 to 32 nodes at 32-128 ranks) by less (docs/scale.md "Fourth check").
              `--rank-term levels` fits the eighth run's terms instead.
Coefficients are fitted with relative weights (the error that matters is a ratio) and kept
non-negative (a term with a negative fit is dropped and the rest refitted: a cost cannot be < 0).
Standard library only: the solver is a few lines of Gaussian elimination on the normal equations.
"""
import math
import random
import statistics

TREE_WIDTH = 16  # Slurm's default from 23.11 (scale.sh sets min(16, nodes) per step); the data-free fence climbs it

# figure -> terms. Which terms each step has is a statement about its design, tested by the fit.
# A step that climbs Slurm's tree (a fence, or a fence before it: every warm step and each cold
# figure from the slowest rank's own main(), `_own`) has a rounds term too (models_for picks which).
TREE_STEP = ("const", "ranks", "nodes", "ranks_levels", "emu_ranks_levels", "tree_rtt")
LEVEL_MODELS = {
    "floor_last": ("const", "ranks", "nodes", "tree_rtt"),      # bare PMIx_Init + data-free fence
    "init_last": ("const", "ranks", "nodes", "tree_rtt"),       # trainrt::init() to a ready world
    "floor_own": TREE_STEP,   # the same two from the slowest rank's own main(): its wait for the
    "init_own": TREE_STEP,    # launch of every rank on this machine's cores included
    "fence_nodata": TREE_STEP,
    "fence_data8": ("const", "ranks", "nodes", "ranks_levels", "emu_ranks_levels", "ring_rtt"),
    "uid_1root": TREE_STEP,
    "uid_roots256": TREE_STEP,
    "ckpt_commit": TREE_STEP,
    "torch_last": ("const", "ranks", "ranks2"),                  # TCPStore + gloo's full mesh
}
# The per-round wait behind N ranks, by the number of rounds: log2(n) (the default) or levels(n).
RANK_TERMS = {"log2": {"ranks_levels": "ranks_log2", "emu_ranks_levels": "emu_ranks_log2"}, "levels": {}}


def models_for(rank_term="log2"):
    """Every figure's terms with the rounds of `rank_term` ("log2" or "levels")."""
    swap = RANK_TERMS[rank_term]
    return {fig: tuple(swap.get(t, t) for t in terms) for fig, terms in LEVEL_MODELS.items()}


MODELS = models_for("log2")
# init_last by the library's design (`scale_model.py fit --init-model`):
#   tail (from 2026-11-26 22:00, 09e8db5 and 9ea5960): no fence; the leaders connect while their
#     nodes' ranks start, so after the last rank's main() come only its own init, its node's
#     attach (waking the node's ranks) and at most one round of the last leaders' connections;
#   grow (the libraries before, and fits one to four in docs/scale.md): work that grows with the
#     ranks and nodes, and fence-like round trips up Slurm's tree.
INIT_MODELS = {"tail": ("const", "per_node", "rtt"), "grow": ("const", "ranks", "nodes", "tree_rtt")}


def levels(n):
    """Levels of a TreeWidth-16 tree over n nodes (0 for one node: nothing crosses a link)."""
    return 0 if n <= 1 else math.ceil(math.log(n) / math.log(TREE_WIDTH) - 1e-9)


def feature(term, ranks, nodes, rtt_ms, delay_us=0):
    return {"const": 1.0, "ranks": float(ranks), "ranks2": float(ranks) ** 2, "nodes": float(nodes),
            "tree_rtt": levels(nodes) * rtt_ms, "ring_rtt": (nodes if nodes > 1 else 0) * rtt_ms,
            "per_node": float(ranks) / nodes, "rtt": (1.0 if nodes > 1 else 0.0) * rtt_ms,
            "ranks_levels": float(ranks) * levels(nodes),
            "emu_ranks_levels": float(ranks) * levels(nodes) if delay_us > 0 else 0.0,
            "ranks_log2": float(ranks) * math.log2(nodes),
            "emu_ranks_log2": float(ranks) * math.log2(nodes) if delay_us > 0 else 0.0}[term]


def solve(a, b):
    """x with a x = b (a square), partial pivoting; None when singular."""
    n = len(a)
    m = [row[:] + [b[i]] for i, row in enumerate(a)]
    for c in range(n):
        p = max(range(c, n), key=lambda r: abs(m[r][c]))
        if abs(m[p][c]) < 1e-12:
            return None
        m[c], m[p] = m[p], m[c]
        for r in range(n):
            if r != c:
                f = m[r][c] / m[c][c]
                m[r] = [x - f * y for x, y in zip(m[r], m[c])]
    return [m[i][n] / m[i][i] for i in range(n)]


def nonneg_lstsq(rows, ys, terms):
    """Minimises sum(((row.x - y) / y)^2) with x >= 0 by dropping negative terms one at a time."""
    active = list(range(len(terms)))
    while active:
        w = [1.0 / y for y in ys]
        # columns scaled to unit size so the normal equations stay well conditioned
        scale = [max(abs(r[j]) for r in rows) or 1.0 for j in active]
        xs = [[r[j] / s * wi for j, s in zip(active, scale)] for r, wi in zip(rows, w)]
        yw = [y * wi for y, wi in zip(ys, w)]
        ata = [[sum(x[i] * x[j] for x in xs) for j in range(len(active))] for i in range(len(active))]
        aty = [sum(x[i] * y for x, y in zip(xs, yw)) for i in range(len(active))]
        sol = solve(ata, aty)
        if sol is None:
            active.pop()  # the last term is not identifiable from these points
            continue
        coef = [c / s for c, s in zip(sol, scale)]
        worst = min(range(len(active)), key=lambda i: coef[i])
        if coef[worst] >= 0:
            out = [0.0] * len(terms)
            for j, c in zip(active, coef):
                out[j] = c
            return out
        active.pop(worst)
    return [0.0] * len(terms)


def predict(coef, terms, ranks, nodes, rtt_ms, delay_us=0):
    return sum(c * feature(t, ranks, nodes, rtt_ms, delay_us) for c, t in zip(coef, terms))


def relative_error(coef, terms, key, y, rtt_ms):
    """|model - measured| / measured at the point `key` (ranks, nodes, delay), its round trip from `rtt_ms`."""
    return abs(predict(coef, terms, key[0], key[1], rtt_ms[key], key[2]) - y) / y


def held_out(spec):
    """'nodes>=16,ranks>=1024' -> a predicate true for points any condition names."""
    conds = []
    for part in filter(None, (p.strip() for p in spec.split(","))):
        for op in (">=", "<=", "==", ">", "<"):
            if op in part:
                name, value = (x.strip() for x in part.split(op, 1))
                if name not in ("ranks", "nodes", "delay"):
                    raise SystemExit(f"--holdout: '{name}' is not ranks, nodes or delay")
                try:
                    conds.append((name, op, float(value)))
                except ValueError:
                    raise SystemExit(f"--holdout: '{value}' in '{part}' is not a number") from None
                break
        else:
            raise SystemExit(f"--holdout: '{part}' has no comparison")
    ops = {">=": float.__ge__, "<=": float.__le__, "==": float.__eq__, ">": float.__gt__, "<": float.__lt__}

    def test(key):
        vals = dict(zip(("ranks", "nodes", "delay"), map(float, key)))
        return any(ops[op](vals[name], v) for name, op, v in conds)
    return test


# A real cluster (docs/scale.md "Projection"): 8 ranks (GPUs) per node, a core per rank at least,
# kernel TCP between nodes. Each term is carried over by what it stands for.
REAL_RANKS_PER_NODE = 8
REAL_RTT_MS = 0.030        # TCP round trip node to node on a data-centre fabric (IPoIB/RoCE/Ethernet)
REAL_HOP_MS = 0.5          # a PMIx server's work per tree level (unpack, merge, forward): assumed
PUBLISHED = {"TCPStore, 96K ranks (torch libuv backend)": 100.0, "NCCL init, 96k GPUs (NVIDIA/nccl#1156)": 265.0}


# Steps where one root serves or reads a blob per rank or per node, one after another: their N term
# is printed twice, as parallel work and as the root's serial work, N times (one NCCL root's id) or
# n times (the commit's gather: rank 0 reads one bundle per node leader). An upper bound: here the
# fitted per-rank cost includes every rank's CPU on 2 shared cores, not the root's alone.
ROOT_SERIAL = {"uid_1root": "ranks", "ckpt_commit": "nodes"}


def project(coef, terms, cores_here, ranks, root_serial=None):
    """Seconds at `ranks` on a real cluster: CPU terms stop sharing one machine's cores."""
    n = max(1, ranks // REAL_RANKS_PER_NODE)
    total = 0.0
    for c, t in zip(coef, terms):
        if t == "const":
            total += c
        elif t == "ranks" and root_serial:  # "ranks" or "nodes": what the root takes one by one
            total += c * (ranks if root_serial == "ranks" else n)
        elif t == "ranks":    # per rank CPU here is c * cores_here; a node runs its ranks side by side
            total += c * cores_here
        elif t == "nodes":    # a node's own daemon work, side by side on every node
            total += c * cores_here
        elif t == "per_node":  # waking a node's ranks: here they share 2 cores, there each has one
            total += c * cores_here
        elif t == "rtt":
            total += c * (REAL_RTT_MS + REAL_HOP_MS)
        elif t in ("emu_ranks_levels", "emu_ranks_log2"):  # this machine's link emulator: no such thing there
            pass
        elif t == "ranks_log2":
            total += c * cores_here * math.log2(n)
        elif t == "ranks_levels":  # a level's wait for a core: there each rank has its own
            total += c * cores_here * levels(n)
        elif t == "tree_rtt":  # c fence-equivalents, each climbing the tree: rtt + a hop's work per level
            total += c * levels(n) * (REAL_RTT_MS + REAL_HOP_MS)
        elif t == "ring_rtt":
            total += c * n * (REAL_RTT_MS + REAL_HOP_MS)
        elif t == "ranks2":   # one store serving every rank, every rank connecting to every rank: stays
            total += c * float(ranks) ** 2
        else:
            raise ValueError(f"no projection for the term '{t}'")
    return total / 1e3


def median_interval(runs, resamples=2000, seed=0):
    """The 90% interval of the median of `runs` (bootstrap over runs, a fixed seed: the same
    figures every time): how far the median itself could fall with other runs of the same point."""
    if len(runs) < 2:
        return None
    rng = random.Random(seed)
    meds = sorted(statistics.median(rng.choices(runs, k=len(runs))) for _ in range(resamples))
    return meds[int(0.05 * resamples)], meds[int(0.95 * resamples) - 1]


def round_trips_ms(rtt):
    """Each point's round trip in ms: the median of what scale.sh recorded there (us)."""
    return {k: statistics.median(v) / 1e3 for k, v in rtt.items() if v}


def fit_models(med, rtt_ms, hold, init_model="tail", rank_term="log2"):
    """{figure: (terms, coefficients, training points, held-out points)} for every figure with
    enough points not held out to fit its terms; None for the others."""
    models = dict(models_for(rank_term), init_last=INIT_MODELS[init_model])
    out = {}
    for fig, terms in models.items():
        pts = [(k, m[fig]) for k, m in med.items() if fig in m and k in rtt_ms]
        train = [(k, y) for k, y in pts if not hold(k)]
        test = [(k, y) for k, y in pts if hold(k)]
        if len(train) < len(terms) + 1:
            out[fig] = (terms, None, train, test)
            continue
        rows = [[feature(t, k[0], k[1], rtt_ms[k], k[2]) for t in terms] for k, _ in train]
        out[fig] = (terms, nonneg_lstsq(rows, [y for _, y in train], terms), train, test)
    return out


def rtt_for_delay(rtt, delay_us):
    """The node-to-node round trip (ms) at a link delay: the median measured at that delay, else
    interpolated between the measured delays (extended past them along the last two)."""
    by_delay = {}
    for k, v in rtt.items():
        by_delay.setdefault(k[2], []).extend(v)
    pts = sorted((d, statistics.median(v)) for d, v in by_delay.items() if v)
    if not pts:
        raise SystemExit("the data holds no measured round trip: give --rtt-us")
    for d, r in pts:
        if d == delay_us:
            return r / 1e3
    if len(pts) == 1:
        raise SystemExit(f"the data measured the round trip at delay {pts[0][0]} us only: give --rtt-us for {delay_us} us")
    lo = max([p for p in pts if p[0] < delay_us], default=pts[0], key=lambda p: p[0])
    hi = min([p for p in pts if p[0] > delay_us], default=pts[-1], key=lambda p: p[0])
    if lo == hi:  # beyond the data: the last two measured delays' slope
        lo, hi = (pts[0], pts[1]) if delay_us < pts[0][0] else (pts[-2], pts[-1])
    r = lo[1] + (hi[1] - lo[1]) * (delay_us - lo[0]) / (hi[0] - lo[0])
    return max(r, 0.0) / 1e3


def predict_command(med, rtt, ranks, nodes, delay_us=None, rtt_us=None, holdout="", init_model="tail", cores_here=2,
                    rank_term="log2"):
    """Each figure at one configuration of this kind of machine (a local cluster of `nodes`
    namespace nodes on its cores), from the fit on the recorded points not held out."""
    if ranks < 1 or nodes < 1 or ranks % nodes:
        raise SystemExit(f"--ranks {ranks} must be a positive multiple of --nodes {nodes}")
    rtt_ms = round_trips_ms(rtt)
    at = rtt_us / 1e3 if rtt_us is not None else rtt_for_delay(rtt, delay_us or 0)
    fitted = fit_models(med, rtt_ms, held_out(holdout), init_model, rank_term)
    print(f"predicted for {ranks} ranks on {nodes} nodes, round trip {at * 1e3:.0f} us"
          f"{'' if rtt_us is not None else f' (link delay {delay_us or 0} us, from the data)'}; "
          f"init_last: the '{init_model}' design; rounds behind N ranks: {rank_term}; "
          f"fitted on every point{' not held out (' + holdout + ')' if holdout else ''}")
    print(f"{'figure':>14} {'model ms':>10}  fit: points, median error, terms")
    for fig, (terms, coef, train, _) in fitted.items():
        if coef is None:
            print(f"{fig:>14} {'-':>10}  {len(train)} points for {len(terms)} terms: not fitted")
            continue
        errs = [relative_error(coef, terms, k, y, rtt_ms) for k, y in train]
        print(f"{fig:>14} {predict(coef, terms, ranks, nodes, at, delay_us or 0):10.1f}  {len(train)} points, "
              f"{statistics.median(errs):.0%}, " + " + ".join(f"{c:.4g}*{t}" for c, t in zip(coef, terms)))
    return 0


def loo_command(med, rtt, init_model="tail", rank_term="log2"):
    """Leave-one-out: each point predicted by the fit on all the others, per figure (how the rounds
    term was chosen, docs/scale.md "Fourth check")."""
    rtt_ms = round_trips_ms(rtt)
    keys = sorted(k for k in med if k in rtt_ms)
    print(f"leave-one-out over {len(keys)} points; rounds behind N ranks: {rank_term}; init_last: the '{init_model}' design")
    errors = {}
    for key in keys:
        for fig, (terms, coef, _, test) in fit_models(med, rtt_ms, lambda k: k == key, init_model, rank_term).items():
            for k, y in test if coef else ():
                errors.setdefault(fig, []).append((relative_error(coef, terms, k, y, rtt_ms), k))
    for fig, errs in errors.items():
        worst = max(errs)
        print(f"{fig:>14}: median {statistics.median(e for e, _ in errs):.0%}, max {worst[0]:.0%} "
              f"({worst[1][0]}/{worst[1][1]}/{worst[1][2]} us) over {len(errs)} points")
    return 0


def fit_command(med, rtt, holdout, cores_here=2, init_model="tail", runs=None, checked=frozenset(), rank_term="log2"):
    """`checked`: points of another run (scale_model.py fit --check), held out whatever `holdout` says."""
    by_spec = held_out(holdout)
    hold = lambda k: k in checked or by_spec(k)  # noqa: E731
    holdout = " and ".join(filter(None, (holdout, f"the {len(checked)} points of --check" if checked else "")))
    status = 0
    rtt_ms = round_trips_ms(rtt)
    held = [k for k in med if k in rtt_ms and hold(k)]
    if not held:
        raise SystemExit(f"--holdout '{holdout}' holds out none of the {len(med)} points: no error to state")
    if len(held) == len([k for k in med if k in rtt_ms]):
        raise SystemExit(f"--holdout '{holdout}' holds out every point: nothing to fit on")
    print(f"model: least squares (relative, non-negative) per figure; held out: {holdout}")
    print(f"terms: const, ranks N, nodes n, tree_rtt = levels(n) x rtt (TreeWidth {TREE_WIDTH}), "
          "ring_rtt = n x rtt, ranks2 = N^2, per_node = N / n, rtt = a round trip (0 on one node), "
          "ranks_levels = N x levels(n), ranks_log2 = N x log2(n), emu_* = the same while the link delay runs; "
          f"rounds behind N ranks: {rank_term}; "
          f"init_last: the '{init_model}' design")
    # The goal's figures, in two groups: from the slowest rank's own main() (and the commit, a warm
    # step), which a user waits for; and from the last rank's main(), start-up's tail alone.
    groups = {("init_own", "floor_own", "ckpt_commit"): [], ("init_last", "floor_last"): []}
    labels = {"init_own": "ready world from the slowest rank's main(), and commit", "init_last": "start-up's tail"}
    fitted = {}
    for fig, (terms, coef, train, test) in fit_models(med, rtt_ms, hold, init_model, rank_term).items():
        if coef is None:
            print(f"\n{fig}: {len(train)} points to fit {len(terms)} terms: not fitted")
            continue
        fitted[fig] = (terms, coef)
        fit_err = [relative_error(coef, terms, k, y, rtt_ms) for k, y in train]
        print(f"\n{fig} = " + " + ".join(f"{c:.4g}*{t}" for c, t in zip(coef, terms)) + "  (ms; rtt in ms)")
        print(f"  fitted on {len(train)} points: median error {statistics.median(fit_err):.0%}, max {max(fit_err):.0%}")
        if not test:
            print("  no held-out point")
            continue
        errs, spreads, inside = [], [], 0
        for k, y in sorted(test):
            p = predict(coef, terms, k[0], k[1], rtt_ms[k], k[2])
            errs.append(abs(p - y) / y)  # p is printed too
            line = (f"  held out {k[0]:6d} ranks {k[1]:3d} nodes {k[2]:4d} us (rtt {rtt_ms[k] * 1e3:4.0f} us): "
                    f"measured {y:9.1f} ms, model {p:9.1f} ms, error {errs[-1]:.0%}")
            band = median_interval(runs[k][fig]) if runs else None
            if band:
                spreads.append((band[1] - band[0]) / 2 / y)  # the interval's half-width, relative
                inside += band[0] <= p <= band[1]
                line += f"; the median's 90% interval {band[0]:.1f}-{band[1]:.1f} ms ({len(runs[k][fig])} runs)"
            print(line)
        print(f"  held-out error: median {statistics.median(errs):.0%}, max {max(errs):.0%} over {len(errs)} points")
        if spreads:
            # An error goal below the measurement's own spread cannot be told from noise at these runs.
            print(f"  the held-out medians' own spread (half-width of the 90% bootstrap interval): median {statistics.median(spreads):.0%}, "
                  f"max {max(spreads):.0%}; the model inside that interval at {inside} of {len(spreads)} points")
        for figs, errors in groups.items():
            if fig in figs:
                errors += errs
    for figs, errors in groups.items():
        if errors:
            print(f"\n{labels[figs[0]]} ({', '.join(figs)}), held-out points: median error {statistics.median(errors):.0%}, "
                  f"max {max(errors):.0%} (goal <= 25%)")
    print(f"\nprojection to a real cluster ({REAL_RANKS_PER_NODE} ranks per node, a core per rank, rtt "
          f"{REAL_RTT_MS * 1e3:.0f} us, {REAL_HOP_MS} ms of PMIx server work per tree level; this machine: "
          f"{cores_here} cores shared by every rank), seconds:")
    print(f"{'figure':>14} " + " ".join(f"{r:>10}" for r in ("1k", "10k", "100k")))
    for fig in ("floor_last", "init_last", "floor_own", "init_own", "uid_1root", "uid_roots256", "ckpt_commit", "torch_last"):
        if fig in fitted:
            vals = [project(fitted[fig][1], fitted[fig][0], cores_here, r) for r in (1024, 10240, 102400)]
            print(f"{fig:>14} " + " ".join(f"{v:10.2f}" for v in vals))
            if fig in ROOT_SERIAL:
                vals = [project(fitted[fig][1], fitted[fig][0], cores_here, r, ROOT_SERIAL[fig]) for r in (1024, 10240, 102400)]
                print(f"{'  root-serial':>14} " + " ".join(f"{v:10.2f}" for v in vals))
    for what, s in PUBLISHED.items():
        print(f"  published: {what}: ~{s:.0f} s")
    return status
