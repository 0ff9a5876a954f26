#!/usr/bin/env python3
"""Independent oracle for the eval suite's expected values.

Reads snapshot files with Python's own pickle/json/gzip (refusing every global except the
TorchScript writer's restore_type_tag, which it treats as the identity) and prints the facts the
cases in evals/eval.yaml assert: totals by block state, pools, live bytes by user site
(innermost frame under --root), trace counts by action, and oom events. It shares no code with
memsnap, so a value both agree on was computed twice.

    python3 evals/oracle/oracle.py testdata/scenarios/summarize_basic.pickle
    python3 evals/oracle/oracle.py --diff BEFORE AFTER
"""
import argparse
import collections
import gzip
import io
import json
import os
import pickle
import sys


class _Unpickler(pickle.Unpickler):
    def find_class(self, module, name):
        if (module, name) == ("torch.jit._pickle", "restore_type_tag"):
            return lambda v, tag: v
        raise pickle.UnpicklingError(f"refused global {module}.{name}")


def load(path):
    with open(path, "rb") as f:
        data = f.read()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    if data[:1] in (b"{", b"[") or data.lstrip()[:1] in (b"{", b"["):
        snap = json.loads(data)
    else:
        snap = _Unpickler(io.BytesIO(data)).load()
    if isinstance(snap, list):
        snap = {"segments": snap, "device_traces": []}
    return snap


def block_frames(b):
    if "frames" in b:
        return b["frames"]
    hist = b.get("history") or []
    return hist[0].get("frames", []) if hist else []


def site(frames, root):
    for fr in frames:
        fn = fr.get("filename", "")
        if fn.startswith(root + "/"):
            return f"{os.path.basename(fn)}:{fr['line']}"
    if not frames:
        return "<no Python frame>"
    return "<other>"


def facts(path, root):
    s = load(path)
    tot = collections.Counter()
    pools = collections.defaultdict(collections.Counter)
    largest = collections.Counter()
    sites = collections.defaultdict(lambda: [0, 0])
    for seg in s["segments"]:
        key = (seg.get("device", 0), tuple(seg.get("segment_pool_id", (0, 0))), seg.get("stream", 0), seg.get("segment_type"))
        tot["reserved"] += seg["total_size"]
        tot["segments"] += 1
        pools[key]["reserved"] += seg["total_size"]
        pools[key]["segments"] += 1
        if all(b["state"] == "inactive" for b in seg["blocks"]):
            # empty_cache() frees private (CUDA graph) pools only once their graph is deleted
            kind = "releasable" if tuple(seg.get("segment_pool_id", (0, 0))) == (0, 0) else "private_pool_free"
            tot[kind] += seg["total_size"]
            pools[key][kind] += seg["total_size"]
        else:
            free = sum(b["size"] for b in seg["blocks"] if b["state"] == "inactive")
            tot["stranded"] += free
            pools[key]["stranded"] += free
        for b in seg["blocks"]:
            st = b["state"]
            tot["blocks"] += 1
            tot[st] += b["size"]
            pools[key][st] += b["size"]
            if st == "active_allocated":
                tot["requested"] += b["requested_size"]
                k = site(block_frames(b), root)
                sites[k][0] += b["size"]
                sites[k][1] += 1
            if st == "inactive":
                largest[key] = max(largest[key], b["size"])
    actions = collections.Counter()
    ooms = []
    for dev, tr in enumerate(s.get("device_traces") or []):
        for i, e in enumerate(tr):
            actions[e["action"]] += 1
            if e["action"] == "oom":
                ooms.append({"device": dev, "index": i, "size": e["size"], "device_free": e.get("device_free"),
                             "site": site(e.get("frames", []), root)})
    return {"totals": dict(tot), "pools": {str(k): dict(v, largest_inactive=largest[k]) for k, v in pools.items()},
            "sites": dict(sorted(sites.items(), key=lambda kv: -kv[1][0])), "actions": dict(actions), "ooms": ooms,
            "annotations": len(s.get("external_annotations") or [])}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", default="/workspace/proj", help="the user's code: a site is the innermost frame under it")
    ap.add_argument("--diff", action="store_true", help="two files: live bytes and blocks by site, before and after")
    ap.add_argument("files", nargs="+")
    a = ap.parse_args()
    if a.diff:
        b, c = (facts(f, a.root)["sites"] for f in a.files)
        out = {k: {"bytes_before": b.get(k, [0, 0])[0], "bytes_after": c.get(k, [0, 0])[0],
                   "delta_bytes": c.get(k, [0, 0])[0] - b.get(k, [0, 0])[0],
                   "blocks_before": b.get(k, [0, 0])[1], "blocks_after": c.get(k, [0, 0])[1]} for k in sorted(set(b) | set(c))}
        json.dump(out, sys.stdout, indent=1)
    else:
        for f in a.files:
            json.dump({f: facts(f, a.root)}, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
