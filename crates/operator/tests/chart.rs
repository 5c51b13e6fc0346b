//! The Helm chart `charts/kalypso-scheduler`: its CRDs are exactly what `kalypso crds`
//! generates, every kind of the original is there, and its templates render into valid
//! Kubernetes manifests.
//!
//! There is no `helm` binary here: the templates are Go templates, so they are rendered with
//! this project's own engine (`kalypso-gotmpl` with Sprig and `toYaml`, from
//! `kalypso-template`) plus the few functions Helm adds (`include`, `required`), with the
//! values Helm would pass (`.Values`, `.Release`, `.Chart`).
//!
//! `KALYPSO_BLESS=1 cargo test -p kalypso-operator --test chart` rewrites the chart's CRDs
//! from the Rust types.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use kalypso_gotmpl::{Func, FuncError, FuncMap, Map, Template, Type, Value};
use kalypso_operator::crds;

fn chart_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../charts/kalypso-scheduler")
}

#[test]
fn chart_crds_equal_the_generated_ones() {
    let dir = chart_dir().join("crds");
    let bless = std::env::var_os("KALYPSO_BLESS").is_some();
    let definitions = crds::definitions();
    let mut expected: Vec<String> = Vec::new();
    for crd in &definitions {
        let file = crds::chart_file_name(crd);
        let yaml = crds::crd_to_yaml(crd).expect("yaml");
        let path = dir.join(&file);
        if bless {
            std::fs::write(&path, &yaml).expect("write");
        }
        let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            on_disk == yaml,
            "{} differs from the CRD generated from the Rust types; regenerate the chart's CRDs with \
             `kalypso crds --out charts/kalypso-scheduler/crds` (or KALYPSO_BLESS=1 cargo test -p kalypso-operator --test chart)",
            path.display()
        );
        expected.push(file);
    }
    let mut present: Vec<String> = std::fs::read_dir(&dir)
        .expect("crds folder")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    present.sort();
    expected.sort();
    assert_eq!(present, expected, "the chart holds exactly the generated CRDs");
}

#[test]
fn every_kind_of_the_original_is_in_the_chart() {
    let original = [
        ("Assignment", "assignments"),
        ("AssignmentPackage", "assignmentpackages"),
        ("BaseRepo", "baserepoes"),
        ("ClusterType", "clustertypes"),
        ("ConfigSchema", "configschemas"),
        ("DeploymentTarget", "deploymenttargets"),
        ("Environment", "environments"),
        ("GitOpsRepo", "gitopsrepoes"),
        ("SchedulingPolicy", "schedulingpolicies"),
        ("Template", "templates"),
        ("Workload", "workloads"),
        ("WorkloadRegistration", "workloadregistrations"),
    ];
    for (kind, plural) in original {
        let path = chart_dir().join("crds").join(format!("{plural}.yaml"));
        let text = std::fs::read_to_string(&path).unwrap_or_else(|_| panic!("{} is missing", path.display()));
        let crd: serde_json::Value = serde_yaml_ng::from_str(&text).expect("yaml");
        assert_eq!(crd["spec"]["names"]["kind"], kind);
        assert_eq!(crd["spec"]["names"]["plural"], plural);
        assert_eq!(crd["spec"]["group"], "scheduler.kalypso.io");
        assert_eq!(crd["spec"]["scope"], "Namespaced");
        assert_eq!(crd["spec"]["versions"][0]["name"], "v1alpha1");
        assert!(crd["spec"]["versions"][0]["subresources"]["status"].is_object());
    }
}

/// Helm's template environment, as far as this chart uses it.
struct Helm {
    helpers: Arc<OnceLock<Template>>,
    funcs: Arc<FuncMap>,
    helper_text: String,
}

fn to_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.to_string(),
        Value::Nil => String::new(),
        other => format!("{other:?}"),
    }
}

