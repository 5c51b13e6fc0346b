#!/usr/bin/env python3
"""OCI delivery at fleet scale: `kalypso sync` to a registry against the git floor, as ratios.

Builds a fleetgen fleet (tests/data/fleetgen/fleetgen.py, a copy of ../shared/bench's) as git repositories, as
../shared/bench/gitscale.sh does (a control plane with main and dev, one repository per
workload, all file://), with dev's GitOpsRepo at oci://127.0.0.1:PORT/bench/gitops, starts
Debian's registry (docker-registry, its storage in the work folder, its access log counted),
and reports for each repetition:

  - full sync (an empty registry), its peak RSS and what it uploaded;
  - no-change sync, and the registry's writes during it (goal: none);
  - one-ConfigMap sync (the ConfigMap gitscale.sh changes), the artifacts it pushed and the
    registry's writes during it;
  - the floor: `git add -A && git commit` of the same tree (kalypso render of the fleet's
    folder form) into a fresh repository, in the same run;
  - what a cluster pulls: its cluster type's layer (smallest, median, largest) against the
    whole environment's layers.

This machine's speed swings, and other engineers build on the same cores: only ratios within
one run are compared, and the load average is printed with each row.
Usage: python3 bench/ociscale.py [--fleet m|b|s] [--repeat N] [--work DIR] [--bin PATH]
(default: the M fleet, 1 repetition, work dir under /dev/shm, target/release/kalypso).
"""
import argparse
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import time

from fleets import FLEETGEN, FLEETS, ROOT

GOALS = {"full": 1.0, "one_configmap": 0.05}
REGISTRY = os.environ.get("KALYPSO_DOCKER_REGISTRY", "/usr/bin/docker-registry")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def git(repo, *args):
    subprocess.run(["git", "-C", repo, "-c", "user.name=t", "-c", "user.email=t@t", *args], check=True,
                   stdout=subprocess.DEVNULL)


def build_repos(work, fleet_args, registry):
    """The fleet as git repositories (gitscale.sh's layout), dev delivering to the registry."""
    fleet = os.path.join(work, "fleet")
    repos = os.path.join(work, "repos")
    os.makedirs(repos)
    subprocess.run([sys.executable, FLEETGEN, fleet, *fleet_args, "--envs", "dev"],
                   check=True, stdout=subprocess.DEVNULL)
    for name in sorted(os.listdir(os.path.join(fleet, "main", "workloads"))):
        n = name[:-len(".yaml")]
        path = os.path.join(fleet, "main", "workloads", name)
        text = open(path).read().replace(f"repo: https://example.com/org/{n}-src",
                                         f"repo: file://{repos}/{n}-src")
        open(path, "w").write(text)
        r = os.path.join(repos, f"{n}-src")
        shutil.copytree(os.path.join(fleet, "workloads", n), os.path.join(r, "workload"))
        subprocess.run(["git", "init", "-q", "-b", "main", r], check=True)
        git(r, "add", "-A")
        git(r, "commit", "-qm", "init")
    gitops = os.path.join(fleet, "dev", "gitops-repo.yaml")
    text = open(gitops).read()
    text = re.sub(r"repo: \S+", f"repo: oci://{registry}/bench/gitops", text, count=1)
    open(gitops, "w").write(text)
    for env in os.listdir(os.path.join(fleet, "main", ".environments")):
        path = os.path.join(fleet, "main", ".environments", env)
        text = open(path).read().replace("repo: https://example.com/org/control-plane", f"repo: file://{repos}/control-plane")
        open(path, "w").write(text)
    cp = os.path.join(repos, "control-plane")
    shutil.copytree(os.path.join(fleet, "main"), cp)
    subprocess.run(["git", "init", "-q", "-b", "main", cp], check=True)
    git(cp, "add", "-A")
    git(cp, "commit", "-qm", "main")
    git(cp, "checkout", "-q", "--orphan", "dev")
    git(cp, "rm", "-rqf", ".")
    for entry in os.listdir(os.path.join(fleet, "dev")):
        src = os.path.join(fleet, "dev", entry)
        (shutil.copytree if os.path.isdir(src) else shutil.copy)(src, os.path.join(cp, entry))
    git(cp, "add", "-A")
    git(cp, "commit", "-qm", "dev")
    git(cp, "checkout", "-q", "main")
    return fleet, cp


def change_one_configmap(cp):
    """The change gitscale.sh makes: a key added to the first ConfigMap of dev."""
    git(cp, "checkout", "-q", "dev")
    found = subprocess.run(["grep", "-rl", "kind: ConfigMap", cp, "--include=*.yaml"], capture_output=True,
                           text=True).stdout.split()
    cm = sorted(found)[0]
    text = open(cm).read()
    open(cm, "w").write(re.sub(r"^(data:\n(\s+))", r"\1SCALE_TEST_KEY: changed\n\2", text, count=1, flags=re.M))
    git(cp, "commit", "-qam", "change")
    git(cp, "checkout", "-q", "main")


class Registry:
    def __init__(self, work):
        self.port = free_port()
        self.dir = os.path.join(work, "registry")
        os.makedirs(self.dir)
        config = os.path.join(self.dir, "config.yml")
        with open(config, "w") as f:
            f.write(f"version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: {self.dir}/data\n"
                    f"  maintenance:\n    uploadpurging:\n      enabled: false\nhttp:\n  addr: 127.0.0.1:{self.port}\n")
        self.log_path = os.path.join(self.dir, "access.log")
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen([REGISTRY, "serve", config], stdout=self.log, stderr=self.log)
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    sys.exit("the registry did not start")
                time.sleep(0.05)

    def host(self):
        return f"127.0.0.1:{self.port}"

    def requests(self):
        """(method, path) of every request so far, from the access log."""
        time.sleep(0.3)  # the access log line is written after the response
        self.log.flush()
        return re.findall(r'"(GET|HEAD|PUT|POST|PATCH|DELETE) (\S+) HTTP', open(self.log_path).read())

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)
        self.log.close()


