"""gpu-check: the GPU test programs ctest would run (its JSON on stdin), one line each: name, env and
the command's words, separated by US (0x1f: empty fields survive, unlike with a tab)."""
import json, os, sys
for t in json.load(sys.stdin).get("tests", []):
    cmd = t.get("command") or []
    # Scripts and Python (torch inside the interpreter: its own kernels, not ours) stay out.
    if not cmd or cmd[0].endswith(("bash", "sh")) or os.path.basename(cmd[0]).startswith("python") \
            or t["name"].startswith("python."):
        continue
    env = [v for p in t.get("properties", []) if p.get("name") == "ENVIRONMENT" for v in p.get("value", [])]
    print("\x1f".join([t["name"], " ".join(env)] + cmd))
