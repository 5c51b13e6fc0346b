//! Packs of objects kalypso already holds, written straight into a repository's store.
//!
//! libgit2 writes packs through its pack builder, which looks every object up again (and,
//! unless told otherwise, searches for deltas), and stores them through its indexer, which
//! hashes every object a second time and holds an index of the whole pack. kalypso knows the
//! objects it stores and their ids (the new objects of a GitOps tree, the objects a local
//! push sends), so it writes the pack and its index itself: each object as a zlib stream of
//! stored (uncompressed) blocks, which costs no compression time and no memory beyond the
//! object at hand and a 32-byte entry for the index. git reads such packs as any other. The
//! pack is written to a temporary file in `objects/pack`; the pack and then its index are
//! renamed into place only when both are complete, so a reader (or a process killed
//! midway) never sees a pack without its whole index.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use git2::{ObjectType, Oid, Repository};
use kalypso_core::tree::Blob;
use sha1::Digest as _;

/// A pack being written into a repository's object store, object by object.
pub(crate) struct PackStream {
    dir: PathBuf,
    out: std::io::BufWriter<tempfile::NamedTempFile>,
    sha: sha1::Sha1,
    /// Where the next object starts.
    offset: u64,
    /// (id, offset, CRC-32 of the packed object) of each object written.
    entries: Vec<(Oid, u64, u32)>,
    left: u32,
}

impl std::fmt::Debug for PackStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PackStream")
            .field("dir", &self.dir)
            .field("left", &self.left)
            .finish()
    }
}

fn io_error(e: std::io::Error) -> git2::Error {
    git2::Error::from_str(&format!("cannot write a pack: {e}"))
}

impl PackStream {
    /// Starts a pack of `count` objects in the object store of `git`.
    pub(crate) fn new(git: &Repository, count: u32) -> Result<PackStream, git2::Error> {
        let dir = git.path().join("objects").join("pack");
        std::fs::create_dir_all(&dir).map_err(io_error)?;
        let file = tempfile::Builder::new()
            .prefix("tmp_pack_")
            .tempfile_in(&dir)
            .map_err(io_error)?;
        let mut stream = PackStream {
            dir,
            out: std::io::BufWriter::with_capacity(1 << 20, file),
            sha: sha1::Sha1::new(),
            offset: 0,
            entries: Vec::with_capacity(count as usize),
            left: count,
        };
        let mut header = Vec::with_capacity(12);
        header.extend_from_slice(b"PACK");
        header.extend_from_slice(&2u32.to_be_bytes());
        header.extend_from_slice(&count.to_be_bytes());
        stream.put_raw(&header, None)?;
        Ok(stream)
    }

    fn put_raw(&mut self, bytes: &[u8], crc: Option<&mut crc32fast::Hasher>) -> Result<(), git2::Error> {
        self.sha.update(bytes);
        if let Some(crc) = crc {
            crc.update(bytes);
        }
        self.offset += bytes.len() as u64;
        self.out.write_all(bytes).map_err(io_error)
    }

    /// Appends object `oid` (its id as git computes it from `kind` and `content`).
    pub(crate) fn put(&mut self, kind: ObjectType, oid: Oid, content: &[u8]) -> Result<(), git2::Error> {
        self.left = self
            .left
            .checked_sub(1)
            .ok_or_else(|| git2::Error::from_str("more objects than the pack announced"))?;
        debug_assert_eq!(Oid::hash_object(kind, content).ok(), Some(oid), "an object's id");
        let code: u8 = match kind {
            ObjectType::Commit => 1,
            ObjectType::Tree => 2,
            ObjectType::Blob => 3,
            ObjectType::Tag => 4,
            _ => return Err(git2::Error::from_str("an object of no storable type")),
        };
        let start = self.offset;
        let mut crc = crc32fast::Hasher::new();
        let mut size = content.len();
        let mut header = vec![(code << 4) | (size & 0x0f) as u8];
        size >>= 4;
        while size > 0 {
            if let Some(last) = header.last_mut() {
                *last |= 0x80;
            }
            header.push((size & 0x7f) as u8);
            size >>= 7;
        }
        self.put_raw(&header, Some(&mut crc))?;
        // zlib: header (deflate, 32K window, no preset dictionary, check bits), stored blocks
        // of at most 65,535 bytes, the Adler-32 of the data.
        self.put_raw(&[0x78, 0x01], Some(&mut crc))?;
        let mut chunks = content.chunks(0xffff).peekable();
        if chunks.peek().is_none() {
            self.put_raw(&[0x01, 0x00, 0x00, 0xff, 0xff], Some(&mut crc))?;
        }
        while let Some(chunk) = chunks.next() {
            let last = chunks.peek().is_none();
            let len = chunk.len() as u16;
            let mut block = [0u8; 5];
            block[0] = u8::from(last);
            block[1..3].copy_from_slice(&len.to_le_bytes());
            block[3..5].copy_from_slice(&(!len).to_le_bytes());
            self.put_raw(&block, Some(&mut crc))?;
            self.put_raw(chunk, Some(&mut crc))?;
        }
        self.put_raw(&adler32(content).to_be_bytes(), Some(&mut crc))?;
        self.entries.push((oid, start, crc.finalize()));
        Ok(())
    }

