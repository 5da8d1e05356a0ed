#!/usr/bin/env python3
"""Figures and model of benchmarks/scale.sh (docs/scale.md).

  scale_model.py summary RAW.tsv...     medians per point, ratios to the bare fence of the same point
  scale_model.py fit RAW.tsv... [--holdout SPEC] [--check RAW.tsv]... [--init-model tail|grow]
                                        fits the model on the points not held out, states its error
                                        on the held-out ones (and on every point of the --check
                                        runs), projects to 1k/10k/100k ranks
  scale_model.py loo RAW.tsv... [--rank-term log2|levels]
                                        each point predicted by the fit on all the others (leave-one-
                                        out), per figure: median and largest error
  scale_model.py predict RAW.tsv... --ranks N --nodes n [--delay-us D | --rtt-us R] [--holdout SPEC]
                                        every figure at a configuration (measured or not) of this kind
                                        of machine, from the fit on the recorded points not held out

Standard library only, so it runs from a fresh clone wherever python3 is.
"""
import argparse
import collections
import statistics
import sys

from scale_fit import fit_command, loo_command, predict_command


def read_raw(paths):
    """{(ranks, nodes, delay): {figure: [ms, ...]}} plus the rtt and load seen at each point."""
    figures = collections.defaultdict(lambda: collections.defaultdict(list))
    rtt, load = collections.defaultdict(list), collections.defaultdict(list)
    need = ("ranks", "nodes", "delay_us", "figure", "ms", "rtt_us", "load_before", "mode")
    for path in paths:
        try:
            f = open(path)
        except OSError as e:
            raise SystemExit(f"{path}: {e.strerror}") from None
        with f:
            header = None
            for n, line in enumerate(f, 1):
                if line.startswith("#"):
                    continue
                cols = line.rstrip("\n").split("\t")
                if header is None:
                    header = cols
                    missing = [c for c in need if c not in header]
                    if missing:
                        raise SystemExit(f"{path}: not a scale.sh raw.tsv (no column {', '.join(missing)})")
                    continue
                row = dict(zip(header, cols))
                try:
                    key = (int(row["ranks"]), int(row["nodes"]), int(row["delay_us"]))
                    if row["figure"] == "failed":
                        figures[key][f"{row['mode']}_failed"].append(1.0)
                        continue
                    figures[key][row["figure"]].append(float(row["ms"]))
                    if row["rtt_us"] not in ("NA", ""):
                        rtt[key].append(float(row["rtt_us"]))
                    load[key].append(float(row["load_before"]))
                except (KeyError, ValueError) as e:
                    raise SystemExit(f"{path}:{n}: a malformed line ({e})") from None
    if not figures:
        raise SystemExit(f"no figures in {', '.join(paths)}")
    return figures, rtt, load


def medians(figures):
    return {k: {f: statistics.median(v) for f, v in figs.items()} for k, figs in figures.items()}


def ratio(a, b):
    return f"{a / b:.2f}" if a is not None and b else "-"


def summary(paths):
    figures, rtt, load = read_raw(paths)
    med = medians(figures)
    cols = ["floor_last", "init_last", "torch_last", "floor_own", "init_own", "fence_nodata", "fence_data8",
            "session_allgather8", "uid_1root", "uid_roots256", "ckpt_commit", "base_ckpt_commit"]
    print("medians in ms (slowest rank; _last: from the last rank's main() to the last rank ready; "
          "warm steps: median of reps x 3)")
    print(f"{'ranks':>6} {'nodes':>5} {'delay':>5} {'rtt':>5} {'load':>5} " + " ".join(f"{c:>12}" for c in cols)
          + f" {'init/floor':>10} {'torch/init':>10} {'runs':>5}")
    for key in sorted(med):
        m = med[key]
        r, n, d = key
        cells = " ".join(f"{m[c]:12.1f}" if c in m else f"{'-':>12}" for c in cols)
        runs = len(figures[key].get("init_last", []))
        fails = {f: len(v) for f, v in figures[key].items() if f.endswith("_failed")}
        rt = f"{statistics.median(rtt[key]):.0f}" if rtt[key] else "NA"
        print(f"{r:6d} {n:5d} {d:5d} {rt:>5} {statistics.median(load[key]):5.1f} {cells} "
              f"{ratio(m.get('init_last'), m.get('floor_last')):>10} {ratio(m.get('torch_last'), m.get('init_last')):>10} "
              f"{runs:5d}{'  failed: ' + str(fails) if fails else ''}")
    messages(figures)


MESSAGE_KINDS = ["fences", "fences_data", "puts", "gets_remote", "gets_local", "sockets"]


