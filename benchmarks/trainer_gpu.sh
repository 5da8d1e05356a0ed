#!/usr/bin/env bash
# The trainer on the GPU: `train-mlp --device cuda` against `--device cpu` on the same
# machine and against the same training step in PyTorch (benchmarks/train_mlp_torch.py, plain and
# under DDP with a world of one), at the launch-bound default width and at widths where a GPU
# matters; plus train-mlp's checkpoint stall per step, read from its metrics. One process, no Slurm.
#
#   benchmarks/trainer_gpu.sh --build DIR --out DIR [--steps N] [--hidden "64 60000 1000000"]
#       [--warmup N] [--cpu-steps N] [--cpu-max-hidden H] [--ckpt-every K] [--devices cuda|cpu]
#
#  --steps N         timed steps of every GPU run, train-mlp's and PyTorch's (default 300), after
#                    --warmup untimed ones (default 20); train-mlp runs warmup + N steps in all
#  --hidden LIST     train-mlp --hidden widths (default "64 60000 1000000": the default width, launch
#                    bound; 2 M and 34 M parameters, where a GPU matters). Only the width has an option:
#                    32 inputs and 64 rows per step are fixed in train-mlp (Shapes in mlp.hpp). Not
#                    powers of two: the cpu engine walks w1 by columns, and at 65536 that stride aliases
#                    in the caches (3x slower than 60000), which would flatter the GPU
#  --cpu-steps N     timed steps of a cpu run wider than 4096 (default 3, after 1 warm-up; the cpu
#                    engine takes ~0.3 s a step at 60000 and ~4.5 s at 1000000 on a 2-core machine);
#                    narrower ones run --steps after --warmup
#  --cpu-max-hidden  wider than this, the cpu run is left out and says so (default 1048576: none)
#  --ckpt-every K    train-mlp checkpoints every K steps (default 50); the stall of each save and
#                    the stall per step (amortised) come from metrics_rank0.jsonl
#  --devices cpu     the test path, for a machine without a GPU: train-mlp --device cpu and PyTorch
#                    on the CPU only, through the same runs and summary (never a measurement)
#
# Without a usable CUDA device: "# no CUDA device: ... not measured" and exit 77. Whether there is
# one is train-mlp's own --check-device (77 only for no device or no driver: a broken CUDA fails);
# a GPU that nvidia-smi lists but train-mlp cannot use fails too, never a skip.
# PyTorch runs under ${PYTHON:-python3} without LD_LIBRARY_PATH (its wheels bring their own CUDA
# libraries; gpu-check's carried libraries are for our programs). Output in --out: summary.txt and
# summary.json (also printed), per run train-mlp-DEVICE-hH/ (metrics, trace, goodput; checkpoints go
# to a temporary folder, deleted) with its log and run.json, and torch.log. Exit 0 when every run
# finished, 1 otherwise.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build="" out="" steps=300 warmup=20 cpu_steps=3 cpu_max_hidden=1048576 ckpt_every=50 devices=cuda
hidden_list="64 60000 1000000"
py=${PYTHON:-python3}
usage() { sed -n '7,8p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
die() { echo "trainer_gpu.sh: $*" >&2; exit 2; }
while (($#)); do
  case $1 in
    --build) build=${2:-}; shift 2 || usage ;;
    --out) out=${2:-}; shift 2 || usage ;;
    --steps) steps=${2:-}; shift 2 || usage ;;
    --warmup) warmup=${2:-}; shift 2 || usage ;;
    --hidden) hidden_list=${2:-}; hidden_list=${hidden_list//,/ }; shift 2 || usage ;;
    --cpu-steps) cpu_steps=${2:-}; shift 2 || usage ;;
    --cpu-max-hidden) cpu_max_hidden=${2:-}; shift 2 || usage ;;
    --ckpt-every) ckpt_every=${2:-}; shift 2 || usage ;;
    --devices) devices=${2:-}; shift 2 || usage ;;
    -h | --help) sed -n '2,/^set -uo/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
