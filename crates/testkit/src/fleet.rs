//! A fleet simulator for tests and demos of the Deployment Observability Hub and of
//! progressive rollouts: clusters, each of a cluster type, that read an environment's GitOps
//! branch (a local bare repository) and post to the hub the Flux events their
//! kustomize-controller would send for the commits they apply (`ReconciliationSucceeded`, or
//! `ReconciliationFailed` with a message), so that a rollout is tested end to end on loopback.
//!
//! Time is the test's: a cluster applies a commit when the test says so ([`Fleet::apply`]),
//! which is how delays are simulated; failure rules pick the clusters that fail by cluster
//! type, by cluster, or by content (a text in their cluster type's folder at the commit).

use std::path::{Path, PathBuf};
use std::process::Command;

/// One simulated cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cluster {
    /// Its name.
    pub name: String,
    /// Its cluster type (the folder of the GitOps tree it applies).
    pub cluster_type: String,
}

/// Which clusters fail to apply a commit, and with which message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rule {
    /// Every cluster of a cluster type.
    ClusterType(String, String),
    /// One cluster.
    Cluster(String, String),
    /// The clusters whose cluster type's folder holds this text at the commit.
    Content(String, String),
}

/// A fleet of clusters that report to a hub.
#[derive(Clone, Debug)]
pub struct Fleet {
    hub: String,
    gitops: PathBuf,
    branch: String,
    environment: String,
    clusters: Vec<Cluster>,
    rules: Vec<Rule>,
    /// The bearer token its questions to the hub carry, when the hub needs one to read.
    token: Option<String>,
}

impl Fleet {
    /// Clusters of `environment` reading `branch` of the bare repository `gitops`, reporting
    /// to the hub at `hub` (`http://127.0.0.1:PORT`, no webhook secret).
    pub fn new(hub: &str, gitops: &Path, branch: &str, environment: &str) -> Fleet {
        Fleet {
            hub: hub.trim_end_matches('/').to_owned(),
            gitops: gitops.to_owned(),
            branch: branch.to_owned(),
            environment: environment.to_owned(),
            clusters: Vec::new(),
            rules: Vec::new(),
            token: None,
        }
    }

    /// The same fleet, asking the hub its questions with bearer token `token` (a hub with
    /// `--api-token-file` or a read token needs one to answer).
    pub fn with_token(mut self, token: &str) -> Fleet {
        self.token = Some(token.to_owned());
        self
    }

    /// Adds `count` clusters of `cluster_type`, named `<cluster_type>-<n>`.
    pub fn with_clusters(mut self, cluster_type: &str, count: usize) -> Fleet {
        for n in 1..=count {
            self.clusters.push(Cluster {
                name: format!("{cluster_type}-{n}"),
                cluster_type: cluster_type.to_owned(),
            });
        }
        self
    }

    /// Adds a failure rule.
    pub fn failing(mut self, rule: Rule) -> Fleet {
        self.rules.push(rule);
        self
    }

    /// Removes every failure rule (the clusters are fixed).
    pub fn healed(mut self) -> Fleet {
        self.rules.clear();
        self
    }

    /// The clusters.
    pub fn clusters(&self) -> &[Cluster] {
        &self.clusters
    }

    /// The branch's head commit.
    pub fn head(&self) -> String {
        git(&self.gitops, &["rev-parse", &self.branch])
    }

    /// Whether the cluster type's folder at `commit` holds `text`.
    fn holds(&self, commit: &str, cluster_type: &str, text: &str) -> bool {
        Command::new("git")
            .arg("-C")
            .arg(&self.gitops)
            .args([
                "grep",
                "-q",
                "-F",
                text,
                commit,
                "--",
                &format!("{cluster_type}/"),
            ])
            .status()
            .is_ok_and(|s| s.success())
    }

