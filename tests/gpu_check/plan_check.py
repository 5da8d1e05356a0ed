#!/usr/bin/env python3
"""Reads the plan's device-tool calls out of docs/gpu-check.md and checks the tool's limits.

Each call is a fenced block whose info string is `json gpu-check-call-N`, holding the arguments
given to the device tool: {"command": ..., "carry": [...], "timeout_s": ...}. Checked: the command
is at most 2,000 characters, carry names at most 8 paths, timeout_s is 1..600, and the command
runs `scripts/gpu-check.sh run` with a --budget at least 30 s inside timeout_s (the script writes
its report before the tool kills it); and the calls together fit one lease: their timeouts plus
OVERHEAD_S (the machine's start, the transfers, the idle waits) within LEASE_S of device time.
Printed, one line per call, tab-separated: N, the command's length, the carry paths
(space-separated), the gpu-check invocation (for a --dry-run).

Usage: plan_check.py DOC    Exit 0: every call within the limits; 1: a call over one (named); 2: no calls.
"""
import json
import re
import sys

BLOCK = re.compile(r"^```json gpu-check-call-(\d+)\s*\n(.*?)^```", re.S | re.M)
INVOCATION = re.compile(r"scripts/gpu-check\.sh run[^;|&]*")
BUDGET = re.compile(r"--budget (\d+)")
LEASE_S = 900     # a session's device time (the device tool's README: 15 minutes)
OVERHEAD_S = 100  # the last lease: 697 s held for 646 s of commands; a cold start, twice that


def main():
    text = open(sys.argv[1], encoding="utf-8").read()
    calls = BLOCK.findall(text)
    if not calls:
        print(f"plan_check: no ```json gpu-check-call-N blocks in {sys.argv[1]}", file=sys.stderr)
        return 2
    bad = 0
    timeouts = 0
    for n, body in calls:
        try:
            call = json.loads(body)
        except ValueError as e:
            print(f"plan_check: call {n}: not JSON ({e})", file=sys.stderr)
            bad += 1
            continue
        command, carry, timeout = call.get("command", ""), call.get("carry", []), call.get("timeout_s")
        problems = []
        if not 0 < len(command) <= 2000:
            problems.append(f"command is {len(command)} characters (1..2000)")
        if not isinstance(carry, list) or len(carry) > 8:
            problems.append(f"carry {carry!r} is not a list of at most 8 paths")
        if not isinstance(timeout, int) or not 1 <= timeout <= 600:
            problems.append(f"timeout_s {timeout!r} is not 1..600")
        inv = INVOCATION.search(command)
        if not inv:
            problems.append("the command does not run scripts/gpu-check.sh run")
        else:
            budget = BUDGET.search(inv.group(0))
            if not budget or isinstance(timeout, int) and int(budget.group(1)) > timeout - 30:
                problems.append(f"--budget {budget.group(1) if budget else '(none)'} is not at least 30 s inside "
                                f"timeout_s {timeout}")
        if isinstance(timeout, int):
            timeouts += timeout
        if problems:
            print(f"plan_check: call {n}: " + "; ".join(problems), file=sys.stderr)
            bad += 1
            continue
        print(f"{n}\t{len(command)}\t{' '.join(carry)}\t{inv.group(0).strip()}")
    if timeouts + OVERHEAD_S > LEASE_S:
        print(f"plan_check: the calls' timeouts ({timeouts} s) plus {OVERHEAD_S} s of start and waits exceed "
              f"the lease's {LEASE_S} s", file=sys.stderr)
        bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
