//! `kalypso crds`: the CustomResourceDefinitions of every `scheduler.kalypso.io/v1alpha1`
//! kind, generated from the Rust types, as YAML on standard output (or into a folder, one
//! file per CRD as the Helm chart keeps them).

use std::process::ExitCode;

use anyhow::{Context, Result};

use crate::settings::{Crds, Global};

pub(crate) fn crds(settings: &Crds, global: &Global) -> Result<ExitCode> {
    use kalypso_operator::crds;
    match &settings.out {
        None => print!("{}", crds::to_yaml()?),
        Some(dir) => {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            let definitions = crds::definitions();
            for crd in &definitions {
                let path = dir.join(crds::chart_file_name(crd));
                std::fs::write(&path, crds::crd_to_yaml(crd)?)
                    .with_context(|| format!("writing {}", path.display()))?;
            }
            if !global.quiet {
                eprintln!("wrote {} CRDs into {}", definitions.len(), dir.display());
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