def timed(cmd, env):
    t = time.monotonic()
    p = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", "/dev/shm/ociscale.rss", *cmd], capture_output=True,
                       text=True, env=env)
    elapsed = time.monotonic() - t
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{p.stdout}\n{p.stderr}")
    rss = int(open("/dev/shm/ociscale.rss").read().split()[-1]) / 1024
    return elapsed, rss, p.stdout


def once(binary, work, fleet_args):
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    registry = Registry(work)
    try:
        fleet, cp = build_repos(work, fleet_args, registry.host())
        env = dict(os.environ, KALYPSO_CACHE_DIR=os.path.join(work, "cache"), DOCKER_CONFIG=os.path.join(work, "docker"))
        env.pop("GITHUB_AUTH_TOKEN", None)
        sync = [binary, "sync", f"file://{cp}", "--env", "dev", "--json", "-q"]
        load = os.getloadavg()[0]
        full, rss, out = timed(sync, env)
        full_report = json.loads(out)[0]["targets"][0]
        before = len(registry.requests())
        nochange, _, out = timed(sync, env)
        requests = registry.requests()[before:]
        nochange_writes = sum(1 for m, _ in requests if m in ("PUT", "POST", "PATCH"))
        nochange_requests = len(requests)
        change_one_configmap(cp)
        before = len(registry.requests())
        one, _, out = timed(sync, env)
        one_report = json.loads(out)[0]["targets"][0]
        requests = registry.requests()[before:]
        one_writes = sum(1 for m, _ in requests if m in ("PUT", "POST", "PATCH"))
        # The floor: git committing the same tree, rendered from the fleet's folder form.
        tree = os.path.join(work, "floor")
        p = subprocess.run([binary, "render", fleet, "--env", "dev", "--out", tree, "-q", "--no-cache"],
                           capture_output=True, text=True, env=env)
        if p.returncode != 0:
            sys.exit(f"render failed:\n{p.stderr}")
        files = sum(len(fs) for _, _, fs in os.walk(tree))
        subprocess.run(["git", "init", "-q", "-b", "dev", tree], check=True)
        t = time.monotonic()
        git(tree, "add", "-A")
        git(tree, "commit", "-qm", "floor")
        floor = time.monotonic() - t
        layers = sorted(p["layerSize"] for p in full_report["pushed"])
        return {
            "load": load, "files": files, "floor": floor, "full": full, "rss": rss,
            "full_pushed": len(full_report["pushed"]), "full_bytes": full_report["bytesUploaded"],
            "nochange": nochange, "nochange_requests": nochange_requests, "nochange_writes": nochange_writes,
            "one_configmap": one, "one_pushed": len(one_report["pushed"]), "one_unchanged": one_report["unchanged"],
            "one_bytes": one_report["bytesUploaded"], "one_writes": one_writes,
            "layer_min": layers[0], "layer_median": statistics.median(layers), "layer_max": layers[-1],
            "layers_total": sum(layers),
        }
    finally:
        registry.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fleet", default="m", choices=sorted(FLEETS))
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--work", default="/dev/shm/kalypso-ociscale")
    ap.add_argument("--bin", default=os.path.join(ROOT, "target", "release", "kalypso"))
    ap.add_argument("--keep", action="store_true", help="keep the work dir (default: deleted at the end)")
    args = ap.parse_args()
    if not os.path.exists(args.bin):
        sys.exit(f"no binary at {args.bin}: cargo build --release first")
    if not os.path.exists(REGISTRY):
        sys.exit(f"no registry at {REGISTRY}: apt-get install docker-registry")
    print("| run | load | files | floor (git add -A && commit) | full sync (pushed, uploaded) | full sync RSS "
          "| no-change sync (requests, writes) | one-ConfigMap sync (pushed/unchanged, uploaded, writes) "
          "| a cluster's pull (min / median / max layer) of the environment's |")
    print("|---|---|---|---|---|---|---|---|---|")
    for i in range(args.repeat):
        r = once(args.bin, args.work, FLEETS[args.fleet])
        ratio = lambda k: f"{r[k]:.2f} s = {r[k] / r['floor']:.3f}× (goal ≤ {GOALS[k]}×)"
        print(f"| {i + 1} | {r['load']:.1f} | {r['files']} | {r['floor']:.2f} s "
              f"| {ratio('full')} ({r['full_pushed']} artifacts, {r['full_bytes'] / 2**20:.1f} MiB) | {r['rss']:.0f} MiB "
              f"| {r['nochange']:.2f} s = {r['nochange'] / r['floor']:.3f}× ({r['nochange_requests']} requests, "
              f"{r['nochange_writes']} writes) "
              f"| {ratio('one_configmap')} ({r['one_pushed']}/{r['one_unchanged']}, {r['one_bytes'] / 2**10:.0f} KiB, "
              f"{r['one_writes']} writes) "
              f"| {r['layer_min'] / 2**10:.0f} / {r['layer_median'] / 2**10:.0f} / {r['layer_max'] / 2**10:.0f} KiB "
              f"of {r['layers_total'] / 2**20:.1f} MiB |", flush=True)
    if not args.keep:
        shutil.rmtree(args.work, ignore_errors=True)


if __name__ == "__main__":
    main()
