//! Render throughput of realistic Kalypso templates, parsed once and rendered many times (the
//! scheduler renders one template per assignment, hundreds of thousands of times at fleet
//! scale). Run with `cargo bench -p kalypso-template --bench render`.
//!
//! - `flux-reconciler`: the Flux GitRepository + Kustomization reconciler template of the
//!   conformance case `kalypso/flux-arc-sample.*` with the `.basic` data.
//! - `configmap-toyaml`: the `toYaml .ConfigData | indent 2` ConfigMap template with a flat
//!   ConfigData of fifteen string values.
//! - `*-with-data`: the same, building the template data (`TemplateData::to_value`) each time.

use std::collections::BTreeMap;
use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use kalypso_gotmpl::Map;
use kalypso_template::{Engine, TemplateData, config_value};

const FLUX_RECONCILER: &str = r#"apiVersion: source.toolkit.fluxcd.io/v1beta2
kind: GitRepository
metadata:
  name: "{{ .DeploymentTargetName}}"
  namespace: flux-system
  labels:
    environment: "{{ .Environment}}"
    workspace: "{{ .Workspace}}"
spec:
  interval: 1m0s
  url: "{{ .Manifests.repo}}"
  ref:
    branch: "{{ .Manifests.branch}}"
  secretRef:
    name: repo-secret
---
apiVersion: kustomize.toolkit.fluxcd.io/v1beta2
kind: Kustomization
metadata:
  name: "{{ .DeploymentTargetName}}"
  namespace: flux-system
spec:
  interval: 1m0s
  targetNamespace: "{{ .Namespace}}"
  sourceRef:
    kind: GitRepository
    name: "{{ .DeploymentTargetName}}"
  path: "{{ .Manifests.path}}"
  prune: true
  {{- if eq .Manifests.type "kustomize" }}
  wait: true
  {{- else }}
  wait: false
  {{- end }}
"#;

const CONFIGMAP_TOYAML: &str = "apiVersion: v1
kind: ConfigMap
metadata:
  name: platform-config
  namespace: {{ .Namespace}}
data:
{{ toYaml .ConfigData | indent 2}}
";

const FLAT_CONFIG: [(&str, &str); 15] = [
    ("REGION", "West US"),
    ("DATABASE_URL", "postgres://db:5432/app"),
    ("REPLICAS", "3"),
    ("LOG_LEVEL", "info"),
    ("FEATURE_CHECKOUT", "true"),
    ("API_ENDPOINT", "https://api.example.com/v2"),
    ("CACHE_TTL", "300"),
    ("MAX_CONNECTIONS", "100"),
    ("TIMEOUT", "30s"),
    ("ENVIRONMENT", "dev"),
    ("CLUSTER_NAME", "drone-eu-1"),
    ("METRICS_ENABLED", "yes"),
    ("OTEL_EXPORTER", "otlp"),
    ("STORAGE_CLASS", "managed-premium"),
    ("SERVICE_ACCOUNT", "hello-world-app"),
];

fn string_map(entries: &[(&str, &str)]) -> Option<Map> {
    Some(kalypso_template::string_map(
        &entries
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect::<BTreeMap<String, String>>(),
    ))
}

fn basic_data(config: &[(&str, &str)]) -> TemplateData {
    TemplateData {
        deployment_target_name: "functional-test".into(),
        namespace: "dev-drone-functional-test".into(),
        environment: "dev".into(),
        workspace: "kaizen-app-team".into(),
        workload: "hello-world-app".into(),
        labels: string_map(&[("workspace", "kaizen-app-team"), ("workload", "hello-world-app")]),
        manifests: string_map(&[
            ("repo", "https://github.com/microsoft/kalypso-app-gitops"),
            ("branch", "dev"),
            ("path", "./functional-test"),
            ("type", "kustomize"),
        ]),
        cluster_type: "drone".into(),
        config_data: Some(Map::string_interface(
            config.iter().map(|(k, v)| (*k, config_value(v))),
        )),
    }
}

fn bench_template(c: &mut Criterion, name: &str, text: &str, data: &TemplateData) {
    let engine = Engine::new();
    let compiled = engine.compile("template", text).expect("template parses");
    let value = data.to_value();
    let mut group = c.benchmark_group(name);
    group.throughput(Throughput::Elements(1));
    group.bench_function("render", |b| {
        b.iter(|| engine.render(&compiled, black_box(&value)).expect("renders"))
    });
    group.bench_function("render-with-data", |b| {
        b.iter(|| {
            let value = black_box(data).to_value();
            engine.render(&compiled, &value).expect("renders")
        })
    });
    group.finish();
}

fn benches(c: &mut Criterion) {
    let flux_data = basic_data(&FLAT_CONFIG[..3]);
    bench_template(c, "flux-reconciler", FLUX_RECONCILER, &flux_data);
    let configmap_data = basic_data(&FLAT_CONFIG);
    bench_template(c, "configmap-toyaml", CONFIGMAP_TOYAML, &configmap_data);
}

criterion_group!(render, benches);
criterion_main!(render);
