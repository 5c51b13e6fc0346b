//! Where artifacts go: `oci://HOST[:PORT]/PATH` as a GitOpsRepo's `spec.repo` names it, the
//! repositories under it, and the tags an environment uses.
//!
//! A GitOps repository in OCI form is a family of registry repositories: `PATH` holds the
//! environment's index (which cluster types it has and the artifact of each), and
//! `PATH/<cluster type>` holds each cluster type's artifact, the one its clusters pull.
//! Names are checked here, once, against the distribution specification's grammar, so that a
//! bad name fails before anything is uploaded and the error names the part at fault.

use std::fmt;

/// The scheme of OCI locations, as Flux writes them (`OCIRepository` `spec.url`).
pub const SCHEME: &str = "oci://";

/// The registry API host of Docker Hub (`docker.io` names it in references).
const DOCKER_HUB_API: &str = "registry-1.docker.io";

/// Why a location, a repository name or a tag is unusable.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The text is not `oci://HOST/PATH`.
    #[error("{text:?} is not an OCI location (oci://HOST[:PORT]/PATH): {reason}")]
    Location {
        /// The text as given.
        text: String,
        /// What is wrong.
        reason: String,
    },
    /// A repository name breaks the distribution specification's grammar.
    #[error(
        "{name:?} cannot be an OCI repository name: {reason} (lower-case letters, digits and \
         the separators '.', '_', '__', '-' between them, '/' between components)"
    )]
    Repository {
        /// The name.
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// A tag breaks the grammar `[A-Za-z0-9_][A-Za-z0-9._-]{0,127}`.
    #[error(
        "{tag:?} cannot be an OCI tag: {reason} (letters, digits, '_', '.', '-'; at most 128, not starting with '.' or '-')"
    )]
    Tag {
        /// The tag.
        tag: String,
        /// What is wrong.
        reason: String,
    },
}

/// Whether `text` names an OCI location (`oci://…`).
pub fn is_oci(text: &str) -> bool {
    text.trim().starts_with(SCHEME)
}

/// An OCI location: a registry and a repository path in it.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Location {
    /// The registry as written (`ghcr.io`, `127.0.0.1:5000`).
    host: String,
    /// The repository path under the registry (`org/platform-gitops`).
    path: String,
}

impl Location {
    /// Parses `oci://HOST[:PORT]/PATH`. User information (`user:pass@`) is refused: credentials
    /// come from a Docker config file or a token, never from a location that is printed.
    pub fn parse(text: &str) -> Result<Location, Error> {
        let raw = text.trim();
        let fail = |reason: &str| Error::Location {
            text: if raw.contains('@') {
                "oci://***".to_owned()
            } else {
                raw.to_owned()
            },
            reason: reason.to_owned(),
        };
        let rest = raw
            .strip_prefix(SCHEME)
            .ok_or_else(|| fail("it does not start with oci://"))?;
        let (host, path) = rest
            .split_once('/')
            .ok_or_else(|| fail("no repository path after the registry"))?;
        if host.contains('@') {
            return Err(fail(
                "credentials cannot be part of the location; use a Docker config file or a token",
            ));
        }
        if host.is_empty() {
            return Err(fail("no registry"));
        }
        if !host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || ".-:[]".contains(c))
        {
            return Err(fail(
                "the registry is not a host name or address with an optional port",
            ));
        }
        if let Some((_, port)) = host.rsplit_once(':')
            && !host.ends_with(']')
            && (port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()))
        {
            return Err(fail("the port is not a number"));
        }
        if path.contains(['?', '#']) {
            return Err(fail(
                "a location has no query or fragment (name the tag separately)",
            ));
        }
        let path = path.trim_end_matches('/');
        check_repository(path).map_err(|e| fail(&e.to_string()))?;
        Ok(Location {
            host: host.to_ascii_lowercase(),
            path: path.to_owned(),
        })
    }

    /// The registry as written.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The host the registry API is reached at (Docker Hub's `docker.io` is
    /// `registry-1.docker.io`).
    pub fn api_host(&self) -> &str {
        match self.host.as_str() {
            "docker.io" | "index.docker.io" => DOCKER_HUB_API,
            other => other,
        }
    }

    /// The repository path (the environment's index lives here).
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The repository of a cluster type: `PATH/<cluster type>`.
    pub fn cluster_type_repository(&self, cluster_type: &str) -> Result<String, Error> {
        let name = format!("{}/{cluster_type}", self.path);
        check_repository(&name)?;
        Ok(name)
    }

    /// The location of a cluster type's repository, as an `OCIRepository` names it.
    pub fn cluster_type_url(&self, cluster_type: &str) -> String {
        format!("{SCHEME}{}/{}/{cluster_type}", self.host, self.path)
    }

    /// Whether the registry is on this machine (`localhost`, `127.0.0.1`, `[::1]`): such a
    /// registry is reached over plain HTTP, as `docker` and Flux's `--insecure` do.
    pub fn is_loopback(&self) -> bool {
        let name = match self.host.rsplit_once(':') {
            Some((name, port)) if !self.host.ends_with(']') && !port.is_empty() => name,
            _ => self.host.as_str(),
        };
        matches!(name, "localhost" | "[::1]") || name.starts_with("127.")
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{SCHEME}{}/{}", self.host, self.path)
    }
}