impl Helm {
    fn new() -> Helm {
        let helpers: Arc<OnceLock<Template>> = Arc::new(OnceLock::new());
        let mut funcs: FuncMap = kalypso_template::Engine::with_sprig(kalypso_template::SprigVersion::V3) // Helm links Sprig v3
            .funcs()
            .as_ref()
            .clone();
        let set = helpers.clone();
        funcs.insert(
            "include",
            Func::new([Type::String, Type::Interface], move |args| {
                let name = to_text(&args[0]);
                let template = set
                    .get()
                    .ok_or_else(|| FuncError::new("helpers are not parsed yet"))?;
                let mut out = Vec::new();
                template
                    .execute_template(&name, &args[1], &mut out, &Default::default())
                    .map_err(|e| FuncError::new(e.to_string()))?;
                Ok(Value::string(String::from_utf8_lossy(&out).into_owned()))
            }),
        );
        funcs.insert(
            "required",
            Func::new([Type::String, Type::Interface], |args| {
                let empty = matches!(&args[1], Value::Nil) || to_text(&args[1]).is_empty();
                if empty {
                    Err(FuncError::new(to_text(&args[0])))
                } else {
                    Ok(args[1].clone())
                }
            }),
        );
        let funcs = Arc::new(funcs);
        let helper_text =
            std::fs::read_to_string(chart_dir().join("templates/_helpers.tpl")).expect("helpers");
        let parsed = Template::parse("_helpers.tpl", &helper_text, funcs.clone()).expect("helpers parse");
        assert!(helpers.set(parsed).is_ok());
        Helm {
            helpers,
            funcs,
            helper_text,
        }
    }

    /// Renders `file` with `values` (YAML, merged over the chart's values.yaml by key).
    fn render(&self, file: &str, overrides: &str) -> Result<String, String> {
        let _ = &self.helpers;
        let text = std::fs::read_to_string(chart_dir().join("templates").join(file)).expect("template");
        let source = format!("{}{}", self.helper_text, text);
        let template = Template::parse(file, &source, self.funcs.clone()).map_err(|e| e.to_string())?;
        let out = template.render(&root(overrides)).map_err(|e| e.to_string())?;
        Ok(String::from_utf8_lossy(&out).into_owned())
    }
}

/// `.Values` (values.yaml with top-level keys of `overrides` replaced), `.Release`, `.Chart`.
fn root(overrides: &str) -> Value {
    let defaults = std::fs::read_to_string(chart_dir().join("values.yaml")).expect("values");
    let mut values: BTreeMap<String, serde_yaml_ng::Value> =
        serde_yaml_ng::from_str(&defaults).expect("values");
    if !overrides.trim().is_empty() {
        let o: BTreeMap<String, serde_yaml_ng::Value> =
            serde_yaml_ng::from_str(overrides).expect("overrides");
        values.extend(o);
    }
    let chart: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(&std::fs::read_to_string(chart_dir().join("Chart.yaml")).expect("chart"))
            .expect("chart yaml");
    let doc = serde_yaml_ng::to_string(&serde_json::json!({
        "Values": values,
        "Release": {"Name": "kalypso", "Namespace": "kalypso", "Service": "Helm"},
        "Chart": {
            "Name": chart["name"], "Version": chart["version"], "AppVersion": chart["appVersion"]
        },
    }))
    .expect("yaml");
    let parsed = kalypso_goyaml::unmarshal_v2(doc.as_bytes()).expect("values as Go values");
    // Helm passes a map[string]interface{} root.
    match parsed.as_map() {
        Some(m) => {
            let entries: Vec<(String, Value)> = ["Values", "Release", "Chart"]
                .iter()
                .map(|k| ((*k).to_owned(), m.get_str(k).unwrap_or(Value::Nil)))
                .collect();
            Value::Map(Map::string_interface(entries))
        }
        None => parsed,
    }
}

/// The documents of rendered output, parsed.
fn documents(text: &str) -> Vec<serde_json::Value> {
    text.split("\n---")
        .map(str::trim)
        .filter(|d| {
            !d.is_empty()
                && d.lines()
                    .any(|l| !l.trim_start().starts_with('#') && !l.trim().is_empty())
        })
        .map(|d| serde_yaml_ng::from_str::<serde_json::Value>(d).unwrap_or_else(|e| panic!("{e}:\n{d}")))
        .filter(|d| !d.is_null())
        .collect()
}

const TEMPLATES: [&str; 6] = [
    "serviceaccount.yaml",
    "deployment.yaml",
    "metrics-service.yaml",
    "rbac.yaml",
    "controlplanerepo.yaml",
    "hub.yaml",
];

fn render_all(helm: &Helm, values: &str) -> Vec<serde_json::Value> {
    TEMPLATES
        .iter()
        .flat_map(|t| {
            let text = helm.render(t, values).unwrap_or_else(|e| panic!("{t}: {e}"));
            documents(&text)
        })
        .collect()
}

fn find<'a>(docs: &'a [serde_json::Value], kind: &str, name: &str) -> &'a serde_json::Value {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name}"))
}

