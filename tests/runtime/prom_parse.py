#!/usr/bin/env python3
"""Parses the trainer's .prom file with the prometheus_client package's own text-format parser
(the one a Prometheus-compatible consumer would use). Usage: prom_parse.py WRITER.
Exit 77 (skipped) when prometheus_client is not installed (Debian: python3-prometheus-client)."""
import os
import subprocess
import sys
import tempfile

try:
    from prometheus_client.parser import text_string_to_metric_families
except ImportError:
    print("SKIPPED: python3 has no prometheus_client (scripts/install-deps.sh installs python3-prometheus-client)")
    sys.exit(77)

writer = sys.argv[1]
with tempfile.TemporaryDirectory() as d:
    path = os.path.join(d, "trainrt.prom")
    subprocess.run([writer, "--write", path], check=True)
    text = open(path, encoding="utf-8").read()
families = {f.name: f for f in text_string_to_metric_families(text)}
expect = {"trainrt_step": 200, "trainrt_samples_per_second": 51234.5, "trainrt_step_seconds_p50": 0.0121,
          "trainrt_step_seconds_p99": 0.0305, "trainrt_allreduce_seconds": 0.0021,
          "trainrt_allreduce_busbw_gbytes_per_second": 3.25, "trainrt_checkpoint_stall_seconds": 0.004,
          "trainrt_checkpoint_persist_seconds": 0.35, "trainrt_goodput_ratio": 0.93, "trainrt_restarts": 1,
          "trainrt_stragglers": 2}
failures = []
for name, value in expect.items():
    f = families.get(name)
    if f is None:
        failures.append(f"{name}: missing (have {sorted(families)})")
        continue
    s = f.samples[0]
    if abs(s.value - value) > 1e-12:
        failures.append(f"{name}: {s.value} != {value}")
    if s.labels != {"job": "12345", "step": "1", "node": 'node"2\\\n', "rank": "0"}:
        failures.append(f"{name}: labels {s.labels}")
if families["trainrt_restarts"].type != "counter":
    failures.append("trainrt_restarts_total is not a counter")
for f in failures:
    print("FAIL:", f)
print(f"{len(expect) - len(failures)} of {len(expect)} metrics parsed as written")
sys.exit(1 if failures else 0)