    /// The failure message for `cluster` applying `commit`, if a rule makes it fail.
    pub fn failure(&self, cluster: &Cluster, commit: &str) -> Option<String> {
        self.rules.iter().find_map(|rule| match rule {
            Rule::ClusterType(ct, message) if *ct == cluster.cluster_type => Some(message.clone()),
            Rule::Cluster(name, message) if *name == cluster.name => Some(message.clone()),
            Rule::Content(text, message) if self.holds(commit, &cluster.cluster_type, text) => {
                Some(message.clone())
            }
            _ => None,
        })
    }

    /// Waits until the hub knows `commit` of the branch (its history is read on a timer, and on
    /// demand when asked about a commit it does not know): reports of a commit it does not
    /// know yet do not count. Up to two minutes: a hub on a loaded machine (a CI runner
    /// building beside the tests) may take longer than a second per refresh.
    pub fn wait_known(&self, commit: &str) {
        let url = format!(
            "{}/api/v1/environments/{}/gate?commit={commit}",
            self.hub, self.environment
        );
        for _ in 0..1200 {
            let mut request = ureq::get(&url);
            if let Some(token) = &self.token {
                request = request.header("authorization", &format!("Bearer {token}"));
            }
            if let Ok(mut r) = request.call()
                && let Ok(body) = r.body_mut().read_to_string()
                && body.contains(&format!("\"gitopsCommit\":\"{commit}\""))
            {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        panic!("the hub at {} never learnt commit {commit}", self.hub);
    }

    /// The clusters for which `select` holds apply `commit` and report it; returns how many
    /// failed. Panics when the hub refuses a report.
    pub fn apply(&self, commit: &str, select: impl Fn(&Cluster) -> bool) -> usize {
        self.wait_known(commit);
        let mut failed = 0;
        for cluster in self.clusters.iter().filter(|c| select(c)) {
            let failure = self.failure(cluster, commit);
            failed += usize::from(failure.is_some());
            self.post(cluster, commit, failure.as_deref());
        }
        failed
    }

    /// Every cluster applies the branch's head; returns the commit.
    pub fn apply_head(&self) -> String {
        let head = self.head();
        self.apply(&head, |_| true);
        head
    }

    /// Posts the Flux event of `cluster` applying `commit` (failed with `failure`).
    fn post(&self, cluster: &Cluster, commit: &str, failure: Option<&str>) {
        let (severity, reason, message) = match failure {
            Some(message) => ("error", "ReconciliationFailed", message.to_owned()),
            None => (
                "info",
                "ReconciliationSucceeded",
                "Reconciliation finished in 1s".to_owned(),
            ),
        };
        let body = serde_json::json!({
            "involvedObject": {"kind": "Kustomization", "namespace": "flux-system", "name": "platform",
                               "apiVersion": "kustomize.toolkit.fluxcd.io/v1"},
            "severity": severity,
            "timestamp": timestamp(),
            "message": message,
            "reason": reason,
            "metadata": {"revision": format!("{}@sha1:{commit}", self.branch), "cluster": cluster.name,
                         "clusterType": cluster.cluster_type, "environment": self.environment},
            "reportingController": "kustomize-controller",
            "reportingInstance": "kustomize-controller-1",
        });
        let url = format!("{}/api/v1/events/flux", self.hub);
        let response = ureq::post(&url)
            .header("content-type", "application/json")
            .send(body.to_string().as_bytes());
        match response {
            Ok(r) if r.status().is_success() => {}
            Ok(r) => panic!("the hub refused a report of {}: {}", cluster.name, r.status()),
            Err(e) => panic!("cannot post a report of {} to {url}: {e}", cluster.name),
        }
    }
}

/// Now, as RFC 3339 (UTC, seconds).
fn timestamp() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default();
    let days = secs / 86_400;
    let (h, m, s) = (secs / 3600 % 24, secs / 60 % 60, secs % 60);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{d:02}T{h:02}:{m:02}:{s:02}Z")
}

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}
