//! A bounded fuzz pass that runs on stable Rust, in every `cargo test`.
//!
//! The cargo-fuzz targets under `fuzz/` need nightly and run for as long as one lets them;
//! this pass runs the same bodies (template parsing and execution, the control-plane loader)
//! over a seed corpus plus a fixed number of seeded random mutations, so that CI checks on
//! every run that no input panics, overflows the stack or escapes the limits. The PRNG is
//! seeded: a failure names the seed and iteration, and reruns the same. Set
//! `KALYPSO_FUZZ_ITERATIONS` to run longer locally.

#![allow(clippy::unwrap_used)]

mod support;
use kalypso_core::diag::{Code, Diagnostics};
use kalypso_core::source::{SourceFile, SourceTree};
use kalypso_gotmpl::Limits;
use kalypso_template::{Engine, TemplateData};
use support::Rng;

fn iterations(default: usize) -> usize {
    std::env::var("KALYPSO_FUZZ_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// One mutation of `text`: a token inserted, a span deleted, duplicated or repeated.
fn mutate(rng: &mut Rng, text: &str, tokens: &[&str]) -> String {
    let mut s = text.to_owned();
    for _ in 0..=rng.index(4) {
        let at = |rng: &mut Rng, s: &str| {
            let mut i = rng.index(s.len() + 1);
            while !s.is_char_boundary(i) {
                i -= 1;
            }
            i
        };
        let a = at(rng, &s);
        let b = at(rng, &s);
        let (lo, hi) = (a.min(b), a.max(b).min(a.min(b) + 64));
        let hi = (lo..=hi).rev().find(|&i| s.is_char_boundary(i)).unwrap_or(lo);
        match rng.index(5) {
            0 | 1 => s.insert_str(a, tokens[rng.index(tokens.len())]),
            2 => s.replace_range(lo..hi, ""),
            3 => {
                let span = s[lo..hi].to_owned();
                s.insert_str(hi, &span);
            }
            _ => {
                let span = s[lo..hi].to_owned();
                s.insert_str(hi, &span.repeat(1 + rng.index(50)));
            }
        }
    }
    s
}

const TEMPLATES: &[&str] = &[
    "{{ .Namespace }}\n{{ toYaml .ConfigData | nindent 2 }}",
    "{{ range $k, $v := .Labels }}{{ $k }}={{ $v | quote }}\n{{ end }}",
    "{{ $s := \"ab\" }}{{ range until 40 }}{{ $s = cat $s $s }}{{ end }}{{ len $s }}",
    "{{ $l := list 1 }}{{ range until 40 }}{{ $l = concat $l $l }}{{ end }}{{ len $l }}",
    "{{ $d := dict }}{{ range until 3000 }}{{ $d = dict \"a\" $d }}{{ end }}{{ hash $d }}{{ toYaml $d }}",
    "{{ $j := fromJson (printf \"%s1%s\" (repeat 5000 \"[\") (repeat 5000 \"]\")) }}{{ toJson $j }}{{ stringify $j }}",
    "{{ define \"r\" }}{{ template \"r\" . }}{{ end }}{{ template \"r\" . }}",
    "{{ range $i := until 100000 }}{{ $i }}{{ end }}",
    "{{ join \",\" (list \"a\" \"b\") }}{{ repeat 3 \"x\" }}{{ indent 4 \"y\" }}{{ replace \"a\" \"bb\" \"aaa\" }}",
    "{{ if .Manifests }}{{ .Manifests.x | default \"none\" }}{{ else }}{{ printf \"%v\" . }}{{ end }}",
    "{{ \"{{\" }} .Workload {{ \"}}\" }}",
];

const TEMPLATE_TOKENS: &[&str] = &[
    "{{",
    "}}",
    "{{ end }}",
    "{{ range until 1000 }}",
    "{{ if . }}",
    "$x",
    " := ",
    " = ",
    "cat $s $s",
    "(list . .)",
    "dict \"a\" ",
    "toYaml ",
    "hash ",
    "toJson ",
    "fromJson ",
    "repeat 100000 ",
    "{{ template \"r\" . }}",
    "{{ define \"r\" }}",
    "(",
    ")",
    "|",
    "\"",
    "printf \"%99999d\" 1",
    "nindent 100 ",
    "join \",\" ",
    "concat ",
    "append ",
    "deepCopy ",
    "merge ",
    ".ConfigData",
];

#[test]
fn templates_stay_within_their_limits() {
    let limits = Limits {
        max_steps: 200_000,
        max_output: 1 << 20,
        max_alloc: 8 << 20,
        max_data_depth: 200,
        max_depth: 1_000,
    };
    let engine = Engine::new().with_limits(limits.clone());
    let data = TemplateData {
        namespace: "dev-ct-app".into(),
        workload: "app".into(),
        ..TemplateData::default()
    }
    .to_value();
    let mut rng = Rng(0x5eed_cafe_f00d_0001);
    let mut cases: Vec<String> = TEMPLATES.iter().map(|t| (*t).to_owned()).collect();
    for _ in 0..iterations(1_500) {
        let seed = TEMPLATES[rng.index(TEMPLATES.len())];
        cases.push(mutate(&mut rng, seed, TEMPLATE_TOKENS));
    }
    for (i, text) in cases.iter().enumerate() {
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let Ok(compiled) = engine.compile("template", text) else {
                return;
            };
            if let Ok(out) = engine.render(&compiled, &data) {
                assert!(
                    out.len() <= limits.max_output,
                    "output of {} bytes passed the limit",
                    out.len()
                );
            }
        }));
        assert!(result.is_ok(), "case {i} panicked: {text:?}");
    }
}

