#!/usr/bin/env python3
"""Progressive rollout at fleet scale: a wave step as users meet it, against the git floor.

Builds the fleet as bench/gitscale.py does (../shared/bench/fleetgen.py: a control plane with main
and dev, one repository per workload, a bare GitOps repository, all file://), gives `dev` a
RolloutPolicy (wave `canary`: the cluster types labelled `ring: canary`, every 40th one; wave
`rest`: the others; no soak), starts a real `kalypso hub` (SQLite in the work dir, reading the
control plane, refreshing every second) and registers `--clusters` clusters spread evenly over
the cluster types by posting their Flux events over HTTP from this process (as Flux's
notification-controller does). Then it times, as a user meets it (whole processes):

  - the first rollout: `kalypso sync --hub` of the empty GitOps branch (wave 1: the canaries'
    folders; the other cluster types have no earlier content, so they get nothing yet), every
    cluster reports that commit, `sync --hub` (wave 2: the rest, most of the tree), every cluster
    reports that commit, `sync --hub` (complete; not timed);
  - one ConfigMap of dev changed (the region-0 ConfigMap: the 20 cluster types of region 0, five
    of them canaries), then:
      - first wave: `sync --hub` delivers the change to the canaries only;
      - waiting step: `sync --hub` while the canaries have not reported the new commit (the hub's
        answer, nothing written);
      - next wave step: the canaries report the new commit compliant, the hub has read the
        commit, and `sync --hub` delivers the rest (the hub's answer plus a commit that changes
        the rest wave's cluster types);
  - a wave step of one cluster type (gitscale's change, as a wave): the rest reports the change,
    the rollout completes (not timed), then the ConfigMap of the rest wave's first cluster type
    changes (the one whose folders are nearest in size to the first cluster type's, whose
    ConfigMap gitscale changes): the first wave (the canaries, whose folders do not change:
    the commit carries the rollout state), the canaries report it, and the next wave step
    delivers the one cluster type (about 500 files): the like-for-like
    comparison with today's one-ConfigMap sync;
  - the rollout view `GET /api/v1/environments/dev/rollout` over HTTP with every cluster
    registered (first load, then the median of five more), after the next wave step (the rest
    waiting), and again with one cluster in fifty of the rest failed;
  - today's one-ConfigMap sync on the same tree, for comparison: the policy removed (delivered
    whole, not timed), then region-0's ConfigMap changed again, then the first cluster type's
    (gitscale's change), each delivered whole by one `sync`;
  - floor: `git add -A && git commit` of the final tree into a fresh repository.

Each sync is timed with the hub idle: before it, the benchmark waits until the hub uses less
than 0.1 s of CPU in a second (done reading the last commit and the control plane). Users run
the hub on another machine than sync; here the two share two cores, and without the wait the
syncs that followed the previous sync at once (the no-policy ones: no wait for the hub between
them) could run beside the hub reading the previous commit. The hub's CPU during each sync (its refresh every second,
and reading the new commit as the sync ends) is printed beside it, and each sync's CPU as user
and system time (the system time swings with the machine's memory: see docs/performance.md).

Each sync row is reported as wall time and as a ratio to the floor of the same run; the issue's
goal for a wave step is ≤ 0.05× (what a one-ConfigMap sync may cost). This machine's speed swings
from day to day, so only ratios within one run are compared.

Usage: python3 bench/rolloutscale.py [--fleet m|b|s] [--clusters N] [--work DIR] [--bin PATH]
(default: the M fleet, 100,000 clusters, work dir under /dev/shm, target/release/kalypso).
"""
import argparse
import datetime
import http.client
import json
import multiprocessing
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import time

# The fleets, the shared bench folder and the port helper are gitscale.py's (this folder).
from gitscale import FLEETS, ROOT, SHARED_BENCH, free_port

WAVE_STEP_GOAL = 0.05
VIEW_GOAL_MS = 20
CANARY_EVERY = 40
POLICY = """apiVersion: scheduler.kalypso.io/v1alpha1
kind: RolloutPolicy
metadata:
  name: rings
spec:
  waves:
  - name: canary
    clusterTypeSelector:
      labelSelector:
        matchLabels: {ring: canary}
  - name: rest
    clusterTypeSelector:
      labelSelector: {}
  maxFailures: 0
  progressDeadline: 1h
  onFailure: Halt
"""


