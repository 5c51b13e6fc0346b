//! The two kinds of manifests kalypso writes, and their JSON.
//!
//! **A cluster type's artifact** is what `flux push artifact` pushes (`fluxcd/pkg/oci`
//! `Client.Push`): an OCI image manifest whose config has media type
//! `application/vnd.cncf.flux.config.v1+json` (an image config with `created` and the layer's
//! `diff_id`) and whose one layer is the gzipped tarball
//! (`application/vnd.cncf.flux.content.v1.tar+gzip`); the manifest's annotations say where it
//! comes from (`org.opencontainers.image.source`, `.revision` as `<branch>@sha1:<commit>`,
//! `.created`). Flux's source-controller resolves the tag to the manifest's digest (its
//! revision is `<tag>@sha256:<digest>`), takes the first layer and extracts it. kalypso adds
//! its own annotations under `io.kalypso.scheduler.`: the environment, the cluster type, the
//! promoted control-plane commit (`Promoted_Commit_Id`), the `main` commit rendered, and the
//! content id: a digest of the artifact's paths and git blob ids, which says whether a new
//! render changed anything without building the archive.
//!
//! **The environment's index** (repository `PATH`, the GitOps repository's own, tagged like
//! the artifacts) lists the cluster types delivered and each one's manifest, layer and content
//! id, in a config blob of media type `application/vnd.kalypso.environment.v1+json`, with no
//! layer; its annotations carry the same provenance and `io.kalypso.scheduler.parent`, the
//! index it replaced. It is what `plan --against`, the hub and the next delivery read: one
//! manifest and one small blob tell what every cluster type runs, and the chain of parents is
//! the environment's delivery history, as a branch's first parents are in git. Flux never
//! reads it.
//!
//! Every JSON document is written as Go's `encoding/json` writes these structures: fields in
//! the order of the Go types, maps with sorted keys, no spaces, so that the same inputs give
//! the same bytes and digests.

use std::collections::BTreeMap;

use base64::Engine as _;
use serde::{Deserialize, Serialize};

use crate::client::MANIFEST_MEDIA_TYPE;
use crate::digest::Digest;

/// The layer media type of Flux artifacts (`CanonicalContentMediaType`).
pub const CONTENT_MEDIA_TYPE: &str = "application/vnd.cncf.flux.content.v1.tar+gzip";
/// The config media type of Flux artifacts (`CanonicalConfigMediaType`).
pub const CONFIG_MEDIA_TYPE: &str = "application/vnd.cncf.flux.config.v1+json";
/// The config media type of kalypso's environment index.
pub const INDEX_MEDIA_TYPE: &str = "application/vnd.kalypso.environment.v1+json";

/// Where an artifact's content comes from (the control plane).
pub const SOURCE: &str = "org.opencontainers.image.source";
/// The control-plane revision it was rendered from: `<branch>@sha1:<commit>`.
pub const REVISION: &str = "org.opencontainers.image.revision";
/// When that revision was committed (RFC 3339): fixed by the input, not by the clock.
pub const CREATED: &str = "org.opencontainers.image.created";
/// The environment.
pub const ENVIRONMENT: &str = "io.kalypso.scheduler.environment";
/// The cluster type (artifacts only).
pub const CLUSTER_TYPE: &str = "io.kalypso.scheduler.cluster-type";
/// The control-plane `main` commit promoted to the environment (`Promoted_Commit_Id`).
pub const PROMOTED_COMMIT: &str = "io.kalypso.scheduler.promoted-commit";
/// The control-plane `main` commit rendered.
pub const MAIN_COMMIT: &str = "io.kalypso.scheduler.main-commit";
/// The content id of an artifact (see [`crate::deliver`]).
pub const CONTENT: &str = "io.kalypso.scheduler.content";
/// The index an index replaced (indexes only).
pub const PARENT: &str = "io.kalypso.scheduler.parent";

/// The version of the index's config; another version is read as no index at all.
pub const INDEX_FORMAT: u32 = 1;

/// An OCI content descriptor (Go's `v1.Descriptor` field order).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Descriptor {
    /// The content's media type.
    pub media_type: String,
    /// Its size in bytes.
    pub size: u64,
    /// Its digest.
    pub digest: Digest,
}