[[ -n $build && -n $out ]] || usage
for v in steps warmup cpu_steps cpu_max_hidden ckpt_every; do
  [[ ${!v} =~ ^[0-9]{1,7}$ ]] || die "--${v//_/-} '${!v}' is not a whole number under 10^7"
done
((steps >= 1 && cpu_steps >= 1)) || die "--steps and --cpu-steps must be at least 1"
for h in $hidden_list; do
  [[ $h =~ ^[0-9]{1,7}$ ]] && ((h >= 1 && h <= 1048576)) || die "--hidden: '$h' is not a width in 1..1048576"
done
[[ -n ${hidden_list// /} ]] || die "--hidden: no width"
[[ $devices == cuda || $devices == cpu ]] || die "--devices: cuda (the measurement) or cpu (the test path)"
trainer=$build/slurm_examples/trainer/train-mlp
[[ -x $trainer ]] || { echo "trainer_gpu.sh: no train-mlp in $build (cmake --build $build --target train-mlp)"; exit 1; }

# Is there a GPU? train-mlp's own answer (0 usable, 77 no device or no driver, 1 a broken CUDA),
# held against nvidia-smi so that a GPU present but unusable fails instead of skipping.
if [[ $devices == cuda ]]; then
  probe=$("$trainer" --check-device 2>&1)
  rc=$?
  listed=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
  case $rc in
    0) ;;
    77)
      if ((listed > 0)); then
        echo "FAIL: nvidia-smi lists $listed GPU(s) but train-mlp --check-device says: $probe"
        exit 1
      fi
      echo "# no CUDA device: train-mlp --check-device says '$probe', nvidia-smi lists none; not measured"
      exit 77 ;;
    *)
      echo "FAIL: train-mlp --check-device exited $rc (a broken CUDA, not a missing GPU): $probe"
      exit 1 ;;
  esac
fi

mkdir -p "$out" || die "cannot create $out"
out=$(cd "$out" && pwd)
ckpt_root=$(mktemp -d "${TMPDIR:-/tmp}/trainer-gpu.XXXXXX") || die "no temporary folder"
trap 'rm -rf "$ckpt_root"' EXIT
export NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo}  # one machine, a world of one: stay on loopback
failed=0 torch_skipped=0 t_start=$SECONDS runs=()

# One train-mlp run: warmup + timed steps, its metrics in $out/train-mlp-DEVICE-hH, its checkpoints
# in the temporary folder (deleted after the run: at 1M hidden each save is 400 MB).
run_trainer() {
  local device=$1 hidden=$2 warm=$3 timed=$4
  local name=train-mlp-$device-h$hidden t0=$SECONDS
  rm -rf "${out:?}/$name" "${ckpt_root:?}/$name"  # a metrics file left over would make this run a "rerun"
  "$trainer" --device "$device" --steps $((warm + timed)) --hidden "$hidden" --ckpt-every "$ckpt_every" \
    --ckpt-dir "$ckpt_root/$name" --out "$out/$name" --watchdog 300 >"$out/$name.log" 2>&1
  local rc=$?
  rm -rf "${ckpt_root:?}/$name"
  runs+=("$name")  # the summary reads this run's folders only, not older ones left in --out
  printf '{"device":"%s","hidden":%d,"warmup":%d,"steps":%d,"ckpt_every":%d,"rc":%d,"run_s":%d}\n' \
    "$device" "$hidden" "$warm" "$timed" "$ckpt_every" "$rc" $((SECONDS - t0)) >"$out/$name/run.json"
  if ((rc != 0)); then
    echo "FAIL: train-mlp --device $device --hidden $hidden exited $rc; the end of $out/$name.log:"
    tail -5 "$out/$name.log" | sed 's/^/    /'
    failed=1
  else
    echo "  ran train-mlp --device $device --hidden $hidden: $warm warm-up + $timed steps in $((SECONDS - t0)) s"
  fi
}

