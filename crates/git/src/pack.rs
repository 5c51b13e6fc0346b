//! Packs of objects kalypso already holds, streamed straight into a repository's store.
//!
//! libgit2 writes packs through its pack builder, which looks every object up again (and,
//! unless told otherwise, searches for deltas). kalypso knows the objects it stores (the new
//! objects of a GitOps tree, the objects a local push sends), so it writes the pack itself:
//! each object as a zlib stream of stored (uncompressed) blocks, which costs no compression
//! time and no memory beyond the object at hand. git reads such packs as any other; libgit2
//! indexes the pack as it arrives and moves it into place only when it is complete.

use std::collections::HashSet;
use std::io::Write as _;

use git2::{ObjectType, Odb, OdbPackwriter, Oid};
use kalypso_core::tree::Blob;
use sha1::Digest as _;

/// A pack being written into a repository's object store, object by object.
pub(crate) struct PackStream<'o> {
    out: std::io::BufWriter<OdbPackwriter<'o>>,
    sha: sha1::Sha1,
    left: u32,
}

impl<'o> PackStream<'o> {
    /// Starts a pack of `count` objects in `odb`.
    pub(crate) fn new(odb: &'o Odb<'_>, count: u32) -> Result<PackStream<'o>, git2::Error> {
        let mut stream = PackStream {
            out: std::io::BufWriter::with_capacity(1 << 20, odb.packwriter()?),
            sha: sha1::Sha1::new(),
            left: count,
        };
        stream.put_raw(b"PACK")?;
        stream.put_raw(&2u32.to_be_bytes())?;
        stream.put_raw(&count.to_be_bytes())?;
        Ok(stream)
    }

    fn put_raw(&mut self, bytes: &[u8]) -> Result<(), git2::Error> {
        self.sha.update(bytes);
        self.out
            .write_all(bytes)
            .map_err(|e| git2::Error::from_str(&format!("cannot write a pack: {e}")))
    }

    /// Appends an object.
    pub(crate) fn put(&mut self, kind: ObjectType, content: &[u8]) -> Result<(), git2::Error> {
        self.left = self
            .left
            .checked_sub(1)
            .ok_or_else(|| git2::Error::from_str("more objects than the pack announced"))?;
        let code: u8 = match kind {
            ObjectType::Commit => 1,
            ObjectType::Tree => 2,
            ObjectType::Blob => 3,
            ObjectType::Tag => 4,
            _ => return Err(git2::Error::from_str("an object of no storable type")),
        };
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
        self.put_raw(&header)?;
        // zlib: header (deflate, 32K window, no preset dictionary, check bits), stored blocks
        // of at most 65,535 bytes, the Adler-32 of the data.
        self.put_raw(&[0x78, 0x01])?;
        let mut chunks = content.chunks(0xffff).peekable();
        if chunks.peek().is_none() {
            self.put_raw(&[0x01, 0x00, 0x00, 0xff, 0xff])?;
        }
        while let Some(chunk) = chunks.next() {
            let last = chunks.peek().is_none();
            let len = chunk.len() as u16;
            self.put_raw(&[u8::from(last)])?;
            self.put_raw(&len.to_le_bytes())?;
            self.put_raw(&(!len).to_le_bytes())?;
            self.put_raw(chunk)?;
        }
        self.put_raw(&adler32(content).to_be_bytes())
    }

    /// Ends the pack (its checksum) and has libgit2 move it and its index into place.
    pub(crate) fn finish(self) -> Result<(), git2::Error> {
        if self.left != 0 {
            return Err(git2::Error::from_str("fewer objects than the pack announced"));
        }
        let PackStream { mut out, sha, .. } = self;
        let io = |e: std::io::Error| git2::Error::from_str(&format!("cannot write a pack: {e}"));
        out.write_all(&sha.finalize()).map_err(io)?;
        let mut writer = out.into_inner().map_err(|e| io(e.into_error()))?;
        writer.commit()?;
        Ok(())
    }
}

/// Stores `objects` (already hashed) in `odb` as one pack, each object once.
pub(crate) fn store_pack(odb: &Odb<'_>, objects: &[(ObjectType, Oid, Blob)]) -> Result<(), git2::Error> {
    let mut seen = HashSet::with_capacity(objects.len());
    let unique: Vec<&(ObjectType, Oid, Blob)> =
        objects.iter().filter(|(_, oid, _)| seen.insert(*oid)).collect();
    if unique.is_empty() {
        return Ok(());
    }
    let count =
        u32::try_from(unique.len()).map_err(|_| git2::Error::from_str("too many objects for one pack"))?;
    let mut pack = PackStream::new(odb, count)?;
    for (kind, _, content) in unique {
        pack.put(*kind, content)?;
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
        store_pack(&odb, &objects).unwrap();
        for (_, oid, content) in &objects {
            let read = odb.read(*oid).unwrap();
            assert_eq!(read.kind(), ObjectType::Blob);
            assert_eq!(read.data(), &content[..]);
        }
        let packs = std::fs::read_dir(dir.path().join("objects/pack"))
            .unwrap()
            .count();
        assert_eq!(packs, 2, "one pack and its index");
    }

    #[test]
    fn a_pack_must_hold_the_objects_it_announced() {
        let dir = tempfile::tempdir().unwrap();
        let git = Repository::init_bare(dir.path()).unwrap();
        let odb = git.odb().unwrap();
        let mut pack = PackStream::new(&odb, 1).unwrap();
        pack.put(ObjectType::Blob, b"a").unwrap();
        assert!(pack.put(ObjectType::Blob, b"b").is_err());
        drop(pack);
        let short = PackStream::new(&odb, 2).unwrap();
        assert!(short.finish().is_err());
        let in_pack = std::fs::read_dir(dir.path().join("objects/pack"))
            .unwrap()
            .count();
        assert_eq!(in_pack, 0, "nothing stored from a pack left unfinished");
    }
}
