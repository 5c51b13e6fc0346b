#!/usr/bin/env python3
"""Placement benchmark (docs/placement.md): what kalypso's placement fields cost at fleet scale.

Generates the B fleet (bench/fleet.py's sizes: 200 workloads, 100 cluster types, 30 policies)
with tests/data/fleetgen/fleetgen.py, gives every cluster type a numeric `capacity` label, and
renders environment dev with the release binary (no cache, into an empty folder), median of 3:

  baseline      the policies as generated (no placement fields)
  overhead      every policy with numberOfClusterTypes 1000, three prioritizers (Steady,
                Balance, labelValue capacity) and a spread constraint over region with
                maxSkew 1000: the same assignments as the baseline, so the ratio is the
                cost of placing alone
  cut           numberOfClusterTypes 3, the same prioritizers, spread over region maxSkew 1:
                what a team would write (fewer assignments, so less to render)
  extender      `cut` plus a SchedulerExtender (filter and prioritize) on loopback that
                answers each call after 1 ms (a Python ThreadingHTTPServer)

Usage: python3 bench/placement.py [--work DIR] [--bin target/release/kalypso]
(build first: cargo build --release)

With --core, the pure pipeline alone instead (no extender variant; no files written):
python3 bench/placement.py --core  (runs crates/core/examples/placement_bench.rs, built with
cargo build --release -p kalypso-core --example placement_bench), printing for each variant
the median scheduling time and scheduling + in-memory render time.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FLEETGEN = os.path.join(ROOT, "tests", "data", "fleetgen", "fleetgen.py")
B = ["--workloads", "200", "--cluster-types", "100", "--policies", "30"]

PRIORITIZERS = """  prioritizers:
    - builtIn: Steady
      weight: 3
    - builtIn: Balance
    - labelValue: {key: capacity}
"""


def placement(n, skew, extender):
    text = f"  numberOfClusterTypes: {n}\n" + PRIORITIZERS
    if extender:
        text += "    - extender: {name: capacity}\n      weight: 2\n  extenders: [capacity]\n"
    text += f"  spreadConstraints:\n    - topologyKey: region\n      maxSkew: {skew}\n"
    return text


def prepare(base, variant, n=None, skew=None, extender_url=None):
    out = os.path.join(os.path.dirname(base), variant)
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(base, out)
    dev = os.path.join(out, "dev")
    for dirpath, _, files in os.walk(os.path.join(dev, "cluster-types")):
        for f in files:
            path = os.path.join(dirpath, f)
            text = open(path).read()
            if "kind: ClusterType" in text:
                name = re.search(r"name: (ct-\d+)", text).group(1)
                capacity = (int(name[3:]) * 37) % 100
                text = text.replace("  labels:\n", f"  labels:\n    capacity: \"{capacity}\"\n", 1)
                open(path, "w").write(text)
    if n is not None:
        for f in os.listdir(os.path.join(dev, "scheduling")):
            path = os.path.join(dev, "scheduling", f)
            text = open(path).read().rstrip("\n") + "\n" + placement(n, skew, extender_url is not None)
            open(path, "w").write(text)
    if extender_url:
        with open(os.path.join(dev, "scheduling", "extender.yaml"), "w") as f:
            f.write("apiVersion: scheduler.kalypso.io/v1alpha1\nkind: SchedulerExtender\nmetadata:\n"
                    f"  name: capacity\nspec:\n  url: {extender_url}\n  filter: true\n  prioritize: true\n"
                    "  timeout: 5s\n")
    return out


class Extender(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    calls = 0

    def do_POST(self):
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        time.sleep(0.001)
        Extender.calls += 1
        kept, scores = [], {}
        for c in request["candidates"]:
            kept.append(c["name"])
            scores[c["name"]] = int(c["labels"].get("capacity", "0"))
        body = json.dumps({"clusterTypes": kept, "scores": scores}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def render(binary, cp, out):
    shutil.rmtree(out, ignore_errors=True)
    started = time.monotonic()
    p = subprocess.run([binary, "-q", "render", cp, "--env", "dev", "--out", out, "--no-cache"],
                       capture_output=True, text=True)
    wall = time.monotonic() - started
    if p.returncode != 0:
        sys.exit(f"render of {cp} failed:\n{p.stderr}")
    files = sum(len(f) for _, _, f in os.walk(out))
    return wall, files


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", default="/tmp/kalypso-placement-bench")
    ap.add_argument("--bin", default=os.path.join(ROOT, "target", "release", "kalypso"))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--core", action="store_true")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    base = os.path.join(a.work, "generated")
    if not os.path.isdir(base):
        subprocess.run([sys.executable, FLEETGEN, base] + B, check=True)
    if a.core:
        example = os.path.join(ROOT, "target", "release", "examples", "placement_bench")
        print("| variant | assignments | schedule (median of 5) | schedule + render |")
        print("|---|---|---|---|")
        totals = {}
        for name, args in [("baseline", ()), ("overhead", (1000, 1000)), ("cut", (3, 1))]:
            cp = prepare(base, name, *args)
            out = subprocess.run([example, cp, "dev"], capture_output=True, text=True, check=True).stdout
            m = re.match(r"assignments (\d+) schedule ([\d.]+) s schedule\+render ([\d.]+) s", out)
            totals[name] = float(m.group(3))
            print(f"| {name} | {m.group(1)} | {float(m.group(2)):.3f} s | {totals[name]:.3f} s |")
        print(f"\noverhead / baseline: {totals['overhead'] / totals['baseline']:.2f}x")
        print(f"cut / baseline: {totals['cut'] / totals['baseline']:.2f}x")
        return
    server = ThreadingHTTPServer(("127.0.0.1", 0), Extender)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/placement"
    variants = [
        ("baseline", prepare(base, "baseline")),
        ("overhead", prepare(base, "overhead", 1000, 1000)),
        ("cut", prepare(base, "cut", 3, 1)),
        ("extender", prepare(base, "extender", 3, 1, url)),
    ]
    results = {}
    print("| variant | wall (median) | files | extender calls per render |")
    print("|---|---|---|---|")
    for name, cp in variants:
        times = []
        Extender.calls = 0
        for _ in range(a.runs):
            t, files = render(a.bin, cp, os.path.join(a.work, "out-" + name))
            times.append(t)
        times.sort()
        results[name] = times[len(times) // 2]
        calls = Extender.calls // a.runs if name == "extender" else "-"
        print(f"| {name} | {results[name]:.3f} s | {files} | {calls} |")
    print(f"\noverhead / baseline: {results['overhead'] / results['baseline']:.2f}x")
    print(f"cut / baseline: {results['cut'] / results['baseline']:.2f}x")
    print(f"extender: {results['extender']:.3f} s")
    server.shutdown()


if __name__ == "__main__":
    main()