#[test]
fn the_chart_renders_with_the_originals_values() {
    let helm = Helm::new();
    // The original README's install command.
    let docs = render_all(
        &helm,
        "controlPlaneURL: https://github.com/org/control-plane\ncontrolPlaneBranch: main\nghRepoToken: s3cret\n",
    );
    let deployment = find(
        &docs,
        "Deployment",
        "kalypso-kalypso-scheduler-controller-manager",
    );
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["name"], "manager");
    assert_eq!(container["image"], "kalypso:0.1.0");
    let args: Vec<&str> = container["args"]
        .as_array()
        .expect("args")
        .iter()
        .filter_map(|a| a.as_str())
        .collect();
    assert_eq!(args[0], "operator");
    assert!(args.contains(&"--leader-elect"));
    assert!(args.contains(&"--health-probe-bind-address=:8081"));
    assert!(args.contains(&"--assignments=true"), "{args:?}");
    assert!(args.contains(&"--flux-source-api-version=auto"), "{args:?}");
    assert_eq!(container["env"][0]["name"], "GITHUB_AUTH_TOKEN");
    assert_eq!(
        container["env"][0]["valueFrom"]["secretKeyRef"]["name"],
        "gh-repo-secret"
    );
    assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(
        deployment["spec"]["selector"]["matchLabels"]["control-plane"],
        "controller-manager"
    );

    let repo = find(&docs, "GitRepository", "control-plane");
    assert_eq!(repo["spec"]["url"], "https://github.com/org/control-plane");
    assert_eq!(repo["spec"]["ref"]["branch"], "main");
    assert_eq!(repo["spec"]["secretRef"]["name"], "gh-repo-secret");
    let k = find(&docs, "Kustomization", "control-plane");
    assert_eq!(k["spec"]["targetNamespace"], "kalypso");
    assert_eq!(k["spec"]["path"], ".environments");
    let secrets: Vec<_> = docs.iter().filter(|d| d["kind"] == "Secret").collect();
    assert_eq!(secrets.len(), 2, "the operator's token and Flux's credentials");

    let role = find(&docs, "ClusterRole", "kalypso-kalypso-scheduler-manager-role");
    let rules = role["rules"].as_array().expect("rules");
    assert!(
        rules
            .iter()
            .any(|r| r["apiGroups"][0] == "kustomize.toolkit.fluxcd.io")
    );
    assert!(
        rules.iter().any(|r| r["resources"]
            .as_array()
            .is_some_and(|rs| rs.iter().any(|x| x == "assignments"))),
        "Assignment rights by default: the operator writes them, as the original does"
    );
    assert!(
        rules.iter().any(|r| r["resources"]
            .as_array()
            .is_some_and(|rs| rs.iter().any(|x| x == "rolloutpolicies"))
            && r["verbs"]
                .as_array()
                .is_some_and(|vs| vs.iter().any(|v| v == "watch"))),
        "the scheduler watches RolloutPolicies (one stops its environment's delivery with Flux)"
    );
    assert!(
        !rules.iter().any(|r| r["resources"]
            .as_array()
            .is_some_and(|rs| rs.iter().any(|x| x == "*"))),
        "no wildcards"
    );
    let svc = find(
        &docs,
        "Service",
        "kalypso-kalypso-scheduler-controller-manager-metrics-service",
    );
    assert_eq!(svc["spec"]["ports"][0]["targetPort"], "http-metrics");
    find(&docs, "Role", "kalypso-kalypso-scheduler-leader-election-role");
    find(
        &docs,
        "ServiceAccount",
        "kalypso-kalypso-scheduler-controller-manager",
    );
}

#[test]
fn the_original_charts_nested_values_work_too() {
    let helm = Helm::new();
    let docs = render_all(
        &helm,
        "controlPlane:\n  URL: https://github.com/org/cp\n  branch: dev\nghRepo:\n  token: t\n",
    );
    let repo = find(&docs, "GitRepository", "control-plane");
    assert_eq!(repo["spec"]["url"], "https://github.com/org/cp");
    assert_eq!(repo["spec"]["ref"]["branch"], "dev");
}

