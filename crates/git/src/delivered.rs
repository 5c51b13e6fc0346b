//! The files of earlier deliveries, so that a sync renders and hashes only the assignments
//! whose inputs changed, in this process or the next one.
//!
//! For every assignment delivered: the fingerprint of its inputs
//! ([`kalypso_core::fingerprint`]) and the git ids of its files. A run given those
//! fingerprints (as its [`RenderMemo`]) does not render the assignments that kept theirs, and the
//! tree builder puts their folders on the branch by id ([`crate::treewrite::Hashed`]),
//! reading nothing. The ids are content addresses, true whatever a branch holds now; what
//! can go wrong is only that an object is missing from a mirror (a GitOps repository new
//! to the environment, a cache rebuilt, a branch rewritten and cleaned by its host), and
//! then the environment is rendered in full ([`crate::repo::StageError::NotDelivered`]).
//!
//! `serve` keeps them in memory between passes; every delivery also writes them to
//! `<cache>/state/<control plane>/<environment>.files` (a compact binary file with a
//! checksum, written to a temporary file and renamed) for the next process. A file written
//! by another binary or with other output settings ([`Fingerprint`]), or damaged, is
//! ignored: that only costs a full render.

use std::io;
use std::path::Path;

use foldhash::HashMap;
use git2::Oid;
use kalypso_core::fingerprint::{Fingerprint as InputFingerprint, digest};
use kalypso_core::pipeline::AssignmentRecord;
use kalypso_core::placement::{CurrentAssignment, current_from_folders};
use kalypso_core::run::RenderMemo;
use kalypso_core::tree::PACKAGE_FILES;

use crate::state::Fingerprint;
use crate::treewrite::{FileIds, Hashed};

/// The first line of the file; another means another layout.
const MAGIC: &[u8] = b"kalypso-delivered-files 1\n";
/// The names an assignment's files can have (the file stores their index).
const NAMES: [&str; 4] = PACKAGE_FILES;

/// One assignment's last delivery: the fingerprint of its inputs and its files' ids.
#[derive(Clone, Debug)]
struct Entry {
    fingerprint: u128,
    files: FileIds,
}

/// The files of an environment's last delivery, by cluster type and deployment target.
#[derive(Debug, Default)]
pub struct DeliveredFiles {
    /// By cluster type, then target (hashed with foldhash, not SipHash: the record is looked
    /// up for every assignment of the fleet, several times a pass).
    assignments: HashMap<String, HashMap<String, Entry>>,
    /// Whether a delivery of this process made them (else they were read from the cache).
    this_process: bool,
}

/// The fingerprints, for a run to skip the assignments that kept theirs.
impl RenderMemo for DeliveredFiles {
    fn holds(&self, cluster_type: &str, target: &str, fingerprint: InputFingerprint) -> bool {
        self.assignments
            .get(cluster_type)
            .and_then(|targets| targets.get(target))
            .is_some_and(|entry| entry.fingerprint == fingerprint)
    }
}

impl DeliveredFiles {
    /// Number of assignments remembered.
    pub fn len(&self) -> usize {
        self.assignments.values().map(HashMap::len).sum()
    }