    /// Ends the pack (its checksum), writes its index, and moves both into place.
    pub(crate) fn finish(self) -> Result<(), git2::Error> {
        if self.left != 0 {
            return Err(git2::Error::from_str("fewer objects than the pack announced"));
        }
        let PackStream {
            dir,
            mut out,
            sha,
            mut entries,
            ..
        } = self;
        let checksum = sha.finalize();
        out.write_all(&checksum).map_err(io_error)?;
        let pack = out.into_inner().map_err(|e| io_error(e.into_error()))?;
        entries.sort_unstable_by_key(|(oid, _, _)| *oid);
        entries.dedup_by_key(|(oid, _, _)| *oid);
        let name = format!("pack-{}", hex::encode(checksum));
        let mut index = tempfile::Builder::new()
            .prefix("tmp_idx_")
            .tempfile_in(&dir)
            .map_err(io_error)?;
        {
            let mut writer = std::io::BufWriter::with_capacity(1 << 20, index.as_file_mut());
            writer
                .write_all(&index_bytes(&entries, &checksum))
                .map_err(io_error)?;
            writer.flush().map_err(io_error)?;
        }
        persist(pack, &dir.join(format!("{name}.pack")))?;
        persist(index, &dir.join(format!("{name}.idx")))
    }
}

/// Moves a finished temporary file into place, read-only as git leaves packs.
fn persist(file: tempfile::NamedTempFile, to: &Path) -> Result<(), git2::Error> {
    let mut permissions = file.as_file().metadata().map_err(io_error)?.permissions();
    permissions.set_readonly(true);
    file.as_file().set_permissions(permissions).map_err(io_error)?;
    file.persist(to).map_err(|e| io_error(e.error))?;
    Ok(())
}

/// A version-2 pack index of `entries` (sorted by id, unique) for the pack whose checksum
/// is `pack_checksum`.
fn index_bytes(entries: &[(Oid, u64, u32)], pack_checksum: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + 256 * 4 + entries.len() * 28 + 40);
    out.extend_from_slice(b"\xfftOc");
    out.extend_from_slice(&2u32.to_be_bytes());
    let mut fanout = [0u32; 256];
    for (oid, _, _) in entries {
        fanout[usize::from(oid.as_bytes()[0])] += 1;
    }
    let mut total = 0u32;
    for count in fanout {
        total += count;
        out.extend_from_slice(&total.to_be_bytes());
    }
    for (oid, _, _) in entries {
        out.extend_from_slice(oid.as_bytes());
    }
    for (_, _, crc) in entries {
        out.extend_from_slice(&crc.to_be_bytes());
    }
    let mut large = Vec::new();
    for (_, offset, _) in entries {
        match u32::try_from(*offset) {
            Ok(small) if small < 0x8000_0000 => out.extend_from_slice(&small.to_be_bytes()),
            _ => {
                let at = 0x8000_0000u32 | large.len() as u32;
                out.extend_from_slice(&at.to_be_bytes());
                large.push(*offset);
            }
        }
    }
    for offset in large {
        out.extend_from_slice(&offset.to_be_bytes());
    }
    out.extend_from_slice(pack_checksum);
    let checksum = sha1::Sha1::digest(&out);
    out.extend_from_slice(&checksum);
    out
}