/// An OCI image manifest (Go's `v1.Manifest` field order).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    /// Always 2.
    pub schema_version: u32,
    /// [`MANIFEST_MEDIA_TYPE`].
    #[serde(default)]
    pub media_type: Option<String>,
    /// The config blob.
    pub config: Descriptor,
    /// The layers.
    #[serde(default)]
    pub layers: Vec<Descriptor>,
    /// Annotations.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

impl Manifest {
    /// A manifest of `config` and `layers`.
    pub fn new(
        config: Descriptor,
        layers: Vec<Descriptor>,
        annotations: BTreeMap<String, String>,
    ) -> Manifest {
        Manifest {
            schema_version: 2,
            media_type: Some(MANIFEST_MEDIA_TYPE.to_owned()),
            config,
            layers,
            annotations,
        }
    }

    /// The JSON bytes (compact, as Go writes them).
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Parses a manifest's bytes.
    pub fn parse(bytes: &[u8]) -> Result<Manifest, String> {
        let manifest: Manifest =
            serde_json::from_slice(bytes).map_err(|e| format!("not an OCI image manifest: {e}"))?;
        if manifest.schema_version != 2 {
            return Err(format!("schema version {} (expected 2)", manifest.schema_version));
        }
        Ok(manifest)
    }

    /// An annotation.
    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.annotations.get(key).map(String::as_str)
    }
}

/// The config of a Flux artifact: an OCI image config as go-containerregistry's
/// `ConfigFile` writes it for `flux push artifact` (empty platform, `created`, one history
/// entry of the appended layer, the layer's `diff_id`).
#[derive(Serialize)]
struct FluxConfig<'a> {
    architecture: &'a str,
    created: &'a str,
    history: [History; 1],
    os: &'a str,
    rootfs: RootFs<'a>,
    config: Empty,
}

#[derive(Serialize)]
struct History {
    created: &'static str,
}

#[derive(Serialize)]
struct RootFs<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    diff_ids: [&'a Digest; 1],
}

#[derive(Serialize)]
struct Empty {}

/// The config blob of a Flux artifact whose one layer has `diff_id`, created at `created`.
pub fn flux_config(created: &str, diff_id: &Digest) -> Vec<u8> {
    serde_json::to_vec(&FluxConfig {
        architecture: "",
        created,
        // go-containerregistry's zero time: `mutate.Append` records an empty history entry.
        history: [History {
            created: "0001-01-01T00:00:00Z",
        }],
        os: "",
        rootfs: RootFs {
            kind: "layers",
            diff_ids: [diff_id],
        },
        config: Empty {},
    })
    .unwrap_or_default()
}

/// One cluster type's entry in the index.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    /// The artifact's manifest in `PATH/<cluster type>`.
    pub manifest: Digest,
    /// Its layer.
    pub layer: Digest,
    /// The layer's size.
    pub layer_size: u64,
    /// The content id of its files.
    pub content: String,
    /// The artifact's deployment-target folders, so that where each target is placed is read
    /// from the index alone (not the layers): their sorted names joined by newlines, gzipped
    /// and base64-encoded ([`encode_folders`]; about a seventh of the plain list, which is
    /// megabytes at 100,000 deployment targets). Absent in indexes written before it was
    /// recorded, which are then read the long way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployment_targets: Option<String>,
}