    /// Whether nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.assignments.values().all(HashMap::is_empty)
    }

    /// The fingerprint of the inputs of an assignment's last delivery.
    pub fn fingerprint(&self, cluster_type: &str, target: &str) -> Option<InputFingerprint> {
        Some(self.assignments.get(cluster_type)?.get(target)?.fingerprint)
    }

    /// The ids of the files of an assignment's last delivery.
    pub fn files(&self, cluster_type: &str, target: &str) -> Option<&[(&'static str, Oid)]> {
        Some(&self.assignments.get(cluster_type)?.get(target)?.files)
    }

    /// Where this process's last delivery placed each deployment target; `None` for files
    /// read from the cache (the GitOps branch is then what says where targets are).
    pub fn placed_by_this_process(&self) -> Option<CurrentAssignment> {
        (self.this_process && !self.is_empty()).then(|| {
            current_from_folders(
                self.assignments
                    .iter()
                    .flat_map(|(ct, targets)| targets.keys().map(move |dt| (ct.as_str(), dt.as_str()))),
            )
        })
    }

    /// The files after delivering `hashed`, rendered from `records`: the packages rendered
    /// by their new ids, the assignments not rendered again and the cluster types held as
    /// they were.
    pub fn after(&self, records: &[AssignmentRecord], hashed: &Hashed<'_>) -> DeliveredFiles {
        let fingerprints: HashMap<(&str, &str), u128> = records
            .iter()
            .map(|r| {
                let a = &r.assignment;
                (
                    (a.cluster_type.as_str(), a.deployment_target.as_str()),
                    r.fingerprint,
                )
            })
            .collect();
        let mut next = DeliveredFiles {
            this_process: true,
            ..DeliveredFiles::default()
        };
        for ((ct, dt), files) in hashed.rendered() {
            if let Some(&fingerprint) = fingerprints.get(&(ct.as_str(), dt.as_str())) {
                next.insert(ct, dt.clone(), fingerprint, files.clone());
            }
        }
        for (ct, dt) in &hashed.content().delivered {
            if let (Some(&fingerprint), Some(files)) =
                (fingerprints.get(&(ct.as_str(), dt.as_str())), self.files(ct, dt))
            {
                next.insert(ct, dt.clone(), fingerprint, files.into());
            }
        }
        // The cluster types the run held keep their folders, and so their record.
        for ct in &hashed.content().held {
            if let Some(targets) = self.assignments.get(ct) {
                next.assignments.insert(ct.clone(), targets.clone());
            }
        }
        next
    }

    /// Records an assignment's delivery (the cluster type's name is copied only for its
    /// first target: a fleet's record holds 93,020 targets of 200 cluster types).
    fn insert(&mut self, cluster_type: &str, target: impl Into<String>, fingerprint: u128, files: FileIds) {
        let (target, entry) = (target.into(), Entry { fingerprint, files });
        if let Some(targets) = self.assignments.get_mut(cluster_type) {
            targets.insert(target, entry);
            return;
        }
        self.assignments
            .entry(cluster_type.to_owned())
            .or_default()
            .insert(target, entry);
    }

    /// The files recorded at `path` by the same binary with the same settings, or none
    /// (missing, another binary's, damaged).
    pub fn load(path: &Path, fingerprint: &Fingerprint) -> DeliveredFiles {
        let bytes = match std::fs::read(path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return DeliveredFiles::default(),
            Err(error) => {
                tracing::warn!(file = %path.display(), %error, "cannot read the files of the last delivery; rendering in full");
                return DeliveredFiles::default();
            }
        };
        decode(&bytes, fingerprint).unwrap_or_else(|| {
            tracing::debug!(file = %path.display(), "the files of the last delivery are another binary's or damaged; rendering in full");
            DeliveredFiles::default()
        })
    }

    /// Records the files at `path` (atomically: a reader sees the old file or the new one).
    pub fn save(&self, path: &Path, fingerprint: &Fingerprint) -> io::Result<()> {
        crate::state::write_atomically(path, &self.encode(fingerprint))
    }

    /// The layout: the magic line, the fingerprint line, then per assignment the cluster
    /// type and target (u16 length + bytes), the fingerprint (16 bytes), the number of
    /// files and per file the index of its name and its id; last, a digest of all before it.
    fn encode(&self, fingerprint: &Fingerprint) -> Vec<u8> {
        let mut out = Vec::with_capacity(MAGIC.len() + self.len() * 128);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(fingerprint.0.as_bytes());
        out.push(b'\n');
        let mut cluster_types: Vec<&String> = self.assignments.keys().collect();
        cluster_types.sort();
        for ct in cluster_types {
            let mut targets: Vec<(&String, &Entry)> = self.assignments[ct].iter().collect();
            targets.sort_by(|a, b| a.0.cmp(b.0));
            for (dt, entry) in targets {
                let names: Option<Vec<u8>> = entry
                    .files
                    .iter()
                    .map(|(name, _)| NAMES.iter().position(|n| n == name).map(|i| i as u8))
                    .collect();
                let (Some(names), Ok(ct_len), Ok(dt_len)) =
                    (names, u16::try_from(ct.len()), u16::try_from(dt.len()))
                else {
                    continue;
                };
                out.extend_from_slice(&ct_len.to_le_bytes());
                out.extend_from_slice(ct.as_bytes());
                out.extend_from_slice(&dt_len.to_le_bytes());
                out.extend_from_slice(dt.as_bytes());
                out.extend_from_slice(&entry.fingerprint.to_le_bytes());
                out.push(names.len() as u8);
                for (index, (_, oid)) in names.iter().zip(entry.files.iter()) {
                    out.push(*index);
                    out.extend_from_slice(oid.as_bytes());
                }
            }
        }
        let sum = digest(&out);
        out.extend_from_slice(&sum.to_le_bytes());
        out
    }
}

