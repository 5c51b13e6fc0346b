//! Fingerprints: 128-bit hashes of everything an assignment's output depends on.
//!
//! Rendering is deterministic, so two renders of an assignment with the same templates,
//! target, cluster type, merged config and schemas produce the same files. A fingerprint
//! captures exactly those inputs; a caller that kept the files of a previous render (the
//! daemon in memory, the CLI on disk) can skip assignments whose fingerprint did not change
//! and re-render only what a change affects. Fingerprints also cover the kalypso version, so
//! an upgrade re-renders everything.

use kalypso_api::{Labels, Manifest, TemplateSpec};
use kalypso_gotmpl::{MapKey, Value};
use xxhash_rust::xxh3::Xxh3;

/// A 128-bit fingerprint or content digest.
pub type Fingerprint = u128;

/// Changes whenever rendering could produce different output for the same inputs.
pub const FORMAT: &str = concat!("kalypso-render/", env!("CARGO_PKG_VERSION"), "/1");

/// The digest of a file's content.
pub fn digest(bytes: &[u8]) -> Fingerprint {
    xxhash_rust::xxh3::xxh3_128(bytes)
}

/// Feeds values into a fingerprint; every item is length- or tag-prefixed, so different
/// sequences of items never hash alike by concatenation.
#[derive(Clone, Default)]
pub struct Hasher(Xxh3);

impl std::fmt::Debug for Hasher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Hasher")
    }
}

impl Hasher {
    /// A new hasher.
    pub fn new() -> Hasher {
        Hasher(Xxh3::new())
    }

    /// Adds bytes.
    pub fn bytes(&mut self, b: &[u8]) -> &mut Hasher {
        self.0.update(&(b.len() as u64).to_le_bytes());
        self.0.update(b);
        self
    }

    /// Adds a string.
    pub fn str(&mut self, s: &str) -> &mut Hasher {
        self.bytes(s.as_bytes())
    }

    /// Adds another fingerprint.
    pub fn fingerprint(&mut self, f: Fingerprint) -> &mut Hasher {
        self.0.update(&f.to_le_bytes());
        self
    }

    fn tag(&mut self, t: u8) -> &mut Hasher {
        self.0.update(&[t]);
        self
    }

    /// Adds a label map (in key order).
    pub fn labels(&mut self, labels: &Labels) -> &mut Hasher {
        self.0.update(&(labels.len() as u64).to_le_bytes());
        for (k, v) in labels {
            self.str(k).str(v);
        }
        self
    }

    /// Adds a list of strings.
    pub fn strs<'a>(&mut self, items: impl IntoIterator<Item = &'a str>) -> &mut Hasher {
        for s in items {
            self.tag(1).str(s);
        }
        self.tag(0)
    }

    /// Adds a template value, with its Go type.
    pub fn value(&mut self, v: &Value) -> &mut Hasher {
        match v {
            Value::Nil => self.tag(0),
            Value::Bool(b) => self.tag(1).tag(u8::from(*b)),
            Value::Int(i, k) => {
                self.tag(2).str(k.name());
                self.0.update(&i.to_le_bytes());
                self
            }
            Value::Uint(u, k) => {
                self.tag(3).str(k.name());
                self.0.update(&u.to_le_bytes());
                self
            }
            Value::Float(f, k) => {
                self.tag(4).str(k.name());
                self.0.update(&f.to_bits().to_le_bytes());
                self
            }
            Value::Complex(re, im) => {
                self.tag(5);
                self.0.update(&re.to_bits().to_le_bytes());
                self.0.update(&im.to_bits().to_le_bytes());
                self
            }
            Value::String(s) => self.tag(6).bytes(s.as_bytes()),
            Value::List(l) => {
                self.tag(7).str(&l.type_of().to_string());
                for item in l.items() {
                    self.tag(1).value(item);
                }
                self.tag(0)
            }
            Value::Map(m) => {
                self.tag(8).str(&m.type_of().to_string());
                for (k, v) in m.snapshot().iter() {
                    self.tag(1).key(k).value(v);
                }
                self.tag(0)
            }
            // Config values never hold objects; hash the type so that any two differ from
            // other kinds of values.
            Value::Object(o) => self.tag(9).bytes(o.type_name().as_bytes()),
        }
    }

    fn key(&mut self, k: &MapKey) -> &mut Hasher {
        self.value(&k.to_value())
    }

    /// Adds a Template's identity: name, content type and manifests.
    pub fn template(&mut self, name: &str, spec: &TemplateSpec) -> &mut Hasher {
        self.str(name).str(&spec.content_type);
        for manifest in &spec.manifests {
            match manifest {
                Manifest::Text(text) => self.tag(1).str(text),
                Manifest::Object(object) => self.tag(2).str(&object.to_string()),
            };
        }
        self.tag(0)
    }

    /// The fingerprint.
    pub fn finish(&self) -> Fingerprint {
        self.0.digest128()
    }
}

#[cfg(test)]
mod tests {
    use kalypso_gotmpl::{List, Map};

    use super::*;

    fn fp(v: &Value) -> Fingerprint {
        Hasher::new().value(v).finish()
    }

    #[test]
    fn values_hash_by_type_and_content() {
        assert_ne!(fp(&Value::int(1)), fp(&Value::float(1.0)));
        assert_ne!(fp(&Value::int(1)), fp(&Value::from("1")));
        assert_ne!(
            fp(&Value::List(List::interfaces(vec![Value::from("ab")]))),
            fp(&Value::List(List::interfaces(vec![
                Value::from("a"),
                Value::from("b")
            ])))
        );
        let a = Map::string_interface([("k", Value::from("v"))]);
        let b = Map::string_interface([("k", Value::from("v"))]);
        assert_eq!(fp(&Value::Map(a)), fp(&Value::Map(b)));
    }

    #[test]
    fn sequences_do_not_collide_by_concatenation() {
        let ab = Hasher::new().str("a").str("b").finish();
        let a_b = Hasher::new().str("ab").str("").finish();
        assert_ne!(ab, a_b);
    }
}
