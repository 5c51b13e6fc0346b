#!/usr/bin/env python3
"""What an all-or-nothing update of an existing output tree costs, done two ways.

kalypso updates an existing GitOps tree through a journal: the changed files are staged beside
OUT, the journal is written, then OUT is changed by deletions and one rename per file. It is
all or nothing for kalypso (a killed render's update is finished by the next kalypso command
that touches OUT), but a reader looking at OUT during the last step, or after a kill, can see
some files new and some old. The alternative, atomic for readers too, is to build a whole new
version of the tree (hard links of the unchanged files, the changed ones written) and switch to
it with one rename: OUT as a symbolic link to versioned folders, or OUT's folder exchanged with
the new one (`renameat2(RENAME_EXCHANGE)`). Both cost the same links; kalypso has the second as
the fallback it takes when a name to delete is not UTF-8, so this benchmark measures it with
the same binary by putting such a folder at OUT's top before each run.

On the M fleet (500 workloads, 200 cluster types: 93,000 assignments, 279,000 files), in a git
work tree with everything committed (as a GitOps clone is), interleaved, `--runs` times each:

  journal   one cluster type's ConfigMap changed, kalypso render (the update goes through the journal)
  swap      the same, plus a retired cluster type's folder named in Latin-1 at OUT's top (the
            whole tree is staged as hard links and exchanged with OUT)
  nothing   kalypso render with no input change (the floor both pay)

and after each, `git status --porcelain` in OUT (a swap gives every file a new change time, so
git re-reads them all; the journal leaves unchanged files alone). Prints a Markdown table of
the medians: wall time, user+sys CPU time.

Usage: python3 bench/atomicity.py [--kalypso PATH] [--work DIR] [--out-root DIR] [--runs N]
Needs: git, GNU time (/usr/bin/time), the shared bench folder (fleetgen.py) as bench/fleet.py.
"""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED_BENCH = os.environ.get(
    "KALYPSO_SHARED_BENCH", os.path.normpath(os.path.join(ROOT, "..", "shared", "bench")))
M_FLEET = ["--workloads", "500", "--cluster-types", "200", "--policies", "60"]


def timed(cmd, env=None, cwd=None):
    """Runs a command under GNU time; returns (wall seconds, user+sys seconds, stdout)."""
    p = subprocess.run(["/usr/bin/time", "-f", "%e %U %S"] + cmd, capture_output=True, text=True,
                       env=env, cwd=cwd)
    if p.returncode != 0:
        sys.exit(f"command failed: {' '.join(cmd)}\n{p.stdout}\n{p.stderr}")
    wall, user, system = (float(x) for x in p.stderr.strip().splitlines()[-1].split())
    return wall, user + system, p.stdout


def git(out, *args):
    subprocess.run(["git", "-C", out, *args], check=True, capture_output=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kalypso", default=os.path.join(ROOT, "target", "release", "kalypso"))
    ap.add_argument("--work", default=os.path.join(ROOT, "target", "atomicity-bench"))
    ap.add_argument("--out-root", help="where the output tree goes (default: /dev/shm when writable)")
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    if not os.path.isfile(os.path.join(SHARED_BENCH, "fleetgen.py")):
        sys.exit(f"the benchmark needs the shared bench folder (fleetgen.py), not found at {SHARED_BENCH}")
    os.makedirs(a.work, exist_ok=True)
    src = os.path.join(a.work, "fleet-m")
    shutil.rmtree(src, ignore_errors=True)
    subprocess.run([sys.executable, os.path.join(SHARED_BENCH, "fleetgen.py"), src] + M_FLEET,
                   check=True, capture_output=True)
    out_root = a.out_root or ("/dev/shm/kalypso-atomicity-bench" if os.access("/dev/shm", os.W_OK) else a.work)
    os.makedirs(out_root, exist_ok=True)
    out = os.path.join(out_root, "out")
    shutil.rmtree(out, ignore_errors=True)
    cache = os.path.join(a.work, "cache")
    shutil.rmtree(cache, ignore_errors=True)
    env = dict(os.environ, KALYPSO_CACHE_DIR=cache)
    render = [a.kalypso, "render", src, "--env", "dev", "--out", out]
    timed(render, env=env)
    # A GitOps clone: everything committed, the index fresh.
    git(out, "init", "-q", "-b", "main")
    # No automatic `git gc` in the background: a swap links `.git` too, and a gc deleting loose
    # objects meanwhile makes it fail (as it would for a user whose clone packs itself).
    git(out, "config", "gc.auto", "0")
    git(out, "add", "-A")
    git(out, "-c", "user.name=bench", "-c", "user.email=bench@example.com", "commit", "-q", "-m", "tree")
    git(out, "status", "--porcelain")

    config = None
    for dirpath, _, filenames in os.walk(os.path.join(src, "dev", "cluster-types")):
        for n in filenames:
            if n == "ct-0007-config.yaml":
                config = os.path.join(dirpath, n)
    value = [900]

    def change():
        value[0] += 1
        with open(config) as f:
            text = f.read()
        with open(config, "w") as f:
            f.write(re.sub(r"MAX_REPLICAS: \"\d+\"", f'MAX_REPLICAS: "{value[0]}"', text))

    def stray():
        # A retired cluster type's folder (it holds a README.md), whose name is not UTF-8.
        folder = os.path.join(out.encode(), b"retired-\xe9")
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, b"README.md"), "w") as f:
            f.write("a cluster type that no longer exists")

    results = {"journal": [], "swap": [], "nothing": []}
    for _ in range(a.runs):
        for what in ("journal", "swap", "nothing"):
            if what != "nothing":
                change()
            if what == "swap":
                stray()
            wall, cpu, stdout = timed(render, env=env)
            m = re.search(r"\((\d+) added, (\d+) changed, (\d+) deleted", stdout)
            written = sum(int(x) for x in m.groups()) if m else None
            status_wall, status_cpu, _ = timed(["git", "-C", out, "status", "--porcelain"])
            results[what].append((wall, cpu, status_wall, status_cpu, written))
            # The next run starts from a committed tree with a fresh index.
            git(out, "add", "-A")
            subprocess.run(["git", "-C", out, "-c", "user.name=bench", "-c", "user.email=bench@example.com",
                            "commit", "-q", "-m", what], capture_output=True)
            git(out, "status", "--porcelain")
    files = sum(len(f) for d, _, f in os.walk(out) if "/.git" not in d and not d.endswith("/.git"))
    print(f"M fleet, {files} files in the tree; medians of {a.runs} interleaved runs, output in {out_root}\n")
    print("| update | render wall (s) | render user+sys (s) | git status wall (s) | git status user+sys (s) | files written |")
    print("|---|---|---|---|---|---|")
    for what, runs in results.items():
        med = [statistics.median(r[i] for r in runs) for i in range(4)]
        print(f"| {what} | {med[0]:.2f} | {med[1]:.2f} | {med[2]:.2f} | {med[3]:.2f} | {runs[0][4]} |")
    if out_root.startswith("/dev/shm"):
        shutil.rmtree(out_root, ignore_errors=True)


if __name__ == "__main__":
    main()
