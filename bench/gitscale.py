#!/usr/bin/env python3
"""Git delivery at fleet scale: `kalypso sync` against the git floor, as ratios.

Runs ../shared/bench/gitscale.sh (a fleetgen fleet as git repositories: a control plane with
main and dev, one repository per workload, a bare GitOps repository, all file://) and reports,
for each repetition, the sync rows as ratios to the floor measured in the same run:

  - full sync (empty GitOps branch) and its peak RSS;
  - no-change sync (nothing moved);
  - one-ConfigMap sync (one ConfigMap of dev changed);
  - floor: `git add -A && git commit` of the same tree into a fresh repository.

This machine's speed swings from day to day, so only ratios within one run are compared.
Usage: python3 bench/gitscale.py [--fleet m|b|s] [--repeat N] [--work DIR] [--bin PATH]
(default: the M fleet, 1 repetition, work dir under /dev/shm, target/release/kalypso).
"""
import argparse
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED_BENCH = os.environ.get(
    "KALYPSO_SHARED_BENCH", os.path.normpath(os.path.join(ROOT, "..", "shared", "bench")))
FLEETS = {
    "s": ["--workloads", "50", "--cluster-types", "20", "--policies", "10"],
    "b": ["--workloads", "200", "--cluster-types", "100", "--policies", "30"],
    "m": ["--workloads", "500", "--cluster-types", "200", "--policies", "60"],
}
GOALS = {"full": 1.0, "one_configmap": 0.05, "nochange": 0.02}


def once(binary, work, fleet):
    script = os.path.join(SHARED_BENCH, "gitscale.sh")
    p = subprocess.run(["bash", script, binary, work] + FLEETS[fleet], capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"gitscale.sh failed:\n{p.stdout}\n{p.stderr}")
    line = p.stdout.strip().splitlines()[-1]
    values = dict(re.findall(r"(\w+)=([\d.]+)", line))
    return {
        "files": int(values["files"]),
        "full": float(values["full_sync"]),
        "rss_mib": int(values["rss"]) / 1024,
        "nochange": float(values["nochange_sync"]),
        "one_configmap": float(values["one_configmap_sync"]),
        "floor": float(values["floor_git_add_commit"]),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fleet", default="m", choices=sorted(FLEETS))
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--work", default="/dev/shm/kalypso-gitscale")
    ap.add_argument("--bin", default=os.path.join(ROOT, "target", "release", "kalypso"))
    args = ap.parse_args()
    if not os.path.exists(args.bin):
        sys.exit(f"no binary at {args.bin}: cargo build --release first")
    print(f"| run | files | floor (git add -A && commit) | full sync | no-change sync | one-ConfigMap sync | full sync RSS |")
    print("|---|---|---|---|---|---|---|")
    for i in range(args.repeat):
        r = once(args.bin, args.work, args.fleet)
        cell = lambda k: f"{r[k]:.2f} s = {r[k] / r['floor']:.3f}× (goal ≤ {GOALS[k]}×)"
        print(f"| {i + 1} | {r['files']} | {r['floor']:.2f} s | {cell('full')} | {cell('nochange')} | "
              f"{cell('one_configmap')} | {r['rss_mib']:.0f} MiB (goal ≤ 500) |")


if __name__ == "__main__":
    main()