echo "# train-mlp on $devices: widths $hidden_list; build $build; results in $out"
for h in $hidden_list; do
  [[ $devices == cuda ]] && run_trainer cuda "$h" "$warmup" "$steps"
  if ((h > cpu_max_hidden)); then
    echo "  train-mlp --device cpu --hidden $h left out (wider than --cpu-max-hidden $cpu_max_hidden)"
  elif ((h > 4096)); then
    run_trainer cpu "$h" 1 "$cpu_steps"
  else
    run_trainer cpu "$h" "$warmup" "$steps"
  fi
done

# PyTorch: one process for every width (imports and CUDA start once); its own libraries only.
hidden_csv=$(tr ' ' ',' <<<"$hidden_list" | sed 's/^,*//; s/,*$//; s/,,*/,/g')
t0=$SECONDS
env -u LD_LIBRARY_PATH PYTHONUNBUFFERED=1 "$py" "$here/train_mlp_torch.py" --device "$devices" --hidden "$hidden_csv" \
  --steps "$steps" --warmup "$warmup" --ddp >"$out/torch.log" 2>&1
rc=$?
if ((rc == 0)); then
  echo "  ran PyTorch ($py) on $devices, plain and DDP(1): $warmup warm-up + $steps steps a width in $((SECONDS - t0)) s"
elif ((rc == 77)) && [[ $devices == cpu ]]; then
  echo "  PyTorch left out: $(grep -m1 '^# no' "$out/torch.log")"
  torch_skipped=1
else
  # On a GPU that train-mlp uses, a PyTorch that sees none (77) is a failure of this run too.
  echo "FAIL: $py train_mlp_torch.py --device $devices exited $rc; the end of $out/torch.log:"
  tail -5 "$out/torch.log" | sed 's/^/    /'
  failed=1
fi

# The summary: step time (median, p90) after warm-up, samples/s at the median, wall time per step
# (everything between two steps' metrics lines: checkpoint stall, waiting for the previous save to
# persist, metrics), the checkpoint stall, and the ratios.
"$py" - "$out" "${runs[@]}" <<'EOF' | tee "$out/summary.txt"
import json, math, os, re, statistics, sys
out = sys.argv[1]
ROWS = 64

def pct(sorted_values, q):
    return sorted_values[max(0, math.ceil(q / 100 * len(sorted_values)) - 1)]

def trainer_result(folder):
    run = json.load(open(os.path.join(folder, "run.json")))
    if run["rc"] != 0:
        return dict(run, error=f"exit {run['rc']}")
    steps = [json.loads(l) for l in open(os.path.join(folder, "metrics_rank0.jsonl")) if '"event":"step"' in l]
    warm = run["warmup"]
    timed = [s for s in steps if s["step"] > warm]
    if not timed:
        return dict(run, error="no timed steps in the metrics")
    st = sorted(s["step_s"] for s in timed)
    med = statistics.median(st)
    base = [s["wall"] for s in steps if s["step"] == warm]  # the last warm-up step ends where timing starts
    walls = base + [s["wall"] for s in timed]
    wall_per_step = (walls[-1] - walls[0]) / (len(walls) - 1) if len(walls) > 1 else float("nan")
    saves = [s["ckpt_stall_s"] for s in timed if run["ckpt_every"] and s["step"] % run["ckpt_every"] == 0]
    persists = [s["ckpt_persist_s"] for s in timed if s.get("ckpt_persist_s") is not None]
    return dict(run, run=f"train-mlp {run['device']}", median_s=med, p90_s=pct(st, 90), samples_per_s=ROWS / med,
                wall_per_step_s=wall_per_step, loss=timed[-1]["loss"], saves=len(saves),
                stall_median_s=statistics.median(saves) if saves else None, stall_max_s=max(saves) if saves else None,
                stall_per_step_s=sum(s["ckpt_stall_s"] for s in timed) / len(timed),
                persist_median_s=statistics.median(persists) if persists else None)

results, describe = [], ""
for name in sys.argv[2:]:
    folder = os.path.join(out, name)
    if os.path.isfile(os.path.join(folder, "run.json")):
        results.append(trainer_result(folder))
        m = re.search(r"device (cuda on GPU .*?), starting", open(folder + ".log", errors="replace").read())
        describe = describe or (m.group(1) if m else "")