/// Stores `objects` (already hashed) in the object store of `git` as one pack, each object
/// once.
pub(crate) fn store_pack(git: &Repository, objects: &[(ObjectType, Oid, Blob)]) -> Result<(), git2::Error> {
    // Each object once: the positions sorted by id (8 bytes an object, not a set of ids).
    let mut unique: Vec<usize> = (0..objects.len()).collect();
    unique.sort_unstable_by_key(|&i| objects[i].1);
    unique.dedup_by_key(|i| objects[*i].1);
    if unique.is_empty() {
        return Ok(());
    }
    let count =
        u32::try_from(unique.len()).map_err(|_| git2::Error::from_str("too many objects for one pack"))?;
    let mut pack = PackStream::new(git, count)?;
    for i in unique {
        let (kind, oid, content) = &objects[i];
        pack.put(*kind, *oid, content)?;
    }
    pack.finish()
}

/// zlib's Adler-32 checksum.
fn adler32(data: &[u8]) -> u32 {
    adler2::adler32_slice(data)
}

#[cfg(test)]
mod tests {
    use super::*;
    use git2::Repository;

    #[test]
    fn objects_stored_as_a_streamed_pack_read_back_as_written() {
        assert_eq!(adler32(b"Wikipedia"), 0x11e6_0398);
        assert_eq!(adler32(b""), 1);
        let dir = tempfile::tempdir().unwrap();
        let git = Repository::init_bare(dir.path()).unwrap();
        let odb = git.odb().unwrap();
        // Empty, small, several stored blocks (> 65,535 bytes), and a duplicate.
        let big: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        let contents: Vec<Vec<u8>> = vec![
            Vec::new(),
            b"kind: ConfigMap\n".to_vec(),
            big,
            b"kind: ConfigMap\n".to_vec(),
        ];
        let objects: Vec<(ObjectType, Oid, Blob)> = contents
            .iter()
            .map(|c| {
                (
                    ObjectType::Blob,
                    Oid::hash_object(ObjectType::Blob, c).unwrap(),
                    Blob::from(&c[..]),
                )
            })
            .collect();
        store_pack(&git, &objects).unwrap();
        for (_, oid, content) in &objects {
            let read = odb.read(*oid).unwrap();
            assert_eq!(read.kind(), ObjectType::Blob);
            assert_eq!(read.data(), &content[..]);
        }
        let packs: Vec<PathBuf> = std::fs::read_dir(dir.path().join("objects/pack"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        assert_eq!(packs.len(), 2, "one pack and its index: {packs:?}");
        // git checks the index against the pack: ids, offsets, CRCs, both checksums.
        let index = packs
            .iter()
            .find(|p| p.extension().is_some_and(|e| e == "idx"))
            .unwrap();
        let verified = kalypso_testkit::git(dir.path(), &["verify-pack", "-v", index.to_str().unwrap()]);
        assert!(verified.contains("non delta: 3 objects"), "{verified}");
        kalypso_testkit::git(dir.path(), &["fsck", "--strict"]);
    }

    #[test]
    fn offsets_past_two_gigabytes_go_to_the_large_offset_table() {
        let a = Oid::from_bytes(&[1; 20]).unwrap();
        let b = Oid::from_bytes(&[2; 20]).unwrap();
        let bytes = index_bytes(&[(a, 12, 7), (b, 5 << 30, 9)], &[0; 20]);
        let table = 8 + 256 * 4;
        let offsets = table + 2 * 20 + 2 * 4;
        assert_eq!(&bytes[offsets..offsets + 4], &12u32.to_be_bytes());
        assert_eq!(&bytes[offsets + 4..offsets + 8], &0x8000_0000u32.to_be_bytes());
        assert_eq!(&bytes[offsets + 8..offsets + 16], &(5u64 << 30).to_be_bytes());
        assert_eq!(bytes.len(), offsets + 16 + 20 + 20);
    }

    #[test]
    fn a_pack_must_hold_the_objects_it_announced() {
        let dir = tempfile::tempdir().unwrap();
        let git = Repository::init_bare(dir.path()).unwrap();
        let blob = |content: &[u8]| Oid::hash_object(ObjectType::Blob, content).unwrap();
        let mut pack = PackStream::new(&git, 1).unwrap();
        pack.put(ObjectType::Blob, blob(b"a"), b"a").unwrap();
        assert!(pack.put(ObjectType::Blob, blob(b"b"), b"b").is_err());
        drop(pack);
        let short = PackStream::new(&git, 2).unwrap();
        assert!(short.finish().is_err());
        let in_pack = std::fs::read_dir(dir.path().join("objects/pack"))
            .unwrap()
            .count();
        assert_eq!(in_pack, 0, "nothing stored from a pack left unfinished");
    }
}
