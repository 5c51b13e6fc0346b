//! A small control plane in real git repositories, with templates simple enough not to
//! depend on template features, and helpers to run passes against it.
#![allow(dead_code, clippy::unwrap_used)]

use std::path::{Path, PathBuf};

use kalypso_git::sync::{EnvReport, Settings};
use kalypso_git::{DeliverySettings, Mode, RepoUrl, RetryPolicy, Syncer};
use kalypso_testkit::{init_bare, write_files};

pub const ENVIRONMENT_DEV: &str = "apiVersion: scheduler.kalypso.io/v1alpha1
kind: Environment
metadata:
  name: dev
spec:
  controlPlane:
    repo: https://github.com/contoso/control-plane
    branch: dev
    path: .
";

pub const ENVIRONMENT_STAGE: &str = "apiVersion: scheduler.kalypso.io/v1alpha1
kind: Environment
metadata:
  name: stage
spec:
  controlPlane:
    repo: https://github.com/contoso/control-plane
    branch: stage
    path: .
";

pub fn template(name: &str, kind: &str, text: &str) -> String {
    let indented: String = text.lines().map(|l| format!("      {l}\n")).collect();
    format!(
        "apiVersion: scheduler.kalypso.io/v1alpha1
kind: Template
metadata:
  name: {name}
spec:
  type: {kind}
  manifests:
    - |
{indented}"
    )
}

pub fn registration(workload_repo: &str) -> String {
    format!(
        "apiVersion: scheduler.kalypso.io/v1alpha1
kind: WorkloadRegistration
metadata:
  name: app
spec:
  workload:
    repo: {workload_repo}
    branch: main
    path: ./workload/
  workspace: team
"
    )
}

pub const WORKLOAD: &str = "apiVersion: scheduler.kalypso.io/v1alpha1
kind: Workload
metadata:
  name: app
spec:
  deploymentTargets:
    - name: dev-target
      labels:
        purpose: test
      environment: dev
      manifests:
        repo: https://github.com/contoso/app-gitops
        branch: dev
        path: ./dev
    - name: stage-target
      environment: stage
      manifests:
        repo: https://github.com/contoso/app-gitops
        branch: stage
        path: ./stage
";

pub fn cluster_type(name: &str, reconciler: &str) -> String {
    format!(
        "apiVersion: scheduler.kalypso.io/v1alpha1
kind: ClusterType
metadata:
  name: {name}
  labels:
    size: {name}
spec:
  reconciler: {reconciler}
  namespaceService: namespace
  configType: config
"
    )
}

pub const POLICY: &str = "apiVersion: scheduler.kalypso.io/v1alpha1
kind: SchedulingPolicy
metadata:
  name: everything
spec:
  deploymentTargetSelector:
    labelSelector: {}
  clusterTypeSelector:
    labelSelector: {}
";

pub fn gitops_repo(env: &str, url: &str) -> String {
    format!(
        "apiVersion: scheduler.kalypso.io/v1alpha1
kind: GitOpsRepo
metadata:
  name: {env}
spec:
  repo: {url}
  branch: {env}
  path: .
"
    )
}

pub fn base_repo(commit: Option<&str>) -> String {
    let mut text = "# Which main commit this environment runs.
apiVersion: scheduler.kalypso.io/v1alpha1
kind: BaseRepo
metadata:
  name: main
spec:
  repo: https://github.com/contoso/control-plane
  branch: main
  path: .
"
    .to_owned();
    if let Some(c) = commit {
        text.push_str(&format!("  commit: {c}\n"));
    }
    text
}

/// The repositories of one scenario.
pub struct Fixture {
    pub dir: tempfile::TempDir,
    /// The control plane (bare).
    pub control_plane: PathBuf,
    /// The workload repository (bare).
    pub workload: PathBuf,
    /// The GitOps repository (bare).
    pub gitops: PathBuf,
    /// Where mirrors go.
    pub cache: PathBuf,
}

impl Fixture {
    /// Fresh repositories; the control plane names `file://` URLs.
    pub fn new() -> Fixture {
        Fixture::in_dir(tempfile::tempdir().unwrap(), None, None)
    }