/// Reads what [`DeliveredFiles::encode`] wrote; `None` for anything else.
fn decode(bytes: &[u8], fingerprint: &Fingerprint) -> Option<DeliveredFiles> {
    let (body, sum) = bytes.split_at_checked(bytes.len().checked_sub(16)?)?;
    if digest(body).to_le_bytes() != sum {
        return None;
    }
    let rest = body
        .strip_prefix(MAGIC)?
        .strip_prefix(fingerprint.0.as_bytes())?
        .strip_prefix(b"\n")?;
    let mut files = DeliveredFiles::default();
    let mut reader = Reader(rest);
    while !reader.0.is_empty() {
        let ct = reader.str()?;
        let dt = reader.str()?.to_owned();
        let fingerprint = u128::from_le_bytes(reader.take(16)?.try_into().ok()?);
        let count = reader.take(1)?[0] as usize;
        let mut ids = Vec::with_capacity(count);
        for _ in 0..count {
            let name = *NAMES.get(reader.take(1)?[0] as usize)?;
            let oid = Oid::from_bytes(reader.take(20)?).ok()?;
            ids.push((name, oid));
        }
        files.insert(ct, dt, fingerprint, ids.into());
    }
    Some(files)
}

/// Reads the encoded file from the front.
struct Reader<'b>(&'b [u8]);

impl<'b> Reader<'b> {
    fn take(&mut self, n: usize) -> Option<&'b [u8]> {
        let (head, tail) = self.0.split_at_checked(n)?;
        self.0 = tail;
        Some(head)
    }

    fn str(&mut self) -> Option<&'b str> {
        let len = u16::from_le_bytes(self.take(2)?.try_into().ok()?) as usize;
        std::str::from_utf8(self.take(len)?).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn oid(n: u8) -> Oid {
        Oid::from_bytes(&[n; 20]).unwrap()
    }

    fn files() -> DeliveredFiles {
        let mut files = DeliveredFiles::default();
        files.insert(
            "large",
            "web-dev",
            7,
            vec![("reconciler.yaml", oid(1)), ("namespace.yaml", oid(2))].into(),
        );
        files.insert(
            "small",
            "api-dev",
            u128::MAX,
            vec![
                ("reconciler.yaml", oid(3)),
                ("namespace.yaml", oid(4)),
                ("platform-config.sh", oid(5)),
            ]
            .into(),
        );
        files
    }

    #[test]
    fn the_file_holds_what_was_delivered_for_the_same_binary_and_settings_only() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state").join("dev.files");
        let fingerprint = Fingerprint("abc".into());
        files().save(&path, &fingerprint).unwrap();
        let loaded = DeliveredFiles::load(&path, &fingerprint);
        assert_eq!(loaded.len(), 2);
        assert_eq!(
            loaded.files("small", "api-dev"),
            files().files("small", "api-dev")
        );
        assert_eq!(loaded.fingerprint("large", "web-dev"), Some(7));
        assert_eq!(loaded.fingerprint("small", "api-dev"), Some(u128::MAX));
        assert_eq!(
            loaded.placed_by_this_process(),
            None,
            "read from the cache: the branch says"
        );
        assert!(DeliveredFiles::load(&path, &Fingerprint("other".into())).is_empty());
        assert!(DeliveredFiles::load(&dir.path().join("none"), &fingerprint).is_empty());
        // No temporary file is left beside it.
        let names: Vec<_> = std::fs::read_dir(path.parent().unwrap())
            .unwrap()
            .flatten()
            .collect();
        assert_eq!(names.len(), 1);
    }

    #[test]
    fn a_damaged_file_is_ignored() {
        let fingerprint = Fingerprint("abc".into());
        let bytes = files().encode(&fingerprint);
        assert_eq!(decode(&bytes, &fingerprint).map(|f| f.len()), Some(2));
        for cut in [0, 1, MAGIC.len(), bytes.len() / 2, bytes.len() - 1] {
            assert!(decode(&bytes[..cut], &fingerprint).is_none(), "cut at {cut}");
        }
        for at in [0, MAGIC.len() + 1, bytes.len() / 2, bytes.len() - 20] {
            let mut flipped = bytes.clone();
            flipped[at] ^= 0x40;
            assert!(decode(&flipped, &fingerprint).is_none(), "byte {at} flipped");
        }
    }
}
