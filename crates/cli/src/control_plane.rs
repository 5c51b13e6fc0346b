//! The directory form of a control plane: `<DIR>/main/` (main branch content),
//! `<DIR>/<env>/` (each environment branch), `<DIR>/workloads/<registration>/` (the files
//! under each WorkloadRegistration's `spec.workload.path`, path prefix stripped).

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use kalypso_api::{EnvironmentSpec, Kind};
use kalypso_core::model::AnyObject;
use kalypso_core::names::dns_label_error;
use kalypso_core::{Code, Diagnostic, Diagnostics, Inputs, Origin};
use rayon::prelude::*;

use crate::fsio::read_source_tree;

/// The folder of the main branch.
pub const MAIN: &str = "main";
/// The folder of the workload definitions.
pub const WORKLOADS: &str = "workloads";

/// Fails unless `dir` is a folder that can be a control plane.
fn check_control_plane(dir: &Path) -> Result<()> {
    if !dir.exists() {
        bail!("no control-plane folder at {}", dir.display());
    }
    if !dir.is_dir() {
        bail!(
            "{} is not a folder; give the control-plane folder (the one holding main/ and one folder per environment)",
            dir.display()
        );
    }
    Ok(())
}

/// Reads the trees environment `env` is built from.
pub fn read_inputs(dir: &Path, env: &str) -> Result<Inputs> {
    check_control_plane(dir)?;
    // The name is a folder's: one plain path segment (whether it is a valid name is said
    // below, against the file or folder that gives it).
    if env.is_empty() || env.starts_with('.') || env.contains(['/', '\\', '\0']) {
        bail!(
            "environment name {env:?} is not the name of a folder of {}: an environment is a folder beside \
             main/ (its branch in git)",
            dir.display()
        );
    }
    if env == MAIN || env == WORKLOADS {
        bail!(
            "{env:?} is not an environment: {dir}/{env} holds {}",
            if env == MAIN {
                "the main branch"
            } else {
                "workload definitions"
            },
            dir = dir.display()
        );
    }
    let env_dir = dir.join(env);
    if !env_dir.is_dir() {
        let known = discover_environments(dir).unwrap_or_default();
        let hint = if known.is_empty() {
            String::new()
        } else {
            format!(" (environments found: {})", known.join(", "))
        };
        bail!("no folder for environment {env:?} at {}{hint}", env_dir.display());
    }
    let main_dir = dir.join(MAIN);
    if !main_dir.is_dir() {
        bail!(
            "no main branch folder at {}; it holds the Templates and WorkloadRegistrations",
            main_dir.display()
        );
    }
    let mut inputs = Inputs {
        main: read_source_tree(&main_dir, MAIN)?,
        environment: read_source_tree(&env_dir, env)?,
        workloads: Default::default(),
        ..Inputs::default()
    };
    if let Some(note) = invalid_environment_name(&inputs, env) {
        inputs.notes.push(note);
    }
    let workloads_dir = dir.join(WORKLOADS);
    if workloads_dir.is_dir() {
        let entries = fs::read_dir(&workloads_dir)
            .with_context(|| format!("cannot read {}", workloads_dir.display()))?;
        let mut folders = Vec::new();
        for entry in entries {
            let entry = entry.with_context(|| format!("cannot read {}", workloads_dir.display()))?;
            if entry.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                folders.push((entry.file_name().to_string_lossy().into_owned(), entry.path()));
            }
        }
        // A fleet has hundreds of small workload folders: read them in parallel.
        inputs.workloads = folders
            .into_par_iter()
            .map(|(name, path)| {
                let label = format!("{WORKLOADS}/{name}");
                read_source_tree(&path, &label).map(|tree| (name, tree))
            })
            .collect::<Result<_, _>>()?;
    }
    Ok(inputs)
}

/// The error for an environment whose name (its folder's) is not a namespace name, unless
/// an Environment object of that name declares it: the check of that object's name then
/// reports it, at the object's file and field.
fn invalid_environment_name(inputs: &Inputs, env: &str) -> Option<Diagnostic> {
    let problem = dns_label_error(env)?;
    let mut scratch = Diagnostics::new();
    let declared = [&inputs.main, &inputs.environment].into_iter().any(|tree| {
        kalypso_core::load::load_tree(tree, &mut scratch)
            .iter()
            .any(|o| matches!(o, AnyObject::Environment(e) if e.meta.name == env))
    });
    (!declared).then(|| {
        Diagnostic::error(
            Code::InvalidName,
            format!(
                "the folder {env}/ holds an environment, whose name is the name of its namespace, which \
                 {problem}; rename the folder (and its branch in git)"
            ),
        )
        .at(&Origin::new(format!("{env}/"), 0))
        .on(Kind::Environment, env)
    })
}

