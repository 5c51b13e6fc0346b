//! `kalypso crds`: the CustomResourceDefinitions of every `scheduler.kalypso.io/v1alpha1`
//! kind, generated from the Rust types, as YAML on standard output (or into a folder, one
//! file per CRD as the Helm chart keeps them).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::Args;

use crate::GlobalArgs;

#[derive(Debug, Args)]
pub(crate) struct CrdsArgs {
    /// Write one file per CRD (`<plural>.yaml`) into this folder instead of printing them.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
}

pub(crate) fn crds(args: &CrdsArgs, global: &GlobalArgs) -> Result<ExitCode> {
    use kalypso_operator::crds;
    match &args.out {
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
