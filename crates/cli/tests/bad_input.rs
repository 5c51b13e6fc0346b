//! Bad input, end to end: for each kind of mistake a control plane can hold, `kalypso render`
//! and `kalypso validate` exit non-zero, name the file (and line), the object and the field,
//! list every problem rather than the first, and leave the output folder exactly as it was.
//!
//! Each test builds a small control plane in a temporary folder, next to an output folder
//! that already holds a GitOps tree which a successful render would change (see
//! [`a_valid_control_plane_changes_the_seeded_tree`]), so "nothing changed" is a real
//! assertion. The CLI runs in a child process (this test binary, re-executed into
//! [`cli_child`]) so that its exit code, standard output and standard error are observed
//! exactly as a user sees them.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use clap::Parser;
use kalypso_cli::{Cli, run};

/// The environment variable that turns this test binary into the `kalypso` command: a JSON
/// array of its arguments.
const CHILD_ARGS: &str = "KALYPSO_BAD_INPUT_CHILD_ARGS";

/// Not a test: the entry point of the child process that runs the CLI (see the module
/// docs). Without [`CHILD_ARGS`] it does nothing.
#[test]
#[ignore = "entry point of the child process that runs the kalypso CLI"]
fn cli_child() {
    let Ok(args) = std::env::var(CHILD_ARGS) else {
        return;
    };
    let args: Vec<String> = serde_json::from_str(&args).unwrap();
    let code = match Cli::try_parse_from(std::iter::once("kalypso".to_owned()).chain(args)) {
        Ok(cli) => run(cli),
        Err(e) => {
            let _ = e.print();
            ExitCode::from(2)
        }
    };
    let status = if code == ExitCode::SUCCESS {
        0
    } else if code == ExitCode::FAILURE {
        1
    } else if code == ExitCode::from(2) {
        2
    } else {
        3
    };
    std::process::exit(status);
}

/// What a run of the CLI printed and returned.
#[derive(Debug)]
struct Outcome {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Outcome {
    /// The lines of standard error that report a problem (`error[...]`, `warning[...]`).
    fn diagnostics(&self) -> Vec<&str> {
        self.stderr
            .lines()
            .filter(|l| l.starts_with("error[") || l.starts_with("warning["))
            .collect()
    }

    /// Asserts that some line of standard error holds every one of `parts`.
    #[track_caller]
    fn reports(&self, parts: &[&str]) -> &Outcome {
        assert!(
            self.stderr.lines().any(|l| parts.iter().all(|p| l.contains(p))),
            "no line of stderr holds all of {parts:?}:\n{}",
            self.stderr
        );
        self
    }
}

/// A control plane in a temporary folder, with an output folder and a cache folder beside it.
struct ControlPlane {
    root: tempfile::TempDir,
}

/// The main branch of the valid control plane every test starts from.
const TEMPLATES: &str = "\
apiVersion: scheduler.kalypso.io/v1alpha1
kind: Template
metadata:
  name: reconciler
spec:
  type: reconciler
  manifests:
    - |
      name: {{ .DeploymentTargetName }}
---
apiVersion: scheduler.kalypso.io/v1alpha1
kind: Template
metadata:
  name: namespace
spec:
  type: namespace
  manifests:
    - |
      namespace: {{ .Namespace }}
---
apiVersion: scheduler.kalypso.io/v1alpha1
kind: Template
metadata:
  name: config
spec:
  type: config
  manifests:
    - |
      {{ toYaml .ConfigData }}
";

const REGISTRATION: &str = "\
apiVersion: scheduler.kalypso.io/v1alpha1
kind: WorkloadRegistration
metadata:
  name: app
spec:
  workload:
    repo: https://example.com/app
    branch: main
    path: workload
  workspace: team
";

const CLUSTER_TYPE: &str = "\
apiVersion: scheduler.kalypso.io/v1alpha1
kind: ClusterType
metadata:
  name: large
  labels:
    size: large
spec:
  reconciler: reconciler
  namespaceService: namespace
  configType: config
";

const POLICY: &str = "\
apiVersion: scheduler.kalypso.io/v1alpha1
kind: SchedulingPolicy
metadata:
  name: everything
spec:
  deploymentTargetSelector:
    labelSelector: {}
  clusterTypeSelector:
    labelSelector: {}
";

const CONFIG: &str = "\
apiVersion: v1
kind: ConfigMap
metadata:
  name: common
  labels:
    platform-config: \"true\"
data:
  REPLICAS: \"3\"
";

const WORKLOAD: &str = "\
apiVersion: scheduler.kalypso.io/v1alpha1
kind: Workload
metadata:
  name: app
spec:
  deploymentTargets:
    - name: web
      environment: dev
      manifests: {repo: r, branch: b, path: web}
";

/// The GitOps tree the output folder holds before each run. A render of the valid control
/// plane changes `large/app-web/reconciler.yaml`, deletes `retired/` and adds the other files
/// of `large/app-web/`.
const SEEDED_TREE: &[(&str, &str)] = &[
    ("manifests-statement.txt", "kept: a root file"),
    (".github/tracking/Promoted_Commit_Id", "0123abc"),
    (
        "large/README.md",
        "This folder contains deployment targets scheduled on the cluster type",
    ),
    ("large/app-web/reconciler.yaml", "name: old\n"),
    ("retired/README.md", "a cluster type that no longer exists"),
    ("retired/gone/reconciler.yaml", "name: gone\n"),
];

/// One entry of a folder snapshot.
#[derive(Debug, PartialEq, Eq)]
enum Entry {
    Dir,
    File(Vec<u8>),
    Symlink(PathBuf),
}

/// Everything under `dir`, including folders and symbolic links (not followed).
fn snapshot(dir: &Path) -> BTreeMap<String, Entry> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for entry in fs::read_dir(&d).unwrap() {
            let entry = entry.unwrap();
            let path = entry.path();
            let rel = path.strip_prefix(dir).unwrap().to_string_lossy().into_owned();
            let kind = entry.file_type().unwrap();
            let value = if kind.is_symlink() {
                Entry::Symlink(fs::read_link(&path).unwrap())
            } else if kind.is_dir() {
                stack.push(path.clone());
                Entry::Dir
            } else {
                Entry::File(fs::read(&path).unwrap())
            };
            out.insert(rel, value);
        }
    }
    out
}