impl fmt::Debug for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Checks a repository name against the distribution specification:
/// `[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*(\/[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*)*`.
pub fn check_repository(name: &str) -> Result<(), Error> {
    let fail = |reason: String| Error::Repository {
        name: name.to_owned(),
        reason,
    };
    if name.is_empty() {
        return Err(fail("it is empty".to_owned()));
    }
    // Registries commonly cap the whole name (host included) at 255 characters.
    if name.len() > 255 {
        return Err(fail("it is longer than 255 characters".to_owned()));
    }
    for component in name.split('/') {
        if component.is_empty() {
            return Err(fail("it has an empty component".to_owned()));
        }
        let bytes = component.as_bytes();
        let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
        if !alnum(bytes[0]) || !alnum(bytes[bytes.len() - 1]) {
            return Err(fail(format!(
                "component {component:?} must start and end with a lower-case letter or a digit"
            )));
        }
        let mut i = 0;
        while i < bytes.len() {
            let b = bytes[i];
            if alnum(b) {
                i += 1;
                continue;
            }
            // A separator run: '.', '_', '__' or any number of '-'.
            let start = i;
            while i < bytes.len() && !alnum(bytes[i]) {
                i += 1;
            }
            let run = &component[start..i];
            let ok = run == "." || run == "_" || run == "__" || run.bytes().all(|b| b == b'-');
            if !ok {
                return Err(fail(format!("component {component:?} has the separator {run:?}")));
            }
        }
    }
    Ok(())
}

/// Checks a tag: `[a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}`.
pub fn check_tag(tag: &str) -> Result<(), Error> {
    let fail = |reason: &str| Error::Tag {
        tag: tag.to_owned(),
        reason: reason.to_owned(),
    };
    let Some(first) = tag.bytes().next() else {
        return Err(fail("it is empty"));
    };
    if tag.len() > 128 {
        return Err(fail("it is longer than 128 characters"));
    }
    if !(first.is_ascii_alphanumeric() || first == b'_') {
        return Err(fail("it must start with a letter, a digit or '_'"));
    }
    if let Some(bad) = tag
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || "._-".contains(*c)))
    {
        return Err(fail(&format!("it holds {bad:?}")));
    }
    Ok(())
}

