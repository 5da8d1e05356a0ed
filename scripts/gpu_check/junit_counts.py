"""gpu-check: the counts of a ctest JUnit file, one line: run failed skipped passed names."""
import sys, xml.etree.ElementTree as ET
try:
    cases = ET.parse(sys.argv[1]).getroot().iter("testcase")
except Exception as e:
    print(f"0 0 0 0 no-junit:{e}"); sys.exit()
run = fail = skip = 0; names = []
for c in cases:
    run += 1
    if c.get("status") == "fail" or c.find("failure") is not None: fail += 1; names.append(c.get("name") + ":failed")
    elif c.get("status") in ("notrun", "disabled") or c.find("skipped") is not None: skip += 1; names.append(c.get("name") + ":skipped")
print(run, fail, skip, run - fail - skip, ",".join(names) or "-")
