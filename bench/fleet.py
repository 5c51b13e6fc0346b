#!/usr/bin/env python3
"""Fleet-scale benchmark: kalypso side by side with the Go model of the original scheduler.

Generates the synthetic fleets of ../shared/bench (fleetgen.py), builds the Go model
(../shared/bench/go-baseline) and kalypso (release), and measures in one run:

  B fleet (200 workloads, 100 cluster types, 30 policies), environment dev:
    - the Go model, full render into an empty folder
    - kalypso, full render into an empty folder (no cache)
  M fleet (500 workloads, 200 cluster types, 60 policies), environment dev:
    - kalypso, full render into an empty folder; peak RSS
    - cp -r of the resulting tree (the file-system bound)
    - kalypso again with no input change (must write nothing)
    - kalypso after changing one cluster type's ConfigMap (rewrites only what changed)
    - kalypso after adding one workload
    - kalypso with 1 thread into another folder; the trees must be identical

Prints a Markdown table and, with --write, stores it in docs/performance.md.
Usage: python3 bench/fleet.py [--work DIR] [--fleets b,m] [--skip-go] [--write]
Needs: cargo; for the Go model, Debian's golang-go, golang-github-masterminds-sprig-dev and
golang-gopkg-yaml.v3-dev (install them with apt-get, or pass --skip-go).
"""
import argparse
import datetime
import filecmp
import hashlib
import os
import platform
import re
import shutil
import subprocess
import sys
import time

from fleets import FLEETS, ROOT, SHARED_BENCH


def run(cmd, env=None, cwd=None):
    """Runs a command under GNU time; returns (seconds, peak RSS in MiB, stdout)."""
    os.sync()
    timed = ["/usr/bin/time", "-f", "%e %M"] + cmd
    started = time.monotonic()
    p = subprocess.run(timed, capture_output=True, text=True, env=env, cwd=cwd)
    wall = time.monotonic() - started
    if p.returncode != 0:
        sys.exit(f"command failed: {' '.join(cmd)}\n{p.stdout}\n{p.stderr}")
    last = p.stderr.strip().splitlines()[-1].split()
    rss_mib = int(last[1]) / 1024
    return wall, rss_mib, p.stdout


def counts(stdout):
    m = re.search(r"\((\d+) added, (\d+) changed, (\d+) deleted, (\d+) unchanged; (\d+) assignment", stdout)
    return tuple(int(x) for x in m.groups()) if m else None


def tree_digest(path):
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(path):
        dirnames.sort()
        for name in sorted(filenames):
            full = os.path.join(dirpath, name)
            h.update(os.path.relpath(full, path).encode())
            with open(full, "rb") as f:
                h.update(f.read())
    return h.hexdigest()


