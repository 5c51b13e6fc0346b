#!/usr/bin/env python3
"""The CPU time of a full render, binary against binary (issue 31 item 4's measurement).

Generates a fleetgen fleet (the repository's copy in tests/data/fleetgen; the B fleet by default) and renders
it with each of the given kalypso binaries in turn, RUNS times, each into a fresh output folder
under /dev/shm (`render --no-cache -q`), and prints, for each binary, the median and range of
the user and system CPU time (getrusage of the process) and of the wall time, and the user
time as a share of the first binary's. The trees of the first run of each binary are compared
byte for byte first: a faster binary that writes something else measures nothing.

Single runs on a shared 2-vCPU machine vary by ±15%, and a machine's speed differs from day to
day, so only medians of many alternating runs in the same minutes are compared; a binary built
from an older commit (the issue's own starting point, say) gives the scale.

Usage: python3 bench/rendercpu.py [--fleet b|m|s] [--runs N] NAME=BINARY [NAME=BINARY ...]
"""
import argparse
import filecmp
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from fleets import FLEETGEN, FLEETS


def same_tree(a, b):
    """Whether folders `a` and `b` hold the same files with the same bytes."""
    cmp = filecmp.dircmp(a, b)
    if cmp.left_only or cmp.right_only or cmp.funny_files:
        return False
    _, mismatch, errors = filecmp.cmpfiles(a, b, cmp.common_files, shallow=False)
    if mismatch or errors:
        return False
    return all(same_tree(os.path.join(a, d), os.path.join(b, d)) for d in cmp.common_dirs)


def render(binary, fleet, out):
    """Renders `fleet` into the new folder `out`: (user, system, wall) seconds."""
    shutil.rmtree(out, ignore_errors=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    subprocess.run([binary, "render", fleet, "--env", "dev", "--out", out, "--no-cache", "-q"],
                   check=True)
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime, wall


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fleet", default="b", choices=sorted(FLEETS))
    ap.add_argument("--runs", type=int, default=21, help="renders per binary (default 21)")
    ap.add_argument("binaries", nargs="+", metavar="NAME=BINARY")
    args = ap.parse_args()
    binaries = []
    for arg in args.binaries:
        name, sep, path = arg.partition("=")
        if not sep or not os.access(path, os.X_OK):
            sys.exit(f"error: {arg!r} is not NAME=BINARY with an executable BINARY")
        binaries.append((name, os.path.abspath(path)))
    root = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    work = tempfile.mkdtemp(prefix="kalypso-rendercpu-", dir=root)
    try:
        fleet = os.path.join(work, "fleet")
        subprocess.run([sys.executable, FLEETGEN, fleet]
                       + FLEETS[args.fleet], check=True, stdout=subprocess.DEVNULL)
        first = os.path.join(work, "first")
        for i, (name, binary) in enumerate(binaries):
            out = os.path.join(work, "out")
            render(binary, fleet, out)
            if i == 0:
                os.rename(out, first)
            elif not same_tree(first, out):
                sys.exit(f"error: {name} renders another tree than {binaries[0][0]}")
        results = {name: [] for name, _ in binaries}
        for _ in range(args.runs):
            for name, binary in binaries:
                results[name].append(render(binary, fleet, os.path.join(work, "out")))
        load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
        print(f"{args.fleet.upper()} fleet, {args.runs} renders of each binary in turn, load after: {load}")
        print("| binary | user median (range) | share of the first | system | wall |")
        print("|---|---|---|---|---|")
        base = None
        for name, runs in results.items():
            user = [r[0] for r in runs]
            median = statistics.median(user)
            base = base or median
            print(f"| {name} | {median:.3f} s ({min(user):.3f}–{max(user):.3f}) | {median / base:.1%} "
                  f"| {statistics.median(r[1] for r in runs):.3f} s "
                  f"| {statistics.median(r[2] for r in runs):.3f} s |")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
