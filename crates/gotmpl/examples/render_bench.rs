//! Times parsing and rendering of a typical Flux reconciler template (about 30 lines, a dozen
//! field accesses) against the scheduler's data struct.
//!
//! Run: `cargo run --release -p kalypso-gotmpl --example render_bench`

use std::sync::Arc;
use std::time::Instant;

use kalypso_gotmpl::{FuncMap, Limits, Map, Struct, Template, Value};

const FLUX: &str = r#"apiVersion: source.toolkit.fluxcd.io/v1
kind: GitRepository
metadata:
  name: {{ .DeploymentTargetName }}
  namespace: flux-system
  labels:
    workspace: {{ .Workspace }}
    workload: {{ .Workload }}
spec:
  interval: 30s
  url: {{ .Manifests.repo }}
  ref:
    branch: {{ .Manifests.branch }}
  secretRef:
    name: repo-secret
---
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata:
  name: {{ .DeploymentTargetName }}
  namespace: flux-system
spec:
  interval: 30s
  targetNamespace: {{ .Namespace }}
  sourceRef:
    kind: GitRepository
    name: {{ .DeploymentTargetName }}
  path: {{ .Manifests.path }}
  prune: true
  {{- if .Labels.env }}
  commonMetadata:
    labels:
      env: {{ .Labels.env }}
  {{- end }}
"#;

fn data() -> Value {
    let s = |v: &str| Value::string(v);
    Value::Object(Arc::new(Struct::new(
        "scheduler.dataType",
        vec![
            ("DeploymentTargetName".into(), s("dev-drone-functional-test")),
            ("Namespace".into(), s("dev-drone-functional-test")),
            ("Environment".into(), s("dev")),
            ("Workspace".into(), s("kaizen-app-team")),
            ("Workload".into(), s("hello-world-app")),
            (
                "Labels".into(),
                Value::Map(Map::string_string([
                    ("env", "dev"),
                    ("workspace", "kaizen-app-team"),
                ])),
            ),
            (
                "Manifests".into(),
                Value::Map(Map::string_string([
                    ("repo", "https://github.com/microsoft/kalypso-app-gitops"),
                    ("branch", "dev"),
                    ("path", "./functional-test"),
                ])),
            ),
            ("ClusterType".into(), s("drone")),
            (
                "ConfigData".into(),
                Value::Map(Map::string_interface::<_, &str>([])),
            ),
        ],
    )))
}

fn main() {
    let funcs = Arc::new(FuncMap::new());
    let data = data();
    let limits = Limits::default();
    let n = 200_000;

    let t = Template::parse("template", FLUX, funcs.clone()).expect("parses");
    let mut out = Vec::with_capacity(2048);
    let start = Instant::now();
    for _ in 0..n {
        out.clear();
        t.execute(&data, &mut out, &limits).expect("renders");
    }
    let exec = start.elapsed();

    let start = Instant::now();
    for _ in 0..n {
        out.clear();
        let t = Template::parse("template", FLUX, funcs.clone()).expect("parses");
        t.execute(&data, &mut out, &limits).expect("renders");
    }
    let both = start.elapsed();

    println!("{}", String::from_utf8_lossy(&out).lines().count());
    println!(
        "execute only:    {:>9.0} renders/s ({:.2} us each)",
        n as f64 / exec.as_secs_f64(),
        exec.as_secs_f64() * 1e6 / n as f64
    );
    println!(
        "parse + execute: {:>9.0} renders/s ({:.2} us each)",
        n as f64 / both.as_secs_f64(),
        both.as_secs_f64() * 1e6 / n as f64
    );
}