def messages(figures):
    """What init() asked of PMIx per rank and the sockets it opened (scale_bench's init_msgs_*): the
    most over runs, for a node leader / for any other rank. Constant columns as ranks and nodes grow
    are the O(1) per rank the design claims; a column that grows names what does not."""
    keys = [k for k in sorted(figures) if any(f.startswith("init_msgs_") for f in figures[k])]
    if not keys:
        return
    print("\ninit's requests per rank (leader/other, most over runs): PMIx fences without data, with data, "
          "puts, gets of keys on other nodes, on this node; sockets opened")
    print(f"{'ranks':>6} {'nodes':>5} {'delay':>5} " + " ".join(f"{k:>12}" for k in MESSAGE_KINDS))
    for key in keys:
        f = figures[key]
        cell = lambda k: "/".join(f"{max(f[n]):.0f}" if f.get(n) else "-" for n in (f"init_msgs_{k}_leader", f"init_msgs_{k}_other"))
        print(f"{key[0]:6d} {key[1]:5d} {key[2]:5d} " + " ".join(f"{cell(k):>12}" for k in MESSAGE_KINDS))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    # The model's choices, the same for every command that fits it (fit, loo, predict).
    model = argparse.ArgumentParser(add_help=False)
    model.add_argument("--rank-term", choices=("log2", "levels"), default="log2",
                       help="the rounds a step waits behind N ranks: log2 (N x log2(n), the default since the fourth "
                            "check) or levels (N x levels(n) of Slurm's 16-wide tree: the eighth run's fit and its "
                            "first three checks)")
    model.add_argument("--init-model", choices=("tail", "grow"), default="tail",
                       help="init_last's terms: tail (the library since 2026-11-26 22:00: const + ranks per node + "
                            "a round trip) or grow (the libraries before: const + ranks + nodes + tree round trips); "
                            "default %(default)s")
    s = sub.add_parser("summary")
    s.add_argument("raw", nargs="+")
    f = sub.add_parser("fit", parents=[model])
    f.add_argument("raw", nargs="+")
    f.add_argument("--holdout", default=None,
                   help="points the fit never sees: a comma list of conditions that each hold out points "
                        "(e.g. 'ranks>=1024' or 'nodes==8'); default nodes>=16,ranks>=1024, none with --check")
    f.add_argument("--check", action="append", default=[], metavar="RAW",
                   help="a run of configurations the fitted runs do not hold (scale.sh raw.tsv; give --check again for "
                        "more): the fit never sees them, and states its error on each")
    lo = sub.add_parser("loo", parents=[model])
    lo.add_argument("raw", nargs="+")
    p = sub.add_parser("predict", parents=[model])
    p.add_argument("raw", nargs="+")
    p.add_argument("--ranks", type=int, required=True)
    p.add_argument("--nodes", type=int, required=True)
    at = p.add_mutually_exclusive_group()
    at.add_argument("--delay-us", type=int, default=None,
                    help="the link delay scale.sh's cluster.sh sets (default 0); the round trip is the data's at "
                         "that delay, interpolated between measured delays")
    at.add_argument("--rtt-us", type=float, default=None, help="the node-to-node round trip, as scale.sh records it, of links without cluster.sh's delay "
                         "(its emulator's own cost, the emu_* terms, comes only with --delay-us)")
    p.add_argument("--holdout", default="", help="points left out of the fit (as for fit); default none")
    args = ap.parse_args()
    if args.cmd == "summary":
        summary(args.raw)
    elif args.cmd == "loo":
        figures, rtt, _ = read_raw(args.raw)
        sys.exit(loo_command(medians(figures), rtt, init_model=args.init_model, rank_term=args.rank_term))
    elif args.cmd == "predict":
        figures, rtt, _ = read_raw(args.raw)
        sys.exit(predict_command(medians(figures), rtt, args.ranks, args.nodes, delay_us=args.delay_us,
                                 rtt_us=args.rtt_us, holdout=args.holdout, init_model=args.init_model,
                                 rank_term=args.rank_term))
    else:
        figures, rtt, load = read_raw(args.raw)
        checked = set()
        if args.check:
            more, more_rtt, _ = read_raw(args.check)
            both = sorted(set(more) & set(figures))
            if both:
                raise SystemExit("--check: these configurations are in the fitted runs too: "
                                 + ", ".join(f"{r}/{n}/{d} us" for r, n, d in both))
            # A point needs its measured round trip to be fitted or checked (scale.sh writes NA when
            # it could not measure one): say which are left out rather than count them as checked.
            no_rtt = sorted(k for k in more if not more_rtt.get(k))
            if no_rtt:
                print("--check: no round trip measured, left out: " + ", ".join(f"{r}/{n}/{d} us" for r, n, d in no_rtt),
                      file=sys.stderr)
            figures.update(more)
            rtt.update(more_rtt)
            checked = set(more) - set(no_rtt)
            if not checked:
                raise SystemExit(f"--check {' '.join(args.check)}: no point with a measured round trip to check")
        holdout = args.holdout if args.holdout is not None else ("" if checked else "nodes>=16,ranks>=1024")
        sys.exit(fit_command(medians(figures), rtt, holdout, init_model=args.init_model, runs=figures,
                             checked=frozenset(checked), rank_term=args.rank_term))


if __name__ == "__main__":
    main()
