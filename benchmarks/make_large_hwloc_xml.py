#!/usr/bin/env python3
"""Writes a large, valid hwloc 2.x XML for the plugin-overhead benchmark: a real node's
file with its PCI subtrees that hold no GPU and no NIC (storage, USB, BMC video, ...) cloned into new
PCI domains until the text reaches the target size. GPUs, NICs and rails stay those of the real
node, so the same steps run on it; only the parse (and a live walk's) work grows, as on big 8-GPU
nodes with hundreds of PCI devices.

Usage: make_large_hwloc_xml.py SOURCE.xml OUTPUT.xml [TARGET_BYTES=1048576]
The source is read from where it lies (../shared/topologies); nothing of it is copied into the repo.
"""
import copy
import re
import sys
import xml.etree.ElementTree as ET

src, out = sys.argv[1], sys.argv[2]
target = int(sys.argv[3]) if len(sys.argv) > 3 else 1 << 20

tree = ET.parse(src)
root = tree.getroot()
if root.tag != "topology" or not root.get("version", "").startswith("2"):
    sys.exit(f"{src}: not an hwloc 2.x XML")

parent_of = {c: p for p in root.iter() for c in p}
gp_max = max(int(o.get("gp_index", "0")) for o in root.iter("object"))


def is_gpu_or_nic(obj):
    for o in obj.iter("object"):
        t = o.get("pci_type", "")
        if "[10de:" in t or t[:2] == "02":  # NVIDIA devices; network/InfiniBand controllers
            return True
    return False


# Host bridges in hwloc 2: Bridge objects of depth 0 (no bus id of their own).
hosts = [o for o in root.iter("object") if o.get("type") == "Bridge" and o.get("bridge_type", "").startswith("0-")]
plain = [h for h in hosts if not is_gpu_or_nic(h)]
if not plain:
    sys.exit(f"{src}: no PCI subtree without GPUs and NICs to clone")


def body_size():
    return len(ET.tostring(root, encoding="unicode"))


domain = 1
size = body_size()
while size < target:
    if domain > 0xFFFF:
        sys.exit("ran out of PCI domains")
    for h in plain:
        clone = copy.deepcopy(h)
        for o in clone.iter("object"):
            gp_max += 1
            o.set("gp_index", str(gp_max))
            for attr in ("pci_busid", "bridge_pci"):
                if o.get(attr):
                    o.set(attr, re.sub(r"^[0-9a-f]{4}:", f"{domain:04x}:", o.get(attr)))
            if o.get("type") == "OSDev" and o.get("name"):
                o.set("name", f"{o.get('name')}d{domain}")
        parent = parent_of[h]
        parent.insert(list(parent).index(h) + 1, clone)
        size += len(ET.tostring(clone, encoding="unicode"))
    domain += 1

text = ET.tostring(root, encoding="unicode")
with open(out, "w", encoding="utf-8") as f:
    f.write('<?xml version="1.0" encoding="UTF-8"?>\n<!DOCTYPE topology SYSTEM "hwloc2.dtd">\n')
    f.write(text)
    f.write("\n")
print(f"{out}: {len(text)} bytes, {len(plain)} PCI subtree(s) cloned into {domain - 1} extra domain(s)")