impl ControlPlane {
    /// A valid control plane: one cluster type, one policy, one ConfigMap, one workload with
    /// one `dev` target; and an output folder holding [`SEEDED_TREE`].
    fn new() -> ControlPlane {
        let cp = ControlPlane {
            root: tempfile::tempdir().unwrap(),
        };
        cp.write("main/templates.yaml", TEMPLATES)
            .write("main/registration.yaml", REGISTRATION)
            .write("dev/cluster-types.yaml", CLUSTER_TYPE)
            .write("dev/policy.yaml", POLICY)
            .write("dev/config.yaml", CONFIG)
            .write("workloads/app/workload.yaml", WORKLOAD);
        for (path, content) in SEEDED_TREE {
            let target = cp.out().join(path);
            fs::create_dir_all(target.parent().unwrap()).unwrap();
            fs::write(target, content).unwrap();
        }
        fs::create_dir_all(cp.cache()).unwrap();
        cp
    }

    /// The control-plane folder.
    fn dir(&self) -> PathBuf {
        self.root.path().join("control-plane")
    }

    /// The output folder.
    fn out(&self) -> PathBuf {
        self.root.path().join("out")
    }

    /// Where the render cache goes (inside the snapshot, so a stray cache write is noticed).
    fn cache(&self) -> PathBuf {
        self.root.path().join("cache")
    }

    /// Writes a control-plane file.
    fn write(&self, path: &str, content: &str) -> &ControlPlane {
        self.write_bytes(path, content.as_bytes())
    }

    /// Writes a control-plane file, byte for byte.
    fn write_bytes(&self, path: &str, content: &[u8]) -> &ControlPlane {
        let target = self.dir().join(path);
        fs::create_dir_all(target.parent().unwrap()).unwrap();
        fs::write(target, content).unwrap();
        self
    }

    /// Appends a document to a control-plane file.
    fn append(&self, path: &str, document: &str) -> &ControlPlane {
        let target = self.dir().join(path);
        let mut text = fs::read_to_string(&target).unwrap_or_default();
        if !text.is_empty() {
            text.push_str("---\n");
        }
        text.push_str(document);
        fs::write(target, text).unwrap();
        self
    }

