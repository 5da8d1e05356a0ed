"""gpu-check: Nsight Compute's CSV (--csv --print-units base, one row per metric) as one row per
kernel launch: DRAM throughput as % of peak, DRAM bytes, time."""
import csv, sys
rows = {}
with open(sys.argv[1], errors="replace") as f:
    lines = [l for l in f if l.startswith('"')]
for r in csv.DictReader(lines):
    key = (int(r.get("ID", 0) or 0), r.get("Kernel Name", "?"))
    try:
        rows.setdefault(key, {})[r["Metric Name"]] = float(str(r["Metric Value"]).replace(",", ""))
    except (KeyError, ValueError):
        pass
if not rows:
    sys.exit("no kernel rows in ncu's CSV")
print(f"{'launch':>6}  {'DRAM % of peak':>14}  {'DRAM MB':>9}  {'time us':>9}  kernel")
for (i, name), m in sorted(rows.items()):
    print(f"{i:>6}  {m.get('dram__throughput.avg.pct_of_peak_sustained_elapsed', float('nan')):>14.1f}  "
          f"{m.get('dram__bytes.sum', float('nan')) / 1e6:>9.1f}  {m.get('gpu__time_duration.sum', float('nan')) / 1e3:>9.1f}  {name[:110]}")