/// `path` made absolute with symbolic links resolved, also when it does not exist yet (its
/// nearest existing ancestor is resolved).
fn resolved(path: &Path) -> Result<PathBuf> {
    let absolute = std::path::absolute(path).with_context(|| format!("cannot resolve {}", path.display()))?;
    let mut existing = absolute.as_path();
    let mut rest = Vec::new();
    while !existing.exists() {
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_owned());
                existing = parent;
            }
            _ => break,
        }
    }
    let mut out = fs::canonicalize(existing).unwrap_or_else(|_| existing.to_owned());
    out.extend(rest.iter().rev());
    Ok(out)
}

/// Fails if writing a GitOps tree into `out` could destroy the control plane at `dir`: if
/// `out` is the control-plane folder or one that holds it (the update rules delete every
/// folder that is not a cluster type), or lies in its main branch, workload or environment
/// folders.
pub fn check_output(dir: &Path, env: &str, out: &Path) -> Result<()> {
    let (dir_abs, out_abs) = (resolved(dir)?, resolved(out)?);
    if dir_abs == out_abs {
        bail!(
            "refusing to write into {}: it is the control-plane folder itself; choose an output folder \
             outside the control plane",
            out.display()
        );
    }
    if dir_abs.starts_with(&out_abs) {
        bail!(
            "refusing to write into {}: it holds the control plane {}, which the GitOps tree's update \
             rules would delete; choose an output folder outside the control plane",
            out.display(),
            dir.display()
        );
    }
    // Outside the control-plane folder there is nothing to protect (and no need to read its
    // main branch for the environments it declares).
    if !out_abs.starts_with(&dir_abs) {
        return Ok(());
    }
    let mut protected = vec![MAIN.to_owned(), WORKLOADS.to_owned(), env.to_owned()];
    protected.extend(discover_environments(dir).unwrap_or_default());
    if let Some(folder) = protected.iter().find(|p| out_abs.starts_with(dir_abs.join(p))) {
        bail!(
            "refusing to write into {}: it is inside the control plane's {folder}/ folder, which rendering \
             would overwrite; choose an output folder outside the control plane",
            out.display()
        );
    }
    Ok(())
}

/// Fails if `out` is inside the working copy `workdir` of a control-plane clone, or holds it:
/// the GitOps tree's update rules would delete its files.
pub fn check_outside_clone(workdir: &Path, out: &Path) -> Result<()> {
    let (dir_abs, out_abs) = (resolved(workdir)?, resolved(out)?);
    if out_abs.starts_with(&dir_abs) || dir_abs.starts_with(&out_abs) {
        bail!(
            "refusing to write into {}: the control plane's working copy {} is there, and rendering would \
             overwrite it; choose an output folder outside the clone",
            out.display(),
            workdir.display()
        );
    }
    Ok(())
}

/// The environments of a control-plane folder: the branches named by `Environment` objects
/// of the main branch that have a folder, or else every folder (other than `main` and
/// `workloads`) that holds a ClusterType.
pub fn discover_environments(dir: &Path) -> Result<Vec<String>> {
    check_control_plane(dir)?;
    let main = read_source_tree(&dir.join(MAIN), MAIN).unwrap_or_default();
    let mut from_objects = Vec::new();
    for file in main
        .files()
        .iter()
        .filter(|f| f.path.ends_with(".yaml") || f.path.ends_with(".yml"))
    {
        let text = String::from_utf8_lossy(&file.content);
        for doc in text.split("\n---") {
            #[derive(serde::Deserialize)]
            struct EnvironmentObject {
                kind: String,
                metadata: kalypso_api::ObjectMeta,
                spec: EnvironmentSpec,
            }
            if let Ok(o) = serde_yaml_ng::from_str::<EnvironmentObject>(doc)
                && o.kind == Kind::Environment.name()
            {
                let branch = if o.spec.control_plane.branch.is_empty() {
                    o.metadata.name
                } else {
                    o.spec.control_plane.branch
                };
                if dir.join(&branch).is_dir() && !from_objects.contains(&branch) {
                    from_objects.push(branch);
                }
            }
        }
    }
    if !from_objects.is_empty() {
        from_objects.sort();
        return Ok(from_objects);
    }
    let mut found = Vec::new();
    let entries = fs::read_dir(dir).with_context(|| format!("cannot read {}", dir.display()))?;
    for entry in entries {
        let entry = entry.with_context(|| format!("cannot read {}", dir.display()))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name == MAIN || name == WORKLOADS || name.starts_with('.') || !entry.path().is_dir() {
            continue;
        }
        let tree = read_source_tree(&entry.path(), &name)?;
        let has_cluster_type = tree.files().iter().any(|f| {
            let text = String::from_utf8_lossy(&f.content);
            text.contains("kind: ClusterType") && text.contains(kalypso_api::API_VERSION)
        });
        if has_cluster_type {
            found.push(name);
        }
    }
    found.sort();
    Ok(found)
}