/// An OCI location with the tag to read: `oci://HOST/PATH#TAG` (as `--against` takes it; the
/// same `#` that separates a git repository from its branch).
pub fn parse_with_tag(text: &str) -> Result<(Location, String), Error> {
    let raw = text.trim();
    let (location, tag) = raw.rsplit_once('#').ok_or_else(|| Error::Location {
        text: raw.to_owned(),
        reason: "no tag: name the environment's tag as oci://HOST/PATH#TAG".to_owned(),
    })?;
    let location = Location::parse(location)?;
    check_tag(tag)?;
    Ok((location, tag.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_locations() {
        let l = Location::parse("oci://ghcr.io/contoso/platform-gitops").unwrap();
        assert_eq!((l.host(), l.path()), ("ghcr.io", "contoso/platform-gitops"));
        assert_eq!(l.to_string(), "oci://ghcr.io/contoso/platform-gitops");
        assert_eq!(
            l.cluster_type_repository("drone").unwrap(),
            "contoso/platform-gitops/drone"
        );
        assert_eq!(
            l.cluster_type_url("drone"),
            "oci://ghcr.io/contoso/platform-gitops/drone"
        );
        assert!(!l.is_loopback());
        let local = Location::parse(" oci://127.0.0.1:5000/gitops/ ").unwrap();
        assert_eq!((local.host(), local.path()), ("127.0.0.1:5000", "gitops"));
        assert!(local.is_loopback());
        assert!(Location::parse("oci://localhost/x").unwrap().is_loopback());
        assert!(Location::parse("oci://[::1]:5000/x").unwrap().is_loopback());
        assert!(
            !Location::parse("oci://localhost.example.com/x")
                .unwrap()
                .is_loopback()
        );
        assert_eq!(
            Location::parse("oci://docker.io/library/x").unwrap().api_host(),
            "registry-1.docker.io"
        );
    }

    #[test]
    fn refuses_bad_locations_naming_the_fault() {
        let reason = |text: &str| match Location::parse(text).unwrap_err() {
            Error::Location { reason, .. } => reason,
            other => panic!("{other:?}"),
        };
        assert!(reason("https://ghcr.io/x").contains("oci://"));
        assert!(reason("oci://ghcr.io").contains("no repository path"));
        assert!(reason("oci:///x").contains("no registry"));
        assert!(reason("oci://ghcr.io:abc/x").contains("port"));
        assert!(reason("oci://ghcr.io/x#dev").contains("fragment"));
        assert!(reason("oci://ghcr.io/Contoso/x").contains("Contoso"));
        let leak = Location::parse("oci://user:s3cret@ghcr.io/x").unwrap_err();
        assert!(!leak.to_string().contains("s3cret"), "{leak}");
        assert!(leak.to_string().contains("credentials"));
    }

    #[test]
    fn repository_names_follow_the_specification() {
        for ok in ["a", "a/b", "a.b/c_d/e__f/g-h/i---j", "0/9z"] {
            assert_eq!(check_repository(ok), Ok(()), "{ok}");
        }
        for bad in [
            "", "A", "a/", "/a", "a//b", "-a", "a-", "a..b", "a___b", "a.-b", "a b",
        ] {
            assert!(check_repository(bad).is_err(), "{bad:?}");
        }
        assert!(check_repository(&"a".repeat(256)).is_err());
    }

    #[test]
    fn tags_follow_the_specification() {
        for ok in ["dev", "_x", "v1.2.3-rc_1", &"a".repeat(128)] {
            assert_eq!(check_tag(ok), Ok(()), "{ok}");
        }
        for bad in ["", ".dev", "-dev", "env/dev", "dev@x", &"a".repeat(129)] {
            assert!(check_tag(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_location_with_its_tag() {
        let (l, tag) = parse_with_tag("oci://127.0.0.1:5000/gitops#dev").unwrap();
        assert_eq!((l.path(), tag.as_str()), ("gitops", "dev"));
        assert!(parse_with_tag("oci://127.0.0.1:5000/gitops").is_err());
        assert!(parse_with_tag("oci://127.0.0.1:5000/gitops#a/b").is_err());
    }
}