def file_count(path):
    return sum(len(files) for _, _, files in os.walk(path))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", default=os.path.join(ROOT, "target", "fleet-bench"))
    ap.add_argument("--fleets", default="b,m")
    ap.add_argument("--skip-go", action="store_true")
    ap.add_argument("--out-root", help="where output trees go (default: /dev/shm when writable, else --work)")
    ap.add_argument("--write", action="store_true", help="write docs/performance.md")
    a = ap.parse_args()
    fleets = a.fleets.split(",")
    if not os.path.isfile(os.path.join(SHARED_BENCH, "fleetgen.py")):
        sys.exit(f"the benchmark needs the shared bench folder (fleetgen.py, go-baseline/), "
                 f"not found at {SHARED_BENCH}: check out the shared data next to the repository "
                 f"or set KALYPSO_SHARED_BENCH to its bench folder")
    os.makedirs(a.work, exist_ok=True)

    subprocess.run(["cargo", "build", "--release", "--quiet"], cwd=ROOT, check=True)
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
    kalypso = os.path.join(target, "release", "kalypso")
    go_model = None
    if not a.skip_go and "b" in fleets:
        if shutil.which("go") is None:
            sys.exit("go not found: apt-get install golang-go golang-github-masterminds-sprig-dev "
                     "golang-gopkg-yaml.v3-dev, or pass --skip-go")
        build = os.path.join(a.work, "go-baseline")
        os.makedirs(build, exist_ok=True)
        shutil.copy(os.path.join(SHARED_BENCH, "go-baseline", "main.go"), build)
        env = dict(os.environ, GO111MODULE="off", GOPATH="/usr/share/gocode")
        subprocess.run(["go", "build", "-o", "go-baseline", "."], cwd=build, env=env, check=True)
        go_model = os.path.join(build, "go-baseline")

    cache = os.path.join(a.work, "cache")
    rows = []

    def fresh(name):
        path = os.path.join(a.work, name)
        shutil.rmtree(path, ignore_errors=True)
        return path

    # Output trees go to tmpfs when there is one: on a disk, writing tens of thousands of files
    # takes whatever the file system's journal and discards make it take, which varies several
    # fold from run to run (see docs/performance.md); tmpfs measures the work itself.
    out_root = a.out_root
    if out_root is None:
        shm = "/dev/shm"
        out_root = os.path.join(shm, "kalypso-fleet-bench") if os.access(shm, os.W_OK) else a.work
    os.makedirs(out_root, exist_ok=True)

    def fresh_out(name):
        path = os.path.join(out_root, name)
        shutil.rmtree(path, ignore_errors=True)
        return path

    for fleet in fleets:
        src = fresh(f"fleet-{fleet}")
        subprocess.run([sys.executable, os.path.join(SHARED_BENCH, "fleetgen.py"), src] + FLEETS[fleet], check=True)
        out = fresh_out(f"out-{fleet}")
        shutil.rmtree(cache, ignore_errors=True)
        if fleet == "b":
            # kalypso first: the kernel frees the Go model's 46,000 deleted files in the
            # background for a while, which would be billed to whatever runs next.
            times = []
            for _ in range(5):
                k_out = fresh_out("out-b")
                t, rss, stdout = run([kalypso, "render", src, "--env", "dev", "--out", k_out, "--no-cache", "-q"])
                times.append(t)
                files = file_count(k_out)
            shutil.rmtree(k_out, ignore_errors=True)
            t = sorted(times)[2]
            go_t = None
            if go_model:
                go_runs = []
                for _ in range(3):
                    go_out = fresh_out("out-b-go")
                    go_runs.append(run([go_model, src, "dev", go_out]))
                    shutil.rmtree(go_out, ignore_errors=True)
                go_t, go_rss, go_stdout = sorted(go_runs)[1]
                rows.append(("B", "Go model, full render (median of 3)", go_t, go_rss, go_stdout.strip()))
            rows.append(("B", "kalypso, full render (median of 5)", t, rss, f"{files} files"))
            if go_t:
                rows.append(("B", "speed-up", None, None, f"{go_t / t:.0f}x faster than the Go model"))
            times = [run([kalypso, "validate", src, "--env", "dev", "-q"])[0] for _ in range(3)]
            rows.append(("B", "kalypso validate (everything but writing, median of 3)", sorted(times)[1], None, ""))
            continue

        env = dict(os.environ, KALYPSO_CACHE_DIR=cache)
        t, rss, stdout = run([kalypso, "render", src, "--env", "dev", "--out", out], env=env)
        rows.append(("M", "kalypso, full render", t, rss, f"{file_count(out)} files"))
        copy = fresh_out(f"copy-{fleet}")
        cp_t, _, _ = run(["cp", "-r", out, copy])
        rows.append(("M", "cp -r of the tree", cp_t, None, f"kalypso / cp = {t / cp_t:.2f}"))
        shutil.rmtree(copy, ignore_errors=True)

        runs = [run([kalypso, "render", src, "--env", "dev", "--out", out], env=env) for _ in range(3)]
        t, rss, stdout = sorted(runs)[1]
        c = counts(stdout)
        rows.append(("M", "no input change (median of 3)", t, rss,
                     f"written: {c[0] + c[1] + c[2]} (re-rendered {c[4]})"))

        cfg = os.path.join(src, "dev", "cluster-types")
        target_cfg = None
        for dirpath, _, filenames in os.walk(cfg):
            for n in filenames:
                if n == "ct-0007-config.yaml":
                    target_cfg = os.path.join(dirpath, n)
        runs = []
        for value in ("997", "998", "999"):
            with open(target_cfg) as f:
                text = f.read()
            with open(target_cfg, "w") as f:
                f.write(re.sub(r"MAX_REPLICAS: \"\d+\"", f'MAX_REPLICAS: "{value}"', text))
            t, rss, stdout = run([kalypso, "render", src, "--env", "dev", "--out", out], env=env)
            runs.append((t, rss, counts(stdout)))
        t, rss, c = sorted(runs)[1]
        rows.append(("M", "one ConfigMap changed (median of 3)", t, rss,
                     f"written: {c[0] + c[1] + c[2]} (re-rendered {c[4]})"))

        runs = []
        for n in (1, 2, 3):
            name = f"app-new-{n}"
            with open(os.path.join(src, "main", "workloads", "app-00000.yaml")) as f:
                text = f.read().replace("app-00000", name)
            with open(os.path.join(src, "main", "workloads", f"{name}.yaml"), "w") as f:
                f.write(text)
            shutil.copytree(os.path.join(src, "workloads", "app-00000"), os.path.join(src, "workloads", name))
            wl = os.path.join(src, "workloads", name, "workload.yaml")
            with open(wl) as f:
                text = f.read().replace("name: app-00000", f"name: {name}")
            with open(wl, "w") as f:
                f.write(text)
            t, rss, stdout = run([kalypso, "render", src, "--env", "dev", "--out", out], env=env)
            runs.append((t, rss, counts(stdout)))
        t, rss, c = sorted(runs)[1]
        rows.append(("M", "one workload added (median of 3)", t, rss,
                     f"written: {c[0] + c[1] + c[2]} (re-rendered {c[4]})"))

        single = fresh_out(f"out-{fleet}-1thread")
        t, rss, _ = run([kalypso, "render", src, "--env", "dev", "--out", single, "--no-cache", "--threads", "1", "-q"])
        same = tree_digest(single) == tree_digest(out)
        rows.append(("M", "full render, 1 thread", t, rss, "identical tree" if same else "TREES DIFFER"))
        shutil.rmtree(single, ignore_errors=True)
        if not same:
            print("error: output depends on the thread count", file=sys.stderr)

    if out_root.startswith("/dev/shm"):
        shutil.rmtree(out_root, ignore_errors=True)
    lines = [
        "| fleet | measurement | seconds | peak RSS (MiB) | notes |",
        "|---|---|---|---|---|",
    ]
    for fleet, what, t, rss, note in rows:
        lines.append(f"| {fleet} | {what} | {'' if t is None else f'{t:.2f}'} | "
                     f"{'' if rss is None else f'{rss:.0f}'} | {note} |")
    table = "\n".join(lines)
    machine = f"{os.cpu_count()} CPUs, {platform.system()} {platform.release()}, {platform.machine()}"
    print(table)
    if a.write:
        doc = os.path.join(ROOT, "docs", "performance.md")
        with open(doc) as f:
            text = f.read()
        start, end = "<!-- results -->", "<!-- /results -->"
        stamp = datetime.date.today().isoformat()
        block = (f"{start}\nMeasured {stamp} on {machine} by `python3 bench/fleet.py --write`, output trees "
                 f"in `{out_root}`:\n\n{table}\n{end}")
        text = re.sub(re.escape(start) + ".*?" + re.escape(end), lambda _: block, text, flags=re.S)
        with open(doc, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