fn seed_documents() -> Vec<String> {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/control-plane");
    let mut docs = Vec::new();
    let mut stack = vec![std::path::PathBuf::from(root)];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut entries: Vec<_> = entries.flatten().map(|e| e.path()).collect();
        entries.sort();
        for path in entries {
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "yaml")
                && let Ok(text) = std::fs::read_to_string(&path)
            {
                docs.push(text);
            }
        }
    }
    docs.sort();
    docs
}

const YAML_TOKENS: &[&str] = &[
    "[",
    "]",
    "{",
    "}",
    ", ",
    ": ",
    "- ",
    "\n",
    "\n  ",
    "&a ",
    "*a",
    "<<: *a\n",
    "---\n",
    "%YAML 1.2\n---\n",
    "\"",
    "'",
    "#",
    "|\n  ",
    "? ",
    "!!str ",
    "\t",
    "null",
    "~",
    "\u{1b}",
    "key: value\n",
];

#[test]
fn the_loader_stays_within_its_limits() {
    let seeds = seed_documents();
    assert!(seeds.len() > 10, "the examples are the seeds");
    let mut rng = Rng(0x5eed_cafe_f00d_0002);
    let mut cases = seeds.clone();
    cases.push(format!("{}{}", "[".repeat(100_000), "]".repeat(100_000)));
    cases.push(format!("a: {}1{}", "{b: ".repeat(50_000), "}".repeat(50_000)));
    let bomb = (1..8).fold(
        String::from("a0: &a0 [x, x, x, x, x, x, x, x, x]\n"),
        |mut s, i| {
            s.push_str(&format!(
                "a{i}: &a{i} [{}]\n",
                vec![format!("*a{}", i - 1); 9].join(", ")
            ));
            s
        },
    );
    cases.push(bomb);
    // A block scalar that ends the input without a line break once panicked the parser.
    cases.push("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\ndata:\n  a: |\n    x".to_owned());
    for _ in 0..iterations(600) {
        let seed = &seeds[rng.index(seeds.len())];
        cases.push(mutate(&mut rng, seed, YAML_TOKENS));
    }
    let hostile = seeds.len()..seeds.len() + 3;
    for (i, text) in cases.iter().enumerate() {
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let tree = SourceTree::new("fuzz", vec![SourceFile::new("f.yaml", text.as_bytes().to_vec())]);
            let mut diagnostics = Diagnostics::new();
            kalypso_core::load::load_tree(&tree, &mut diagnostics);
            diagnostics
        }));
        let Ok(diagnostics) = result else {
            panic!("case {i} panicked: {text:?}");
        };
        if hostile.contains(&i) {
            assert!(
                diagnostics.errors().any(|d| d.code == Code::YamlLimit),
                "case {i} passed the YAML limits: {diagnostics:?}"
            );
        }
    }
}