#[test]
fn a_missing_control_plane_url_is_an_error_and_external_mode_needs_no_flux() {
    let helm = Helm::new();
    let err = helm.render("controlplanerepo.yaml", "").expect_err("required");
    assert!(err.contains("controlPlaneURL"), "{err}");

    let docs = render_all(
        &helm,
        "operator:\n  source: external\n  assignments: false\n  controlPlaneRepo: true\n  leaderElect: false\n  delivery: push\n  debounce: 1s\n  resync: 1m\n  concurrency: 2\n  logFormat: text\n  logLevel: debug\n  githubApiUrl: ''\n  flux: {namespace: flux-system, secret: '', interval: 10s, sourceApiVersion: a/v1, kustomizeApiVersion: b/v1}\n  extraArgs: []\n  extraEnv: []\n",
    );
    assert!(!docs.iter().any(|d| d["kind"] == "GitRepository"));
    let role = find(&docs, "ClusterRole", "kalypso-kalypso-scheduler-manager-role");
    let text = role.to_string();
    assert!(!text.contains("fluxcd"), "{text}");
    assert!(
        !text.contains("assignments"),
        "no Assignment rights with assignments: false"
    );
    let deployment = find(
        &docs,
        "Deployment",
        "kalypso-kalypso-scheduler-controller-manager",
    );
    let args = deployment["spec"]["template"]["spec"]["containers"][0]["args"].to_string();
    assert!(!args.contains("--leader-elect"));
    assert!(args.contains("--assignments=false"));
    assert!(args.contains("--source=external"));
}

/// The hub's values with `database`, `replicas` and the secrets given.
fn hub_values(replicas: u32, database_secret: &str) -> String {
    format!(
        "controlPlaneURL: https://github.com/org/cp\nhub:\n  enabled: true\n  replicas: {replicas}\n  database: {{existingSecret: '{database_secret}', key: url, persistentVolumeClaim: ''}}\n  webhookSecret: {{existingSecret: hub-webhook, key: secret}}\n  apiToken: {{existingSecret: hub-api, key: token}}\n  staleAfter: 10m\n  refresh: 1m\n  service: {{type: ClusterIP, port: 8090}}\n  resources: {{}}\n"
    )
}

#[test]
fn the_hub_is_off_by_default_and_takes_its_database_url_from_a_secret() {
    let helm = Helm::new();
    let docs = render_all(&helm, "controlPlaneURL: https://github.com/org/cp\n");
    assert!(
        !docs
            .iter()
            .any(|d| d["metadata"]["name"] == "kalypso-kalypso-scheduler-hub")
    );

    let docs = render_all(&helm, &hub_values(2, "hub-db"));
    let deployment = find(&docs, "Deployment", "kalypso-kalypso-scheduler-hub");
    assert_eq!(deployment["spec"]["replicas"], 2);
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let args: Vec<&str> = container["args"]
        .as_array()
        .expect("args")
        .iter()
        .filter_map(|a| a.as_str())
        .collect();
    assert_eq!(args[0], "hub");
    assert!(args.contains(&"--database=$(KALYPSO_HUB_DATABASE)"), "{args:?}");
    assert!(
        args.contains(&"--control-plane=https://github.com/org/cp"),
        "{args:?}"
    );
    assert!(
        args.contains(&"--webhook-secret-file=/etc/kalypso-hub/webhook/secret"),
        "{args:?}"
    );
    assert!(
        args.contains(&"--api-token-file=/etc/kalypso-hub/api/token"),
        "{args:?}"
    );
    let env = container["env"].as_array().expect("env");
    let database = env
        .iter()
        .find(|e| e["name"] == "KALYPSO_HUB_DATABASE")
        .expect("database env");
    assert_eq!(database["valueFrom"]["secretKeyRef"]["name"], "hub-db");
    assert_eq!(database["valueFrom"]["secretKeyRef"]["key"], "url");
    let service = find(&docs, "Service", "kalypso-kalypso-scheduler-hub");
    assert_eq!(service["spec"]["ports"][0]["port"], 8090);

    // Without a database Secret: SQLite on a volume, and one replica only.
    let docs = render_all(&helm, &hub_values(1, ""));
    let deployment = find(&docs, "Deployment", "kalypso-kalypso-scheduler-hub");
    let args = deployment["spec"]["template"]["spec"]["containers"][0]["args"].to_string();
    assert!(
        args.contains("--database=sqlite:///var/lib/kalypso-hub/hub.db"),
        "{args}"
    );
    let err = helm
        .render("hub.yaml", &hub_values(3, ""))
        .expect_err("replicas need PostgreSQL");
    assert!(err.contains("PostgreSQL"), "{err}");
}

#[test]
fn the_chart_metadata_is_valid() {
    let chart: serde_json::Value =
        serde_yaml_ng::from_str(&std::fs::read_to_string(chart_dir().join("Chart.yaml")).expect("chart"))
            .expect("yaml");
    assert_eq!(chart["apiVersion"], "v2");
    assert_eq!(chart["name"], "kalypso-scheduler");
    assert!(
        chart["version"]
            .as_str()
            .is_some_and(|v| v.split('.').count() == 3)
    );
}