    /// Runs `kalypso` with `args` (paths as given) in a child process.
    fn kalypso(&self, args: &[&str]) -> Outcome {
        let output = Command::new(std::env::current_exe().unwrap())
            .args([
                "--ignored",
                "--exact",
                "cli_child",
                "--nocapture",
                "--test-threads=1",
                "-q",
            ])
            .env(CHILD_ARGS, serde_json::to_string(args).unwrap())
            .env("XDG_CACHE_HOME", self.cache())
            .env("KALYPSO_CACHE_DIR", self.cache())
            .env("HOME", self.root.path())
            .env_remove("KALYPSO_THREADS")
            .env("NO_COLOR", "1")
            .current_dir(self.root.path())
            .output()
            .unwrap();
        // The test harness announces the test it runs; the rest is the command's output.
        let stdout = String::from_utf8_lossy(&output.stdout)
            .lines()
            .filter(|l| !l.is_empty() && *l != "running 1 test")
            .collect::<Vec<_>>()
            .join("\n");
        Outcome {
            code: output.status.code().unwrap_or(-1),
            stdout,
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }

    /// `kalypso render <dir> --env dev --out <out>`.
    fn render(&self) -> Outcome {
        let (dir, out) = (self.dir(), self.out());
        self.kalypso(&[
            "render",
            dir.to_str().unwrap(),
            "--env",
            "dev",
            "--out",
            out.to_str().unwrap(),
        ])
    }

    /// `kalypso validate <dir> --env dev`, with more arguments.
    fn validate(&self, more: &[&str]) -> Outcome {
        let dir = self.dir();
        let mut args = vec!["validate", dir.to_str().unwrap(), "--env", "dev"];
        args.extend_from_slice(more);
        self.kalypso(&args)
    }

    /// Renders and validates `dev`; asserts that both fail with `errors` errors and that
    /// nothing under the temporary folder (output tree, cache) changed. Returns both outcomes.
    #[track_caller]
    fn fails(&self, errors: usize) -> (Outcome, Outcome) {
        let before = snapshot(self.root.path());
        let render = self.render();
        assert_eq!(render.code, 1, "render must fail: {render:#?}");
        assert_eq!(
            snapshot(self.root.path()),
            before,
            "render must leave everything as it was: {render:#?}"
        );
        assert!(
            render.stderr.contains(&format!(
                "error: environment \"dev\" has {errors} problem(s); nothing was written to {}",
                self.out().display()
            )),
            "render must count {errors} problem(s): {render:#?}"
        );
        // The same into an output folder that does not exist yet, which is built while
        // rendering: neither it nor its parent may be left behind.
        let (dir, fresh_out) = (self.dir(), self.root.path().join("new/out"));
        let fresh = self.kalypso(&[
            "render",
            dir.to_str().unwrap(),
            "--env",
            "dev",
            "--out",
            fresh_out.to_str().unwrap(),
        ]);
        assert_eq!(fresh.code, 1, "render into a new folder must fail: {fresh:#?}");
        assert_eq!(
            snapshot(self.root.path()),
            before,
            "a failed render into a new folder leaves nothing behind: {fresh:#?}"
        );
        let validate = self.validate(&[]);
        assert_eq!(validate.code, 1, "validate must fail: {validate:#?}");
        assert!(
            validate
                .stderr
                .contains(&format!("environment dev: {errors} error(s)")),
            "validate must count {errors} error(s): {validate:#?}"
        );
        assert_eq!(snapshot(self.root.path()), before, "validate writes nothing");
        // Both commands report the same problems.
        let errors_of = |o: &Outcome| -> Vec<String> {
            o.diagnostics()
                .into_iter()
                .filter(|l| l.starts_with("error["))
                .map(str::to_owned)
                .collect()
        };
        assert_eq!(errors_of(&render), errors_of(&validate));
        assert_eq!(errors_of(&render).len(), errors, "{render:#?}");
        (render, validate)
    }
}

#[test]
fn a_valid_control_plane_changes_the_seeded_tree() {
    let cp = ControlPlane::new();
    let before = snapshot(&cp.out());
    let render = cp.render();
    assert_eq!(render.code, 0, "{render:#?}");
    assert!(render.diagnostics().is_empty(), "{render:#?}");
    let after = snapshot(&cp.out());
    assert_ne!(before, after);
    assert_eq!(
        after["large/app-web/reconciler.yaml"],
        Entry::File(b"name: app-web\n".to_vec())
    );
    assert!(
        !after.contains_key("retired"),
        "unscheduled cluster type folder is deleted"
    );
    assert!(after.contains_key("manifests-statement.txt"));
    let validate = cp.validate(&[]);
    assert_eq!(validate.code, 0, "{validate:#?}");
    assert!(
        validate
            .stdout
            .contains("environment dev: ok, 1 assignment(s), 0 warning(s)")
    );
}

#[test]
fn malformed_yaml_is_reported_for_every_file() {
    let cp = ControlPlane::new();
    cp.write(
        "dev/broken.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: broken\n  labels: {a: [b\n",
    )
    .write("dev/list.yaml", "# a list, not an object\n- name: a\n- name: b\n")
    .write_bytes(
        "main/latin1.yaml",
        b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: caf\xe9\n",
    )
    // A tab where YAML wants spaces, in the second document of a file whose first is fine.
    .append(
        "dev/config.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n\tname: tabbed\n",
    );
    let (render, _) = cp.fails(4);
    render
        .reports(&["error[yaml]: dev/broken.yaml:6: invalid YAML: "])
        .reports(&["error[not-an-object]: dev/list.yaml:2: document is a list, not a Kubernetes object"])
        .reports(&[
            "error[yaml]: main/latin1.yaml:4: file is not UTF-8 text",
            "save it as UTF-8",
        ])
        .reports(&[
            "error[yaml]: dev/config.yaml:13: invalid YAML: ",
            "(a tab indents this line; YAML indentation must use spaces)",
        ]);
}

#[test]
fn missing_fields_and_wrong_types_name_the_field_and_line() {
    let cp = ControlPlane::new();
    cp.append(
        "dev/cluster-types.yaml",
        "apiVersion: scheduler.kalypso.io/v1alpha1\nkind: ClusterType\nmetadata:\n  name: small\n\
         spec:\n  reconciler: reconciler\n  namespaceService: namespace\n",
    )
    .write(
        "dev/config.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: common\n  labels:\n    platform-config: \"true\"\n\
         data:\n  REGION: westus\n  REPLICAS: 3\n",
    )
    .write(
        "dev/policy.yaml",
        "apiVersion: scheduler.kalypso.io/v1alpha1\nkind: SchedulingPolicy\nmetadata:\n  name: everything\n\
         spec:\n  clusterTypeSelector:\n    labelSelector:\n      matchLabels: [size]\n",
    )
    .write(
        "dev/nameless.yaml",
        "apiVersion: scheduler.kalypso.io/v1alpha1\nkind: SchedulingPolicy\nspec: {}\n",
    );
    let (render, validate) = cp.fails(4);
    for outcome in [&render, &validate] {
        outcome
            .reports(&[
                "error[invalid-object]: dev/cluster-types.yaml:17: ClusterType \"small\": spec.configType: \
                 required field is missing",
            ])
            .reports(&[
                "error[invalid-object]: dev/config.yaml:9: ConfigMap \"common\": data.REPLICAS: \
                 must be a string, not the number 3; quote it: \"3\"",
            ])
            .reports(&[
                "error[invalid-object]: dev/policy.yaml:8: SchedulingPolicy \"everything\": \
                 spec.clusterTypeSelector.labelSelector.matchLabels: expected a mapping, found a list",
            ])
            .reports(&[
                "error[invalid-name]: dev/nameless.yaml:1: SchedulingPolicy without a name: metadata.name: \
                 required field is missing",
            ]);
    }
    // serde's own wording and repeated paths do not leak through.
    assert!(!render.stderr.contains("invalid type"), "{}", render.stderr);
    assert!(!render.stderr.contains("spec: spec"), "{}", render.stderr);
}

#[test]
fn warnings_are_printed_do_not_block_and_fail_strict_validation() {
    let cp = ControlPlane::new();
    cp.write(
        "dev/cluster-types.yaml",
        &CLUSTER_TYPE.replace(
            "  configType: config\n",
            "  configType: config\n  reconcilr: typo\n",
        ),
    )
    // A broken template no cluster type uses.
    .append(
        "main/templates.yaml",
        "apiVersion: scheduler.kalypso.io/v1alpha1\nkind: Template\nmetadata:\n  name: unused\nspec:\n  \
         type: reconciler\n  manifests:\n    - \"x: {{ .Foo \"\n",
    )
    // A Workload in an environment branch: no registration delivers it.
    .write(
        "dev/stray-workload.yaml",
        &WORKLOAD.replace("name: app", "name: stray"),
    )
    // A misspelled target field.
    .write(
        "workloads/app/workload.yaml",
        &format!("{WORKLOAD}    - name: api\n      environment: stage\n      enviroment: dev\n"),
    )
    // A YAML file that is not a Kubernetes object.
    .write("dev/values.yaml", "replicas: 3\n")
    // A workload folder no registration names, and a registration without a folder.
    .write("workloads/orphan/workload.yaml", WORKLOAD)
    .append(
        "main/registration.yaml",
        &REGISTRATION.replace("name: app", "name: lost"),
    );
    let expected: &[&[&str]] = &[
        &[
            "warning[unknown-field]: dev/cluster-types.yaml:11: ClusterType \"large\": spec.reconcilr: ",
            "ignored",
        ],
        &[
            "warning[template-parse]: main/templates.yaml:",
            "Template \"unused\": spec.manifests[0]: ",
            "unclosed action",
            "no assignment uses this template",
        ],
        &["warning[workload-without-registration]: dev/stray-workload.yaml:1: Workload \"stray\": "],
        &[
            "warning[unknown-field]: workloads/app/workload.yaml:12: Workload \"app\": \
             spec.deploymentTargets[1].enviroment: ",
        ],
        &["warning[not-an-object]: dev/values.yaml:1: document has no apiVersion or kind"],
        &[
            "warning[workloads-unregistered]: workloads/orphan: no WorkloadRegistration is named \"orphan\" \
             (there are app, lost), so the Workloads in this folder are ignored",
        ],
        &[
            "warning[workloads-missing]: main/registration.yaml:12: WorkloadRegistration \"lost\": \
             no workload files for this registration (expected in workloads/lost/)",
        ],
    ];

    let render = cp.render();
    assert_eq!(render.code, 0, "{render:#?}");
    assert_eq!(render.diagnostics().len(), expected.len(), "{render:#?}");
    for parts in expected {
        render.reports(parts);
    }
    assert!(
        cp.out().join("large/app-web/namespace.yaml").is_file(),
        "the tree is written"
    );

    let validate = cp.validate(&[]);
    assert_eq!(validate.code, 0, "{validate:#?}");
    assert!(
        validate
            .stdout
            .contains("environment dev: ok, 1 assignment(s), 7 warning(s)"),
        "{validate:#?}"
    );

    let strict = cp.validate(&["--strict"]);
    assert_eq!(strict.code, 1, "{strict:#?}");
    assert!(
        strict.stderr.contains("environment dev: 7 error(s)"),
        "{strict:#?}"
    );
    strict.reports(&["error[unknown-field]: dev/cluster-types.yaml:11:"]);

    let quiet = cp.kalypso(&["validate", cp.dir().to_str().unwrap(), "--quiet"]);
    assert_eq!(quiet.code, 0, "{quiet:#?}");
    assert!(
        quiet.diagnostics().is_empty(),
        "--quiet hides warnings: {quiet:#?}"
    );
}

#[test]
fn missing_templates_are_reported_for_each_field() {
    let cp = ControlPlane::new();
    cp.write(
        "dev/cluster-types.yaml",
        &CLUSTER_TYPE
            .replace("reconciler: reconciler", "reconciler: argocd")
            .replace("namespaceService: namespace", "namespaceService: ns-template")
            .replace("configType: config", "configType: envfile"),
    );
    let (render, _) = cp.fails(3);
    for (field, template) in [
        ("spec.reconciler", "argocd"),
        ("spec.namespaceService", "ns-template"),
        ("spec.configType", "envfile"),
    ] {
        render.reports(&[&format!(
            "error[template-missing]: dev/cluster-types.yaml:1: ClusterType \"large\": {field}: \
             Template \"{template}\" does not exist"
        )]);
    }
}

#[test]
fn invalid_selectors_name_the_offending_term() {
    let cp = ControlPlane::new();
    cp.write(
        "dev/policy.yaml",
        "apiVersion: scheduler.kalypso.io/v1alpha1\nkind: SchedulingPolicy\nmetadata:\n  name: everything\n\
         spec:\n  deploymentTargetSelector:\n    labelSelector:\n      matchExpressions:\n\
         \x20       - {key: zone, operator: Within, values: [a]}\n\
         \x20       - {key: tier, operator: In}\n\
         \x20 clusterTypeSelector:\n    labelSelector:\n      matchLabels:\n        \"bad key\": x\n",
    );
    let (render, _) = cp.fails(3);
    let at = "error[invalid-selector]: dev/policy.yaml:1: SchedulingPolicy \"everything\": ";
    render
        .reports(&[&format!(
            "{at}spec.deploymentTargetSelector.labelSelector.matchExpressions[0].operator: \
             unknown operator \"Within\"; use In, NotIn, Exists or DoesNotExist"
        )])
        .reports(&[&format!(
            "{at}spec.deploymentTargetSelector.labelSelector.matchExpressions[1].values: \
             operator In needs at least one value"
        )])
        .reports(&[&format!(
            "{at}spec.clusterTypeSelector.labelSelector.matchLabels.bad key: invalid label key \"bad key\""
        )]);
}

#[test]
fn templates_that_fail_to_parse_or_execute_name_the_template_and_manifest() {
    let cp = ControlPlane::new();
    cp.append(
        "main/templates.yaml",
        "apiVersion: scheduler.kalypso.io/v1alpha1\nkind: Template\nmetadata:\n  name: unparsable\nspec:\n  \
         type: reconciler\n  manifests:\n    - \"ok: 1\"\n    - \"x: {{ .Foo \"\n",
    )
    .append(
        "main/templates.yaml",
        "apiVersion: scheduler.kalypso.io/v1alpha1\nkind: Template\nmetadata:\n  name: failing\nspec:\n  \
         type: reconciler\n  manifests:\n    - \"ok: 1\"\n    - \"x: {{ fail \\\"no region\\\" }}\"\n",
    )
    .append(
        "main/templates.yaml",
        "apiVersion: scheduler.kalypso.io/v1alpha1\nkind: Template\nmetadata:\n  name: indexing\nspec:\n  \
         type: namespace\n  manifests:\n    - \"x: {{ index .Labels 1 }}\"\n",
    )
    .write(
        "dev/cluster-types.yaml",
        &CLUSTER_TYPE.replace("reconciler: reconciler", "reconciler: unparsable"),
    )
    .append(
        "dev/cluster-types.yaml",
        &CLUSTER_TYPE
            .replace("name: large", "name: medium")
            .replace("reconciler: reconciler", "reconciler: failing"),
    )
    .append(
        "dev/cluster-types.yaml",
        &CLUSTER_TYPE
            .replace("name: large", "name: small")
            .replace("namespaceService: namespace", "namespaceService: indexing"),
    );
    let (render, _) = cp.fails(3);
    render
        .reports(&[
            "error[template-parse]: main/templates.yaml:31: Template \"unparsable\": spec.manifests[1]: ",
            "unclosed action",
        ])
        .reports(&[
            "error[assignment]: workloads/app/workload.yaml:1: DeploymentTarget \"app-web\": cannot generate \
             manifests on cluster type \"medium\": main/templates.yaml:41: Template \"failing\": spec.manifests[1]: \
             template: template:1:6: executing \"template\" at <fail \"no region\">: error calling fail: no region",
        ])
        .reports(&[
            "error[assignment]: workloads/app/workload.yaml:1: DeploymentTarget \"app-web\": cannot generate \
             manifests on cluster type \"small\": main/templates.yaml:51: Template \"indexing\": spec.manifests[0]: ",
            "at <index .Labels 1>: error calling index: ",
        ]);
}

#[test]
fn config_schema_violations_list_every_violation_of_every_schema() {
    let cp = ControlPlane::new();
    cp.write(
        "main/schema.yaml",
        "apiVersion: scheduler.kalypso.io/v1alpha1\nkind: ConfigSchema\nmetadata:\n  name: replicas\nspec:\n  \
         schema: '{\"type\": \"object\", \"required\": [\"REGION\"], \"properties\": {\"REPLICAS\": \
         {\"type\": \"integer\", \"maximum\": 2}}}'\n",
    )
    .write(
        "workloads/app/workload.yaml",
        &WORKLOAD.replace(
            "spec:\n",
            "spec:\n  configSchemas:\n    - '{\"type\": \"object\", \"required\": [\"OWNER\"]}'\n",
        ),
    );
    let (render, _) = cp.fails(1);
    render.reports(&[
        "error[assignment]: workloads/app/workload.yaml:1: DeploymentTarget \"app-web\": cannot generate \
         manifests on cluster type \"large\": config data validation failed: ",
        "\"REGION\" is a required property",
        "REPLICAS: 3 is greater than the maximum of 2",
        "\"OWNER\" is a required property",
    ]);
}

#[test]
fn duplicate_names_are_errors() {
    let cp = ControlPlane::new();
    cp.write(
        "dev/more/cluster-types.yaml",
        &CLUSTER_TYPE.replace("size: large", "size: huge"),
    )
    .write(
        "workloads/app/workload.yaml",
        &format!(
            "{WORKLOAD}    - name: web\n      environment: dev\n      manifests: {{repo: r, branch: b, path: web2}}\n\
             \x20   - name: api\n      environment: dev\n      manifests: {{repo: r, branch: b, path: api}}\n\
             \x20   - name: api\n      environment: stage\n      manifests: {{repo: r, branch: b, path: api}}\n"
        ),
    )
    .write(
        "dev/targets.yaml",
        "apiVersion: scheduler.kalypso.io/v1alpha1\nkind: DeploymentTarget\nmetadata:\n  name: app-api\n\
         spec:\n  environment: dev\n  manifests: {repo: r, branch: b, path: api}\n",
    );
    let (render, _) = cp.fails(3);
    render
        .reports(&[
            "error[duplicate-name]: dev/more/cluster-types.yaml:1: ClusterType \"large\": another ClusterType \
             of this name is defined at dev/cluster-types.yaml:1",
        ])
        .reports(&[
            "error[duplicate-name]: workloads/app/workload.yaml:1: Workload \"app\": \
             spec.deploymentTargets[1].name: deployment target \"web\" of environment \"dev\" is also declared \
             at spec.deploymentTargets[0]",
        ])
        .reports(&[
            "error[duplicate-name]: dev/targets.yaml:1: DeploymentTarget \"app-api\": deployment target \
             \"app-api\" is also produced by workloads/app/workload.yaml:1",
        ]);
    // `api` for `stage` does not collide with `api` for `dev`.
    assert!(
        !render.stderr.contains("spec.deploymentTargets[3]"),
        "{}",
        render.stderr
    );
}

#[test]
fn names_that_are_not_kubernetes_names_or_escape_the_output_are_errors() {
    let cp = ControlPlane::new();
    let cluster_type = |name: &str, labels: &str| {
        format!(
            "apiVersion: scheduler.kalypso.io/v1alpha1\nkind: ClusterType\nmetadata:\n  name: {name}\n  \
             labels: {labels}\nspec: {{reconciler: reconciler, namespaceService: namespace, configType: config}}\n"
        )
    };
    cp.write(
        "dev/bad-names.yaml",
        &[
            cluster_type("../x", "{}"),
            cluster_type("a/b", "{}"),
            cluster_type("Large", "{}"),
            cluster_type("fine", "{\"bad key!\": x, zone: \"west us\"}"),
        ]
        .join("---\n"),
    )
    .write(
        "workloads/app/workload.yaml",
        &format!(
            "{WORKLOAD}    - name: Web_1\n      environment: dev\n\
             \x20   - name: ../../etc\n      environment: dev\n\
             \x20   - name: labelled\n      environment: dev\n      labels: {{tier: \"-bad\"}}\n"
        ),
    )
    .write(
        "main/registration.yaml",
        &REGISTRATION.replace("workspace: team", "workspace: my team"),
    );
    let (render, _) = cp.fails(9);
    let subdomain = "must be a lowercase RFC 1123 subdomain";
    render
        .reports(&[&format!(
            "error[invalid-name]: dev/bad-names.yaml:1: ClusterType \"../x\": metadata.name: {subdomain}"
        )])
        .reports(&[&format!(
            "error[invalid-name]: dev/bad-names.yaml:8: ClusterType \"a/b\": metadata.name: {subdomain}"
        )])
        .reports(&[&format!(
            "error[invalid-name]: dev/bad-names.yaml:15: ClusterType \"Large\": metadata.name: {subdomain}"
        )])
        .reports(&[
            "error[invalid-label]: dev/bad-names.yaml:22: ClusterType \"fine\": metadata.labels.bad key!: \
             invalid label key \"bad key!\"",
        ])
        .reports(&[
            "error[invalid-label]: dev/bad-names.yaml:22: ClusterType \"fine\": metadata.labels.zone: \
             invalid label value \"west us\"",
        ])
        .reports(&[
            "error[invalid-name]: workloads/app/workload.yaml:1: Workload \"app\": spec.deploymentTargets[1].name: \
             the deployment target's name \"app-Web_1\" (<workload>-<target>) must be",
        ])
        .reports(&[
            "error[invalid-name]: workloads/app/workload.yaml:1: Workload \"app\": spec.deploymentTargets[2].name: \
             the deployment target's name \"app-../../etc\"",
        ])
        .reports(&[
            "error[invalid-label]: workloads/app/workload.yaml:1: Workload \"app\": \
             spec.deploymentTargets[3].labels.tier: invalid label value \"-bad\"",
        ])
        .reports(&[
            "error[invalid-label]: main/registration.yaml:1: WorkloadRegistration \"app\": spec.workspace: \
             invalid label value \"my team\"",
            "the workspace becomes the `workspace` label",
        ]);
}

/// Runs `args` and asserts the command fails with a message holding every one of `parts`,
/// and that nothing under the temporary folder changed.
#[track_caller]
fn fails_with(cp: &ControlPlane, args: &[&str], parts: &[&str]) -> Outcome {
    let before = snapshot(cp.root.path());
    let outcome = cp.kalypso(args);
    assert_eq!(outcome.code, 1, "{outcome:#?}");
    outcome.reports(parts);
    assert_eq!(snapshot(cp.root.path()), before, "nothing changed: {outcome:#?}");
    outcome
}

#[test]
fn an_unknown_environment_lists_the_environments_found() {
    let cp = ControlPlane::new();
    cp.write("stage/cluster-types.yaml", CLUSTER_TYPE);
    let (dir, out) = (cp.dir(), cp.out());
    let (dir, out) = (dir.to_str().unwrap(), out.to_str().unwrap());
    let message = [
        "error: no folder for environment \"prod\" at ",
        "(environments found: dev, stage)",
    ];
    fails_with(&cp, &["render", dir, "--env", "prod", "--out", out], &message);
    fails_with(&cp, &["validate", dir, "--env", "prod"], &message);
    // Nor is `main` (or `workloads`) an environment.
    for (env, holds) in [("main", "the main branch"), ("workloads", "workload definitions")] {
        let message = format!("error: \"{env}\" is not an environment: {dir}/{env} holds {holds}");
        fails_with(&cp, &["render", dir, "--env", env, "--out", out], &[&message]);
        fails_with(&cp, &["validate", dir, "--env", env], &[&message]);
    }
    // A name that would leave the control-plane folder.
    fails_with(
        &cp,
        &["render", dir, "--env", "../dev", "--out", out],
        &["error: environment name \"../dev\" must be a lowercase RFC 1123 subdomain"],
    );
}

#[test]
fn a_missing_main_folder_or_control_plane_is_reported() {
    let cp = ControlPlane::new();
    fs::remove_dir_all(cp.dir().join("main")).unwrap();
    let (dir, out) = (cp.dir(), cp.out());
    let (dir, out) = (dir.to_str().unwrap(), out.to_str().unwrap());
    let message = format!("error: no main branch folder at {dir}/main; it holds the Templates");
    fails_with(&cp, &["render", dir, "--env", "dev", "--out", out], &[&message]);
    fails_with(&cp, &["validate", dir], &[&message]);

    let missing = cp.root.path().join("no-such-folder");
    let missing = missing.to_str().unwrap();
    let message = format!("error: no control-plane folder at {missing}");
    fails_with(
        &cp,
        &["render", missing, "--env", "dev", "--out", out],
        &[&message],
    );
    fails_with(&cp, &["validate", missing], &[&message]);
}

#[test]
fn an_output_path_that_is_a_file_is_left_alone() {
    let cp = ControlPlane::new();
    let file = cp.root.path().join("out.txt");
    fs::write(&file, "not a folder").unwrap();
    let dir = cp.dir();
    let outcome = fails_with(
        &cp,
        &[
            "render",
            dir.to_str().unwrap(),
            "--env",
            "dev",
            "--out",
            file.to_str().unwrap(),
        ],
        &["error: ", file.to_str().unwrap(), "is not a folder"],
    );
    assert_eq!(
        outcome.stderr.lines().count(),
        1,
        "one line, no repeated cause: {outcome:#?}"
    );
}

#[test]
fn symbolic_links_in_the_output_tree_are_not_written_through() {
    let cp = ControlPlane::new();
    let outside = cp.root.path().join("outside");
    fs::create_dir(&outside).unwrap();
    fs::write(outside.join("reconciler.yaml"), "precious").unwrap();
    // The target folder the render writes into is a link out of the output folder.
    fs::remove_dir_all(cp.out().join("large/app-web")).unwrap();
    std::os::unix::fs::symlink(&outside, cp.out().join("large/app-web")).unwrap();
    let (dir, out) = (cp.dir(), cp.out());
    fails_with(
        &cp,
        &[
            "render",
            dir.to_str().unwrap(),
            "--env",
            "dev",
            "--out",
            out.to_str().unwrap(),
        ],
        &["refusing to write through symbolic link", "large/app-web"],
    );
    assert_eq!(
        fs::read_to_string(outside.join("reconciler.yaml")).unwrap(),
        "precious"
    );

    // A linked file is not written through either.
    fs::remove_file(cp.out().join("large/app-web")).unwrap();
    fs::create_dir(cp.out().join("large/app-web")).unwrap();
    std::os::unix::fs::symlink(
        outside.join("reconciler.yaml"),
        cp.out().join("large/app-web/reconciler.yaml"),
    )
    .unwrap();
    fails_with(
        &cp,
        &[
            "render",
            dir.to_str().unwrap(),
            "--env",
            "dev",
            "--out",
            out.to_str().unwrap(),
        ],
        &[
            "refusing to write through symbolic link",
            "large/app-web/reconciler.yaml",
        ],
    );
    assert_eq!(
        fs::read_to_string(outside.join("reconciler.yaml")).unwrap(),
        "precious"
    );
}

#[test]
fn an_output_folder_that_would_overwrite_the_control_plane_is_refused() {
    let cp = ControlPlane::new();
    cp.write("stage/cluster-types.yaml", CLUSTER_TYPE);
    let dir = cp.dir();
    let dir = dir.to_str().unwrap();
    for (out, reason) in [
        (
            format!("{dir}/dev"),
            "it is inside the control plane's dev/ folder".to_owned(),
        ),
        (
            format!("{dir}/stage/gitops"),
            "it is inside the control plane's stage/ folder".to_owned(),
        ),
        (
            format!("{dir}/main"),
            "it is inside the control plane's main/ folder".to_owned(),
        ),
        (
            format!("{dir}/workloads"),
            "it is inside the control plane's workloads/ folder".to_owned(),
        ),
        (dir.to_owned(), "it is the control-plane folder itself".to_owned()),
        (
            cp.root.path().to_str().unwrap().to_owned(),
            format!("it holds the control plane {dir}, which the GitOps tree's update rules would delete"),
        ),
    ] {
        fails_with(
            &cp,
            &["render", dir, "--env", "dev", "--out", &out],
            &[&format!("error: refusing to write into {out}: {reason}")],
        );
    }
    // A folder of its own inside the control-plane folder is fine.
    let out = format!("{dir}/rendered");
    let outcome = cp.kalypso(&["render", dir, "--env", "dev", "--out", &out]);
    assert_eq!(outcome.code, 0, "{outcome:#?}");
}