    /// The repositories are created under `<dir>/repos`; `gitops_url` and `workload_url`
    /// are what the control plane names (default: `file://` URLs).
    pub fn in_dir(dir: tempfile::TempDir, gitops_url: Option<&str>, workload_url: Option<&str>) -> Fixture {
        let root = dir.path().join("repos");
        let control_plane = root.join("contoso/control-plane.git");
        let workload = root.join("contoso/app.git");
        let gitops = root.join("contoso/gitops.git");
        for repo in [&control_plane, &workload, &gitops] {
            init_bare(repo);
        }
        let gitops_url = gitops_url.map_or_else(|| file_url(&gitops), str::to_owned);
        let workload_url = workload_url.map_or_else(|| file_url(&workload), str::to_owned);
        write_files(
            &workload,
            "main",
            &[
                ("workload/workload.yaml", Some(WORKLOAD)),
                ("README.md", Some("app")),
            ],
            "workload",
        );
        write_files(
            &control_plane,
            "main",
            &[
                (".sourceignore", Some(".environments/\n")),
                (".environments/dev.yaml", Some(ENVIRONMENT_DEV)),
                (".environments/stage.yaml", Some(ENVIRONMENT_STAGE)),
                (
                    "templates/reconciler.yaml",
                    Some(&template(
                        "reconciler",
                        "reconciler",
                        "kind: Reconciler\nversion: v1",
                    )),
                ),
                (
                    "templates/namespace.yaml",
                    Some(&template("namespace", "namespace", "kind: Namespace")),
                ),
                (
                    "templates/config.yaml",
                    Some(&template("config", "config", "kind: ConfigMap")),
                ),
                ("workloads/app.yaml", Some(&registration(&workload_url))),
            ],
            "main",
        );
        for env in ["dev", "stage"] {
            write_files(
                &control_plane,
                env,
                &[
                    (
                        "cluster-types/large.yaml",
                        Some(&cluster_type("large", "reconciler")),
                    ),
                    ("scheduling/policy.yaml", Some(POLICY)),
                    ("gitops-repo.yaml", Some(&gitops_repo(env, &gitops_url))),
                    ("base-repo.yaml", Some(&base_repo(None))),
                ],
                env,
            );
        }
        let cache = dir.path().join("cache");
        Fixture {
            dir,
            control_plane,
            workload,
            gitops,
            cache,
        }
    }

    pub fn settings(&self) -> Settings {
        Settings {
            cache_dir: self.cache.clone(),
            retry: RetryPolicy::immediate(4),
            delivery: DeliverySettings {
                mode: Mode::Auto,
                ..DeliverySettings::default()
            },
            auth: kalypso_git::AuthSettings {
                token_env: Some("KALYPSO_TEST_NO_TOKEN".into()),
                ..Default::default()
            },
            ..Settings::default()
        }
    }
}

pub fn file_url(path: &Path) -> String {
    format!("file://{}", path.display())
}

/// One pass over `control_plane` for `envs`.
pub fn sync(
    syncer: &Syncer,
    control_plane: &str,
    envs: &[&str],
) -> Vec<Result<EnvReport, kalypso_git::sync::Error>> {
    let url = RepoUrl::parse(control_plane).unwrap();
    let mut pass = syncer.pass(&url).unwrap();
    let names: Vec<String> = envs.iter().map(|s| (*s).to_owned()).collect();
    let environments = pass.environments(&names).unwrap();
    environments.iter().map(|e| pass.sync(e)).collect()
}

/// Commits version 2 of the `reconciler` template to the control plane's `main` branch: a
/// change to every environment, one file per assignment. Returns the new commit.
pub fn release_reconciler_v2(fx: &Fixture) -> String {
    write_files(
        &fx.control_plane,
        "main",
        &[(
            "templates/reconciler.yaml",
            Some(&template(
                "reconciler",
                "reconciler",
                "kind: Reconciler\nversion: v2",
            )),
        )],
        "v2",
    )
}

/// Commits a new cluster type `small` to the control plane's `dev` branch: a change that
/// gives dev a new folder.
pub fn add_a_cluster_type(fx: &Fixture) {
    write_files(
        &fx.control_plane,
        "dev",
        &[(
            "cluster-types/small.yaml",
            Some(&cluster_type("small", "reconciler")),
        )],
        "a new cluster type",
    );
}

/// A workload repository whose only file no longer parses, and a new cluster type `small` in
/// `dev`: what failure isolation is tested with.
pub fn break_the_workload_and_add_a_cluster_type(fx: &Fixture) {
    write_files(
        &fx.workload,
        "main",
        &[(
            "workload/workload.yaml",
            Some("kind: Workload\nspec: [unclosed\n"),
        )],
        "break the workload",
    );
    add_a_cluster_type(fx);
}

/// The workload file as [`Fixture::new`] commits it.
pub fn fix_the_workload(fx: &Fixture) {
    write_files(
        &fx.workload,
        "main",
        &[("workload/workload.yaml", Some(WORKLOAD))],
        "fix the workload",
    );
}