torch_head = ""
if os.path.exists(os.path.join(out, "torch.log")):
    for line in open(os.path.join(out, "torch.log"), errors="replace"):
        if line.startswith("RESULT "):
            results.append(json.loads(line[7:]))
        elif line.startswith("# PyTorch"):
            torch_head = line.strip()

ms = lambda s: "      -" if s is None or (isinstance(s, float) and math.isnan(s)) else f"{s * 1e3:9.3f}"
print(f"# train-mlp on {describe or 'the CPU'}: 32 -> hidden -> 1 MLP (ReLU, MSE), {ROWS} rows/step, f32, AdamW "
      "lr 3e-3 wd 0.01; times after warm-up")
if torch_head:
    print(torch_head)
print(f"{'hidden':>8} {'params':>9}  {'run':<20} {'steps':>5} {'median ms':>10} {'p90 ms':>9} {'samples/s':>10} "
      f"{'wall/step ms':>12} {'loss':>9}")
by = {}
for h in sorted({r["hidden"] for r in results}):
    params = (32 * h + 2 * h + 1) / 1e6
    rows = [r for r in results if r["hidden"] == h]
    for r in sorted(rows, key=lambda r: (not r.get("run", "").startswith("train-mlp"), r["device"] != "cuda", r.get("run", ""))):
        label = r.get("run", f"train-mlp {r['device']}")
        by[(h, label)] = r
        if "error" in r:
            print(f"{h:>8} {params:>8.3f}M  {label:<20} FAILED: {r['error']}")
            continue
        print(f"{h:>8} {params:>8.3f}M  {label:<20} {r['steps']:>5} {ms(r['median_s']):>10} {ms(r['p90_s']):>9} "
              f"{r['samples_per_s']:>10.0f} {ms(r.get('wall_per_step_s')):>12} {r['loss']:>9.4g}")
    def ratio(a, b):  # median step time of a over b, and which one is faster by how much
        ra, rb = by.get((h, a)), by.get((h, b))
        if ra and rb and "error" not in ra and "error" not in rb:
            x = ra["median_s"] / rb["median_s"]
            return f"{a} / {b} {x:.3f} ({a if x < 1 else b} {max(x, 1 / x):.2f}x faster)"
    dev = "cuda" if any(r["device"] == "cuda" for r in rows) else "cpu"
    ratios = [ratio("train-mlp cuda", "train-mlp cpu"), ratio(f"train-mlp {dev}", f"torch {dev}"),
              ratio(f"train-mlp {dev}", f"torch {dev} DDP(1)")]
    ratios = [x for x in ratios if x]
    if ratios:
        print(f"{'':>8} step time: " + "; ".join(ratios))
    for r in rows:
        if r.get("run", "").startswith("train-mlp") and "error" not in r:
            stall = (f"{r['saves']} save{'s' * (r['saves'] != 1)} in the timed steps, stall median {ms(r['stall_median_s']).strip()} ms, "
                     f"max {ms(r['stall_max_s']).strip()} ms" if r["saves"] else "no save in the timed steps")
            persist = f", persist median {ms(r['persist_median_s']).strip()} ms" if r["persist_median_s"] is not None else ""
            print(f"{'':>8} checkpoint ({r['run']}, every {r['ckpt_every']}): {stall}; stall per step "
                  f"{r['stall_per_step_s'] * 1e3:.4f} ms = {100 * r['stall_per_step_s'] / r['median_s']:.2f}% of the "
                  f"median step{persist}")
json.dump(results, open(os.path.join(out, "summary.json"), "w"), indent=1)
EOF
rc=${PIPESTATUS[0]}
((rc == 0)) || { echo "FAIL: the summary ($py) exited $rc"; failed=1; }
echo "# trainer_gpu.sh took $((SECONDS - t_start)) s; results in $out"
((failed)) && exit 1
((torch_skipped)) && { echo "# no torch for $py: the PyTorch rows are not measured"; exit 77; }
exit 0
