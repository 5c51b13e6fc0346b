//! What placement costs in the pure pipeline: loads a control-plane folder (as `kalypso render`
//! reads it: `main/`, `<env>/`, `workloads/<registration>/`), then times scheduling and a full
//! in-memory render (the core's driver from the loaded namespace, into memory), median of 5, printing the number of assignments. `bench/placement.py`
//! runs it on the B fleet with and without placement fields.
//!
//! Usage: `cargo run --release -p kalypso-core --example placement_bench -- <DIR> <ENV>`

use std::path::Path;
use std::sync::Mutex;
use std::time::Instant;

use kalypso_core::run::{Collect, Observer, Request, RunContext, Stage};
use kalypso_core::source::{SourceFile, SourceTree};
use kalypso_core::{Diagnostics, Inputs};
use kalypso_template::Engine;

/// When scheduling ended (the first step after it began).
struct ScheduledAt(Mutex<Option<Instant>>);

impl Observer for ScheduledAt {
    fn stage(&self, stage: Stage) {
        if stage == Stage::Preparing
            && let Ok(mut at) = self.0.lock()
        {
            at.get_or_insert_with(Instant::now);
        }
    }
}

fn tree(root: &Path, label: &str) -> SourceTree {
    fn walk(dir: &Path, root: &Path, files: &mut Vec<SourceFile>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, root, files);
            } else if let Ok(bytes) = std::fs::read(&path) {
                let relative = path
                    .strip_prefix(root)
                    .unwrap_or(&path)
                    .to_string_lossy()
                    .into_owned();
                files.push(SourceFile::new(relative, bytes));
            }
        }
    }
    let mut files = Vec::new();
    walk(root, root, &mut files);
    SourceTree::new(label, files)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (Some(dir), Some(env)) = (args.get(1), args.get(2)) else {
        eprintln!("usage: placement_bench <DIR> <ENV>");
        std::process::exit(2);
    };
    let dir = Path::new(dir);
    let workloads = std::fs::read_dir(dir.join("workloads"))
        .map(|entries| {
            entries
                .flatten()
                .map(|e| {
                    let name = e.file_name().to_string_lossy().into_owned();
                    (name.clone(), tree(&e.path(), &format!("workloads/{name}")))
                })
                .collect()
        })
        .unwrap_or_default();
    let inputs = Inputs {
        main: tree(&dir.join("main"), "main"),
        environment: tree(&dir.join(env), env),
        workloads,
        ..Inputs::default()
    };
    let engine = Engine::new();
    let mut schedule_times = Vec::new();
    let mut total_times = Vec::new();
    let mut assignments = 0;
    for _ in 0..5 {
        let mut diagnostics = Diagnostics::new();
        let namespace = kalypso_core::load_namespace(env, &inputs, &mut diagnostics);
        if diagnostics.has_errors() {
            eprintln!("{diagnostics}");
            std::process::exit(1);
        }
        // The driver from the loaded namespace; scheduling ends when preparing starts.
        let started = Instant::now();
        let scheduled = ScheduledAt(Mutex::new(None));
        let context = RunContext {
            observer: &scheduled,
            ..RunContext::new(&engine)
        };
        let (run, _) = kalypso_core::run::run(Request::loaded(namespace), &context, &mut Collect::default());
        let total = started.elapsed();
        if run.diagnostics.has_errors() {
            eprintln!("{}", run.diagnostics);
            std::process::exit(1);
        }
        assignments = run.rendered.records.len();
        let scheduled = scheduled
            .0
            .lock()
            .ok()
            .and_then(|at| *at)
            .unwrap_or(started + total);
        schedule_times.push(scheduled.duration_since(started).as_secs_f64());
        total_times.push(total.as_secs_f64());
    }
    schedule_times.sort_by(f64::total_cmp);
    total_times.sort_by(f64::total_cmp);
    println!(
        "assignments {assignments} schedule {:.4} s schedule+render {:.4} s",
        schedule_times[2], total_times[2]
    );
}