/// [`Entry::deployment_targets`] of `names` (sorted, unique).
pub fn encode_folders(names: &[String]) -> String {
    use std::io::Write as _;
    // No file name and time 0: the same names always give the same bytes.
    let mut gzip = flate2::GzBuilder::new()
        .mtime(0)
        .operating_system(255)
        .write(Vec::new(), flate2::Compression::best());
    let written = gzip.write_all(names.join("\n").as_bytes());
    let bytes = written.and_then(|()| gzip.finish()).unwrap_or_default();
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// The names [`encode_folders`] encoded; `None` when `text` is not such an encoding.
pub fn decode_folders(text: &str) -> Option<Vec<String>> {
    let names = decode_folder_list(text)?;
    Some(folder_names(&names).map(str::to_owned).collect())
}

/// The newline-separated names [`encode_folders`] encoded, as one text (see
/// [`folder_names`]); `None` when `text` is not such an encoding.
fn decode_folder_list(text: &str) -> Option<String> {
    use std::io::Read as _;
    let bytes = base64::engine::general_purpose::STANDARD.decode(text).ok()?;
    let mut names = String::new();
    // At most 64 MiB of names: a damaged or hostile index cannot exhaust memory.
    flate2::read::GzDecoder::new(&bytes[..])
        .take(64 << 20)
        .read_to_string(&mut names)
        .ok()?;
    Some(names)
}

/// The names of a list [`Index::folder_lists`] gives.
pub fn folder_names(list: &str) -> impl Iterator<Item = &str> {
    let names = if list.is_empty() { 0 } else { usize::MAX };
    list.split('\n').take(names)
}

/// The environment's index: the config blob of the index manifest.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Index {
    /// [`INDEX_FORMAT`].
    pub format: u32,
    /// The environment.
    pub environment: String,
    /// The control-plane revision of the delivery that wrote it.
    pub revision: String,
    /// The promoted control-plane commit every artifact carries, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub promoted_commit: Option<String>,
    /// Each cluster type delivered, by name.
    pub cluster_types: BTreeMap<String, Entry>,
}

impl Index {
    /// Every (cluster type, deployment target) folder of the environment, when every entry
    /// records its folders ([`Entry::deployment_targets`]); `None` for an index written before
    /// they were recorded, or with a record that does not decode (the layers then say).
    pub fn folders(&self) -> Option<Vec<(String, String)>> {
        let lists = self.folder_lists()?;
        let folders = lists
            .iter()
            .flat_map(|(ct, list)| folder_names(list).map(move |dt| ((*ct).to_owned(), dt.to_owned())));
        Some(folders.collect())
    }

    /// [`Index::folders`] as each cluster type's list of folders, decoded (in parallel) but
    /// not split into a string per folder: read them with [`folder_names`].
    pub fn folder_lists(&self) -> Option<Vec<(&str, String)>> {
        use rayon::prelude::*;
        self.cluster_types
            .par_iter()
            .map(|(ct, entry)| {
                Some((
                    ct.as_str(),
                    decode_folder_list(entry.deployment_targets.as_deref()?)?,
                ))
            })
            .collect()
    }

