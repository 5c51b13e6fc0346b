//! Content addresses: OCI digests (`sha256:<hex>`) of blobs and manifests, and git blob ids,
//! which is what kalypso knows of the files it delivered before without their content.

use std::fmt;

use sha1::Sha1;
use sha2::{Digest as _, Sha256};

/// An OCI digest: `sha256:` and 64 lower-case hex digits.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Digest(String);

impl Digest {
    /// The digest of `bytes`.
    pub fn of(bytes: &[u8]) -> Digest {
        Digest::from_hasher(Sha256::new_with_prefix(bytes))
    }

    /// The digest a finished SHA-256 computes.
    pub(crate) fn from_hasher(hasher: Sha256) -> Digest {
        Digest(format!("sha256:{}", hex::encode(hasher.finalize())))
    }

    /// Parses `sha256:<64 hex>` (upper-case hex is folded); `None` for anything else,
    /// including other algorithms, which kalypso never writes.
    pub fn parse(text: &str) -> Option<Digest> {
        let hex = text.trim().strip_prefix("sha256:")?;
        (hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
            .then(|| Digest(format!("sha256:{}", hex.to_ascii_lowercase())))
    }

    /// The digest as text: `sha256:<hex>`.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The 64 hex digits.
    pub fn hex(&self) -> &str {
        &self.0["sha256:".len()..]
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl serde::Serialize for Digest {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> serde::Deserialize<'de> for Digest {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Digest, D::Error> {
        let text = String::deserialize(d)?;
        Digest::parse(&text)
            .ok_or_else(|| serde::de::Error::custom(format!("{text:?} is not a sha256 digest")))
    }
}

/// A git blob id: the SHA-1 of `blob <size>\0<content>`, as `git hash-object` computes it.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GitId(pub [u8; 20]);

impl GitId {
    /// The git blob id of `content`.
    pub fn of_blob(content: &[u8]) -> GitId {
        let mut h = Sha1::new();
        h.update(b"blob ");
        h.update(content.len().to_string().as_bytes());
        h.update([0]);
        h.update(content);
        GitId(h.finalize().into())
    }
}

impl fmt::Display for GitId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex::encode(self.0))
    }
}

impl fmt::Debug for GitId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_are_sha256() {
        // `printf '' | sha256sum`
        assert_eq!(
            Digest::of(b"").as_str(),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        let d = Digest::parse("SHA256:E3B0C44298FC1C149AFBF4C8996FB92427AE41E4649B934CA495991B7852B855");
        assert_eq!(d, None, "the algorithm is lower-case");
        let d =
            Digest::parse("sha256:E3B0C44298FC1C149AFBF4C8996FB92427AE41E4649B934CA495991B7852B855").unwrap();
        assert_eq!(d, Digest::of(b""));
        assert_eq!(d.hex().len(), 64);
        assert_eq!(Digest::parse("sha512:abc"), None);
        assert_eq!(Digest::parse("sha256:abc"), None);
    }

    #[test]
    fn git_ids_are_gits() {
        // `printf 'hello\n' | git hash-object --stdin`
        assert_eq!(
            GitId::of_blob(b"hello\n").to_string(),
            "ce013625030ba8dba906f756967f9e9ca394464a"
        );
    }
}
