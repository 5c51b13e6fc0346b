//! Reading an environment back from a registry: its index, the artifacts it lists, and the
//! chain of indexes before it. `plan`/`diff --against oci://…`, the hub and delivery itself
//! read through here.

use std::collections::BTreeMap;

use kalypso_core::tree::{Blob, PROMOTED_COMMIT_PATH, Tree};
use rayon::prelude::*;

use crate::Error;
use crate::artifact::{CONTENT_MEDIA_TYPE, Entry, INDEX_MEDIA_TYPE, Index, Manifest};
use crate::client::{Access, MAX_MANIFEST, Registry};
use crate::digest::Digest;
use crate::reference::{Location, check_tag};

/// The most content read from one layer (Flux's own default cap on an artifact is 100 MiB;
/// this is ten times that, a limit against a hostile registry, not a size to reach).
pub const MAX_LAYER_CONTENT: u64 = 1 << 30;
/// The largest layer downloaded.
pub const MAX_LAYER: u64 = 1 << 30;

/// The files of an artifact, by path.
pub type Files = BTreeMap<String, Blob>;

/// One index of an environment, as read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    /// The index manifest's digest.
    pub digest: Digest,
    /// The index manifest (its annotations carry the provenance and the parent).
    pub manifest: Manifest,
    /// What it lists.
    pub index: Index,
}

impl Snapshot {
    /// The index this one replaced, if any.
    pub fn parent(&self) -> Option<Digest> {
        self.manifest
            .annotation(crate::artifact::PARENT)
            .and_then(Digest::parse)
    }
}

/// The index `reference` (a tag or a digest) of `location`, if there is one. Something else
/// there (an artifact of another tool) is an error: kalypso never writes over it.
pub fn index(
    registry: &Registry,
    location: &Location,
    reference: &str,
    access: Access,
) -> Result<Option<Snapshot>, Error> {
    if Digest::parse(reference).is_none() {
        check_tag(reference)?;
    }
    let Some((bytes, digest)) = registry.manifest(location, location.path(), reference, access)? else {
        return Ok(None);
    };
    let foreign = |reason: String| Error::Foreign {
        location: location.to_string(),
        reference: reference.to_owned(),
        reason,
    };
    let manifest = Manifest::parse(&bytes).map_err(foreign)?;
    if manifest.config.media_type != INDEX_MEDIA_TYPE {
        return Err(foreign(format!(
            "its config is {:?}, not a kalypso environment index ({INDEX_MEDIA_TYPE})",
            manifest.config.media_type
        )));
    }
    let config = registry.blob(
        location,
        location.path(),
        &manifest.config.digest,
        MAX_MANIFEST,
        access,
    )?;
    let index = Index::parse(&config).map_err(foreign)?;
    Ok(Some(Snapshot {
        digest,
        manifest,
        index,
    }))
}

/// The files of cluster type `cluster_type`'s artifact as `entry` of an index names it.
pub fn layer(
    registry: &Registry,
    location: &Location,
    cluster_type: &str,
    entry: &Entry,
    access: Access,
) -> Result<Files, Error> {
    let repo = location.cluster_type_repository(cluster_type)?;
    let bytes = registry.blob(location, &repo, &entry.layer, MAX_LAYER, access)?;
    crate::archive::read(&bytes, MAX_LAYER_CONTENT).map_err(|e| Error::Corrupt {
        what: format!("the layer {} of {location}/{cluster_type}", entry.layer),
        reason: e.to_string(),
    })
}

/// The files of the artifact tagged `reference` in a cluster type's repository, read from
/// its manifest (for an artifact no index lists). `None` when there is none.
pub fn artifact(
    registry: &Registry,
    location: &Location,
    cluster_type: &str,
    reference: &str,
) -> Result<Option<(Manifest, Files)>, Error> {
    let repo = location.cluster_type_repository(cluster_type)?;
    let Some((bytes, _)) = registry.manifest(location, &repo, reference, Access::Pull)? else {
        return Ok(None);
    };
    let corrupt = |reason: String| Error::Corrupt {
        what: format!("{location}/{cluster_type}:{reference}"),
        reason,
    };
    let manifest = Manifest::parse(&bytes).map_err(corrupt)?;
    let layer = manifest
        .layers
        .iter()
        .find(|l| l.media_type == CONTENT_MEDIA_TYPE)
        .or(manifest.layers.first())
        .ok_or_else(|| corrupt("the manifest has no layer".to_owned()))?
        .clone();
    let bytes = registry.blob(location, &repo, &layer.digest, MAX_LAYER, Access::Pull)?;
    let files = crate::archive::read(&bytes, MAX_LAYER_CONTENT).map_err(|e| corrupt(e.to_string()))?;
    Ok(Some((manifest, files)))
}

/// The environment tagged `tag` of `location` laid out as its git form would hold it: a
/// folder per cluster type with its artifact's files, and `Promoted_Commit_Id` once at the
/// root. `None` when there is no index (nothing delivered yet).
pub fn tree(registry: &Registry, location: &Location, tag: &str) -> Result<Option<(Snapshot, Tree)>, Error> {
    let Some(snapshot) = index(registry, location, tag, Access::Pull)? else {
        return Ok(None);
    };
    let layers: Vec<Result<(String, Files), Error>> = snapshot
        .index
        .cluster_types
        .par_iter()
        .map(|(ct, entry)| Ok((ct.clone(), layer(registry, location, ct, entry, Access::Pull)?)))
        .collect();
    let mut tree = Tree::new();
    for result in layers {
        let (ct, files) = result?;
        for (path, blob) in files {
            if path != PROMOTED_COMMIT_PATH {
                tree.insert(format!("{ct}/{path}"), blob);
            }
        }
    }
    if let Some(promoted) = &snapshot.index.promoted_commit {
        tree.insert(PROMOTED_COMMIT_PATH, Blob::from(promoted.as_bytes()));
    }
    Ok(Some((snapshot, tree)))
}

/// The indexes of `location` from the one tagged `tag` back through their parents, newest
/// first, stopping before the first one `known` says was read already (or after `max`, or
/// at an index the registry no longer has).
pub fn history(
    registry: &Registry,
    location: &Location,
    tag: &str,
    known: &dyn Fn(&Digest) -> bool,
    max: usize,
) -> Result<Vec<Snapshot>, Error> {
    let mut out = Vec::new();
    let Some(head) = index(registry, location, tag, Access::Pull)? else {
        return Ok(out);
    };
    let mut next = Some(head);
    while let Some(snapshot) = next.take() {
        if known(&snapshot.digest) || out.len() >= max {
            break;
        }
        let parent = snapshot.parent();
        out.push(snapshot);
        if let Some(parent) = parent {
            if known(&parent) {
                break;
            }
            next = index(registry, location, parent.as_str(), Access::Pull)?;
        }
    }
    Ok(out)
}