def run(cmd, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if p.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{p.stdout}\n{p.stderr}")
    return p.stdout


def edit(path, old, new):
    """Replaces the first `old` in file `path` by `new`."""
    with open(path) as f:
        text = f.read()
    with open(path, "w") as f:
        f.write(text.replace(old, new, 1))


def git(repo, *args):
    return run(["git", "-C", repo, "-c", "user.name=t", "-c", "user.email=t@t", *args]).strip()


def build(work, fleet_args):
    """The fleet as file:// repositories (gitscale.sh's layout), with the RolloutPolicy on dev."""
    shutil.rmtree(work, ignore_errors=True)
    repos = os.path.join(work, "repos")
    os.makedirs(repos)
    fleet = os.path.join(work, "fleet")
    run([sys.executable, os.path.join(SHARED_BENCH, "fleetgen.py"), fleet, *fleet_args, "--envs", "dev"])
    for f in sorted(os.listdir(os.path.join(fleet, "main", "workloads"))):
        name = f[:-len(".yaml")]
        edit(os.path.join(fleet, "main", "workloads", f), f"repo: https://example.com/org/{name}-src",
             f"repo: file://{repos}/{name}-src")
        src = os.path.join(repos, f"{name}-src")
        shutil.copytree(os.path.join(fleet, "workloads", name), os.path.join(src, "workload"))
        run(["git", "init", "-q", "-b", "main", src])
        git(src, "add", "-A")
        git(src, "commit", "-qm", "init")
    gitops = os.path.join(repos, "gitops.git")
    edit(os.path.join(fleet, "dev", "gitops-repo.yaml"), "repo: https://example.com/org/platform-gitops",
         f"repo: file://{gitops}")
    envs = os.path.join(fleet, "main", ".environments")
    cp = os.path.join(repos, "control-plane")
    for f in os.listdir(envs):
        edit(os.path.join(envs, f), "repo: https://example.com/org/control-plane", f"repo: file://{cp}")
    run(["git", "init", "-q", "--bare", "-b", "dev", gitops])
    seed = os.path.join(work, "seed")
    run(["git", "init", "-q", "-b", "dev", seed])
    open(os.path.join(seed, "README.md"), "w").write("# platform gitops\n")
    git(seed, "add", "-A")
    git(seed, "commit", "-qm", "init")
    git(seed, "push", "-q", gitops, "dev")
    # The RolloutPolicy and the canaries' label.
    cluster_types = []
    for dirpath, _, files in os.walk(os.path.join(fleet, "dev", "cluster-types")):
        for f in files:
            m = re.fullmatch(r"ct-(\d+)\.yaml", f)
            if not m:
                continue
            cluster_types.append(f[:-len(".yaml")])
            if int(m.group(1)) % CANARY_EVERY == 0:
                edit(os.path.join(dirpath, f), "  labels:\n", '  labels:\n    ring: "canary"\n')
    open(os.path.join(fleet, "dev", "rollout-policy.yaml"), "w").write(POLICY)
    run(["git", "init", "-q", "-b", "main", cp])
    shutil.copytree(os.path.join(fleet, "main"), cp, dirs_exist_ok=True)
    git(cp, "add", "-A")
    git(cp, "commit", "-qm", "main")
    git(cp, "checkout", "-q", "--orphan", "dev")
    git(cp, "rm", "-rqf", ".")
    shutil.copytree(os.path.join(fleet, "dev"), cp, dirs_exist_ok=True)
    git(cp, "add", "-A")
    git(cp, "commit", "-qm", "dev")
    git(cp, "checkout", "-q", "main")
    return cp, gitops, sorted(cluster_types)


def now_text():
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def event(cluster, cluster_type, commit, failed):
    severity, reason = ("error", "HealthCheckFailed") if failed else ("info", "ReconciliationSucceeded")
    message = "Deployment/agent dry-run failed: field is immutable" if failed else f"Applied revision dev@sha1:{commit}"
    return json.dumps({
        "involvedObject": {"kind": "Kustomization", "namespace": "flux-system", "name": "platform",
                           "uid": "5c2d4d4a-7c0e-4e3b-9a37-0d7f0b1f8a11",
                           "apiVersion": "kustomize.toolkit.fluxcd.io/v1"},
        "severity": severity, "timestamp": now_text(), "message": message, "reason": reason,
        "metadata": {"revision": f"dev@sha1:{commit}", "cluster": cluster, "clusterType": cluster_type,
                     "environment": "dev"},
        "reportingController": "kustomize-controller",
    }).encode()


def post_chunk(job):
    """Posts one chunk of (cluster, cluster type, commit, failed) events on one keep-alive
    connection; returns the number of errors."""
    port, events = job
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    errors = 0
    for cluster, cluster_type, commit, failed in events:
        conn.request("POST", "/api/v1/events/flux", body=event(cluster, cluster_type, commit, failed),
                     headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        body = r.read()
        if r.status != 200:
            errors += 1
            if errors < 3:
                print(f"event of {cluster}: {r.status} {body[:200]!r}", file=sys.stderr)
    conn.close()
    return errors


class Hub:
    def __init__(self, binary, work, cp):
        self.port = free_port()
        self.log = open(os.path.join(work, "hub.log"), "w")
        self.proc = subprocess.Popen(
            [binary, "hub", "--listen", f"127.0.0.1:{self.port}", "--database",
             f"sqlite://{work}/hub.db", "--control-plane", f"file://{cp}", "--refresh", "1s",
             "--cluster-rate", "0", "--cache-dir", os.path.join(work, "hub-cache"), "--log-format", "text"],
            stdout=self.log, stderr=self.log)
        self.url = f"http://127.0.0.1:{self.port}"
        self.pool = multiprocessing.Pool(4)
        deadline = time.monotonic() + 120
        while True:
            try:
                self.get("/readyz")
                break
            except OSError:
                if time.monotonic() > deadline:
                    sys.exit("the hub did not start")
                time.sleep(0.1)

    def get(self, path):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        conn.request("GET", path)
        r = conn.getresponse()
        body = r.read()
        conn.close()
        if r.status != 200:
            raise OSError(f"GET {path}: {r.status} {body[:300]!r}")
        return body

    def post(self, events):
        """Posts the events from 4 processes; returns events per second."""
        chunks = [(self.port, events[i::16]) for i in range(16)]
        t = time.monotonic()
        errors = sum(self.pool.map(post_chunk, chunks))
        if errors:
            sys.exit(f"{errors} events were refused (see above)")
        return len(events) / (time.monotonic() - t)

    def wait_head(self, commit, timeout=600):
        """Waits until the hub has stored GitOps commit `commit` as dev's head."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            latest = json.loads(self.get("/api/v1/environments/dev")).get("latest") or {}
            if latest.get("commit") == commit:
                return
            time.sleep(0.05)
        sys.exit(f"the hub did not read GitOps commit {commit}")

    def wait_compliant(self, commit, cluster_types, timeout=600):
        """Waits until the wave gate of GitOps commit `commit` counts every registered cluster of
        `cluster_types` compliant."""
        path = f"/api/v1/environments/dev/waves?commit={commit}&clusterTypes={','.join(cluster_types)}"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            gate = json.loads(self.get(path))
            if all(t["registered"] > 0 and t["compliant"] == t["registered"] for t in gate["clusterTypes"]):
                return
            time.sleep(0.05)
        sys.exit(f"the hub did not count the clusters compliant with {commit}")

    def wait_rollout(self, commit, timeout=600):
        """Waits until the hub's rollout view is read at GitOps commit `commit`."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            view = json.loads(self.get("/api/v1/environments/dev/rollout"))
            if view.get("gitopsCommit") == commit and view.get("rollout") and not view.get("labelsUnavailable"):
                return view
            time.sleep(0.05)
        sys.exit(f"the hub's rollout view did not reach GitOps commit {commit}")

    def timed(self, path, repeat=5):
        """The first load, then the median of `repeat` more (ms), over a fresh connection each."""
        times = []
        for _ in range(repeat + 1):
            t = time.monotonic()
            self.get(path)
            times.append((time.monotonic() - t) * 1000)
        return times[0], statistics.median(times[1:])

    def cpu(self):
        """CPU seconds (user + system) the hub has used so far."""
        fields = open(f"/proc/{self.proc.pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def settle(self, window=1.0, idle=0.1, timeout=60):
        """Waits until the hub uses less than `idle` CPU seconds in `window` seconds: done with
        the last commit and the control plane (a hub runs on another machine than sync; on
        this one its work would slow the next timed sync down)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            before = self.cpu()
            time.sleep(window)
            if self.cpu() - before < idle:
                return
        print("the hub did not settle; timing anyway", file=sys.stderr, flush=True)

    def close(self):
        self.pool.terminate()
        self.proc.terminate()
        self.proc.wait(timeout=30)
        self.log.close()


def children_cpu():
    """CPU seconds (user, system) of the children waited for so far."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime, r.ru_stime


def config_map_of(cp, cluster_type):
    """The path of `cluster_type`'s own ConfigMap on the control plane's dev branch."""
    files = git(cp, "ls-tree", "-r", "--name-only", "dev").splitlines()
    return next(f for f in files if f.endswith(f"/{cluster_type}/{cluster_type}-config.yaml"))


def load_average():
    return open("/proc/loadavg").read().split()[0]


def time_view(hub, commit, clusters, canaries):
    """The rollout view at full registration, the rest waiting on `commit`; then with one
    cluster in fifty of the rest failed."""
    view = hub.wait_rollout(commit)
    assert view["rollout"]["delivered"] == 2, view["rollout"]
    view_waiting = hub.timed("/api/v1/environments/dev/rollout")
    # One in fifty of the rest failed.
    rest = [c for c in clusters if c[1] not in canaries]
    hub.post([(name, ct, commit, True) for name, ct in rest[::50]])
    view_failed = hub.timed("/api/v1/environments/dev/rollout")
    failed_view = json.loads(hub.get("/api/v1/environments/dev/rollout"))
    failed_count = failed_view["rollout"]["waves"][1]["clusters"]["failed"]
    view_load = load_average()
    return view_waiting, view_failed, failed_count, view_load


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fleet", default="m", choices=sorted(FLEETS))
    ap.add_argument("--clusters", type=int, default=100_000)
    ap.add_argument("--work", default="/dev/shm/kalypso-rolloutscale")
    ap.add_argument("--bin", default=os.path.join(ROOT, "target", "release", "kalypso"))
    ap.add_argument("--no-view", action="store_true",
                    help="do not time the rollout view (for a binary from before it)")
    ap.add_argument("--keep", action="store_true", help="keep the work dir (default: deleted at the end)")
    args = ap.parse_args()
    binary = os.path.abspath(args.bin)
    if not os.path.exists(binary):
        sys.exit(f"no binary at {binary}: cargo build --release first")
    work = os.path.abspath(args.work)
    cp, gitops, cluster_types = build(work, FLEETS[args.fleet])
    canaries = [ct for ct in cluster_types if int(ct[3:]) % CANARY_EVERY == 0]
    clusters = [(f"cluster-{i:06d}", cluster_types[i % len(cluster_types)]) for i in range(args.clusters)]
    env = dict(os.environ, KALYPSO_CACHE_DIR=os.path.join(work, "cache"))
    hub = Hub(binary, work, cp)
    loads = []
    cpus = {}
    splits = {}
    hub_cpus = {}

    def head():
        return git(gitops, "rev-parse", "dev")

    def sync(label):
        # Timed with the hub idle, as a user meets sync with the hub on another machine.
        hub.settle()
        os.sync()
        loads.append(load_average())
        user, system = children_cpu()
        hub_cpu = hub.cpu()
        t = time.monotonic()
        p = subprocess.run([binary, "sync", f"file://{cp}", "--env", "dev", "--hub", hub.url],
                           capture_output=True, text=True, env=env)
        took = time.monotonic() - t
        user_after, system_after = children_cpu()
        cpus[label] = (user_after - user) + (system_after - system)
        splits[label] = (user_after - user, system_after - system)
        hub_cpus[label] = hub.cpu() - hub_cpu
        if p.returncode != 0:
            sys.exit(f"sync ({label}) failed:\n{p.stdout}\n{p.stderr}")
        summary = [l for l in (p.stdout + p.stderr).splitlines() if "wave" in l or "rollout" in l]
        print(f"{label}: {took:.2f} s, CPU {cpus[label]:.2f} s (user {splits[label][0]:.2f} s, system "
              f"{splits[label][1]:.2f} s; the hub beside it: {hub_cpus[label]:.2f} s); "
              f"{' / '.join(summary[-2:])}", file=sys.stderr, flush=True)
        return took

    def change_dev(path, message, key):
        git(cp, "checkout", "-q", "dev")
        edit(os.path.join(cp, path), "\ndata:\n", f"\ndata:\n  {key}: changed\n")
        git(cp, "commit", "-qam", message)
        git(cp, "checkout", "-q", "main")

    def changed_files():
        return len(git(gitops, "diff", "--name-only", "dev~1", "dev").splitlines())

    def report(members, commit, failed=lambda name: False):
        events = [(name, ct, commit, failed(name)) for name, ct in members]
        return hub.post(events)

    try:
        print(f"fleet {args.fleet}: {len(cluster_types)} cluster types ({len(canaries)} canaries), "
              f"{args.clusters} clusters; load average {load_average()}", file=sys.stderr, flush=True)
        # The first rollout, driven to its end.
        full = sync("first rollout, wave 1 (the canaries)")
        full_cpu = cpus["first rollout, wave 1 (the canaries)"]
        w1 = head()
        hub.wait_head(w1)
        rate = report(clusters, w1)
        print(f"registration: {args.clusters} clusters, {rate:.0f} events/s", file=sys.stderr, flush=True)
        bulk = sync("first rollout, wave 2 (the rest: most of the tree)")
        w2 = head()
        hub.wait_head(w2)
        report(clusters, w2)
        sync("first rollout, complete")
        hub.wait_head(head())
        files = int(run(["git", "-C", gitops, "ls-tree", "-r", "--name-only", "dev"]).count("\n"))

        # One ConfigMap changed: region-0's, read by region 0's cluster types.
        git(cp, "checkout", "-q", "dev")
        path = os.path.join(cp, "cluster-types", "region-0", "region-0-config.yaml")
        edit(path, "\ndata:\n", "\ndata:\n  ROLLOUT_TEST_KEY: changed\n")
        git(cp, "commit", "-qam", "change region-0")
        git(cp, "checkout", "-q", "main")
        first_wave = sync("change, wave 1 (canary)")
        first_files = changed_files()
        w4 = head()
        hub.wait_head(w4)
        waiting = sync("change, waiting (canaries not reported)")
        assert head() == w4, "a step delivered a wave before its clusters reported"
        report([c for c in clusters if c[1] in canaries], w4)
        hub.wait_compliant(w4, canaries)
        next_wave = sync("change, wave 2 (rest)")
        next_files = changed_files()
        w5 = head()
        assert w5 != w4, "the next wave step delivered nothing"

        hub.wait_head(w5)

        # A wave step that changes one cluster type (gitscale's change, as a wave): every
        # cluster reports the change, the rollout completes; then the ConfigMap of a cluster
        # type of the rest wave changes: the first wave (the canaries, whose content does not
        # change) is delivered, the canaries report it, and the next wave step delivers the
        # one cluster type.
        report(clusters, w5)
        hub.wait_compliant(w5, cluster_types)
        sync("change, complete")
        hub.wait_head(head())
        # The rest wave's cluster type whose folders are the nearest in size to the first
        # cluster type's, whose ConfigMap gitscale changes.
        sizes = {}
        for path in git(gitops, "ls-tree", "-r", "--name-only", "dev").splitlines():
            sizes[path.split("/", 1)[0]] = sizes.get(path.split("/", 1)[0], 0) + 1
        one = min((ct for ct in cluster_types if ct not in canaries),
                  key=lambda ct: (abs(sizes.get(ct, 0) - sizes.get(cluster_types[0], 0)), ct))
        change_dev(config_map_of(cp, one), f"one cluster type of the rest wave ({one})", "WAVE_TEST_KEY")
        one_first = sync(f"one cluster type ({one}): wave 1 (canary, nothing of theirs changes)")
        one_first_files = changed_files()
        w7 = head()
        hub.wait_head(w7)
        report([c for c in clusters if c[1] in canaries], w7)
        hub.wait_compliant(w7, canaries)
        one_next = sync(f"one cluster type ({one}): wave 2 (rest), the next wave step")
        one_next_files = changed_files()
        w5 = head()
        assert w5 != w7, "the one-cluster-type wave step delivered nothing"
        hub.wait_head(w5)

        if args.no_view:
            view_waiting = view_failed = (float("nan"), float("nan"))
            failed_count = 0
            view_load = load_average()
        else:
            view_waiting, view_failed, failed_count, view_load = time_view(hub, w5, clusters, canaries)

        # Today's one-ConfigMap sync on the same tree, for comparison: the policy removed (that
        # commit delivers the environment whole), then the same kind of change (region-0's
        # ConfigMap again) and gitscale's (the first cluster type's ConfigMap), each delivered
        # whole by one sync.
        git(cp, "checkout", "-q", "dev")
        git(cp, "rm", "-q", "rollout-policy.yaml")
        git(cp, "commit", "-qm", "no rollout policy")
        git(cp, "checkout", "-q", "main")
        sync("policy removed (delivered whole)")
        change_dev(os.path.join("cluster-types", "region-0", "region-0-config.yaml"), "region-0 again",
                   "WHOLE_TEST_KEY")
        whole_region = sync("no policy: region-0 ConfigMap changed")
        whole_region_files = changed_files()
        change_dev(config_map_of(cp, cluster_types[0]), "one cluster type", "SCALE_TEST_KEY")
        whole_one = sync("no policy: one cluster type's ConfigMap changed (gitscale's change)")
        whole_one_files = changed_files()

        # Floor: git itself committing the same tree.
        floor_dir = os.path.join(work, "floor")
        os.makedirs(floor_dir)
        subprocess.run(f"git -C {gitops} archive dev | tar -x -C {floor_dir}", shell=True, check=True)
        run(["git", "init", "-q", "-b", "dev", floor_dir])
        os.sync()
        cpu = sum(children_cpu())
        t = time.monotonic()
        git(floor_dir, "add", "-A")
        git(floor_dir, "commit", "-qm", "floor")
        floor = time.monotonic() - t
        floor_cpu = sum(children_cpu()) - cpu
    finally:
        hub.close()
    ratio = lambda s: f"{s:.2f} s = {s / floor:.3f}×"
    print(f"CPU (user + system) of each step, and as a ratio to the floor's CPU ({floor_cpu:.2f} s):")
    for label, c in cpus.items():
        print(f"  {label}: {c:.2f} s = {c / floor_cpu:.3f}× (user {splits[label][0]:.2f} s, system "
              f"{splits[label][1]:.2f} s; the hub beside it: {hub_cpus[label]:.2f} s)")
    print()
    print("| files | floor (git add -A && commit) | first rollout: wave 1 (empty branch) | first rollout: wave 2 "
          "| change: first wave (canary) | waiting step | next wave step (rest) "
          "| one cluster type: first wave (canary) | one cluster type: next wave step (rest) "
          "| no policy: region-0 change | no policy: one cluster type's change | load average at the syncs |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    print(f"| {files} | {floor:.2f} s | {ratio(full)} | {ratio(bulk)} | {ratio(first_wave)} ({first_files} files) "
          f"| {ratio(waiting)} | {ratio(next_wave)} ({next_files} files; goal ≤ {WAVE_STEP_GOAL}×) "
          f"| {ratio(one_first)} ({one_first_files} files) "
          f"| {ratio(one_next)} ({one_next_files} files; goal ≤ {WAVE_STEP_GOAL}×) "
          f"| {ratio(whole_region)} ({whole_region_files} files) | {ratio(whole_one)} ({whole_one_files} files) "
          f"| {' / '.join(loads)} |")
    print()
    print(f"| rollout view, {args.clusters} clusters over {len(cluster_types)} cluster types | first load | median of five more |")
    print("|---|---|---|")
    print(f"| rest waiting | {view_waiting[0]:.1f} ms | {view_waiting[1]:.1f} ms |")
    print(f"| rest waiting, {failed_count} failed | {view_failed[0]:.1f} ms | {view_failed[1]:.1f} ms |")
    print(f"(goal for the wave gate: ≤ {VIEW_GOAL_MS} ms; load average {view_load})")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