    /// The JSON bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Parses an index config; `Err` for another format or broken JSON.
    pub fn parse(bytes: &[u8]) -> Result<Index, String> {
        #[derive(Deserialize)]
        struct Format {
            format: u32,
        }
        let format: Format =
            serde_json::from_slice(bytes).map_err(|e| format!("not a kalypso environment index: {e}"))?;
        if format.format != INDEX_FORMAT {
            return Err(format!(
                "environment index format {} (this kalypso reads {INDEX_FORMAT})",
                format.format
            ));
        }
        serde_json::from_slice(bytes).map_err(|e| format!("not a kalypso environment index: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifests_are_written_as_go_writes_them() {
        let d = |s: &str| Digest::of(s.as_bytes());
        let manifest = Manifest::new(
            Descriptor {
                media_type: CONFIG_MEDIA_TYPE.into(),
                size: 233,
                digest: d("config"),
            },
            vec![Descriptor {
                media_type: CONTENT_MEDIA_TYPE.into(),
                size: 1234,
                digest: d("layer"),
            }],
            BTreeMap::from([
                (REVISION.to_owned(), "dev@sha1:abc".to_owned()),
                (CREATED.to_owned(), "2026-01-02T03:04:05Z".to_owned()),
                (SOURCE.to_owned(), "https://g/cp".to_owned()),
            ]),
        );
        let text = String::from_utf8(manifest.to_bytes()).unwrap();
        assert_eq!(
            text,
            format!(
                "{{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\",\
                 \"config\":{{\"mediaType\":\"application/vnd.cncf.flux.config.v1+json\",\"size\":233,\"digest\":\"{}\"}},\
                 \"layers\":[{{\"mediaType\":\"application/vnd.cncf.flux.content.v1.tar+gzip\",\"size\":1234,\"digest\":\"{}\"}}],\
                 \"annotations\":{{\"org.opencontainers.image.created\":\"2026-01-02T03:04:05Z\",\
                 \"org.opencontainers.image.revision\":\"dev@sha1:abc\",\"org.opencontainers.image.source\":\"https://g/cp\"}}}}",
                d("config"),
                d("layer")
            )
        );
        assert_eq!(Manifest::parse(text.as_bytes()).unwrap(), manifest);
        assert!(Manifest::parse(b"{\"schemaVersion\":1,\"config\":{}}").is_err());
    }

    #[test]
    fn flux_configs_record_the_layer() {
        let diff = Digest::of(b"tar");
        let text = String::from_utf8(flux_config("2026-01-02T03:04:05Z", &diff)).unwrap();
        assert_eq!(
            text,
            format!(
                "{{\"architecture\":\"\",\"created\":\"2026-01-02T03:04:05Z\",\"history\":[{{\"created\":\"0001-01-01T00:00:00Z\"}}],\
                 \"os\":\"\",\"rootfs\":{{\"type\":\"layers\",\"diff_ids\":[\"{diff}\"]}},\"config\":{{}}}}"
            )
        );
    }

    #[test]
    fn indexes_round_trip_and_refuse_other_formats() {
        let index = Index {
            format: INDEX_FORMAT,
            environment: "dev".into(),
            revision: "dev@sha1:abc".into(),
            promoted_commit: Some("def".into()),
            cluster_types: BTreeMap::from([(
                "drone".to_owned(),
                Entry {
                    manifest: Digest::of(b"m"),
                    layer: Digest::of(b"l"),
                    layer_size: 3,
                    content: "c".into(),
                    deployment_targets: Some(encode_folders(&["app-dev".into(), "app-prod".into()])),
                },
            )]),
        };
        assert_eq!(Index::parse(&index.to_bytes()).unwrap(), index);
        assert_eq!(
            index.folders().unwrap(),
            [
                ("drone".to_owned(), "app-dev".to_owned()),
                ("drone".to_owned(), "app-prod".to_owned())
            ]
        );
        assert_eq!(decode_folders(&encode_folders(&[])), Some(Vec::new()));
        assert_eq!(decode_folders("not base64!"), None);
        let other = String::from_utf8(index.to_bytes())
            .unwrap()
            .replace("\"format\":1", "\"format\":2");
        assert!(Index::parse(other.as_bytes()).unwrap_err().contains("format 2"));
        assert!(Index::parse(b"[]").is_err());
    }

    #[test]
    fn folder_lists_hold_the_folders_by_cluster_type() {
        let entry = |names: &[&str]| Entry {
            manifest: Digest::of(b"m"),
            layer: Digest::of(b"l"),
            layer_size: 3,
            content: "c".into(),
            deployment_targets: Some(encode_folders(
                &names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>(),
            )),
        };
        let mut index = Index {
            format: INDEX_FORMAT,
            environment: "dev".into(),
            revision: "dev@sha1:abc".into(),
            promoted_commit: None,
            cluster_types: BTreeMap::from([
                ("drone".to_owned(), entry(&["app-dev", "app-prod"])),
                ("empty".to_owned(), entry(&[])),
                ("large".to_owned(), entry(&["app-dev"])),
            ]),
        };
        let lists = index.folder_lists().unwrap();
        let from_lists: Vec<(String, String)> = lists
            .iter()
            .flat_map(|(ct, list)| folder_names(list).map(move |dt| ((*ct).to_owned(), dt.to_owned())))
            .collect();
        assert_eq!(Some(from_lists), index.folders());
        assert_eq!(
            lists
                .iter()
                .map(|(ct, list)| (*ct, folder_names(list).count()))
                .collect::<Vec<_>>(),
            [("drone", 2), ("empty", 0), ("large", 1)]
        );
        // One entry without its folders, or with a damaged record: the layers must say.
        index.cluster_types.get_mut("empty").unwrap().deployment_targets = Some("not base64!".into());
        assert_eq!(index.folder_lists(), None);
        index.cluster_types.get_mut("empty").unwrap().deployment_targets = None;
        assert_eq!(index.folder_lists(), None);
        assert_eq!(index.folders(), None);
    }
}
