//! Kubernetes name and label syntax.
//!
//! Object names become folder names in the GitOps repository, so a name that Kubernetes
//! would reject (or that contains `/` or `..`) must be rejected before anything is written.
//! The rules are Kubernetes' own: DNS-1123 subdomains for object names, qualified names and
//! label values for labels.

/// Why a name is invalid, or `None` if it is a valid DNS-1123 subdomain (what Kubernetes
/// requires of most object names: lowercase alphanumerics, `-` and `.`, starting and ending
/// alphanumeric, at most 253 characters).
pub fn dns_subdomain_error(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("must not be empty".to_owned());
    }
    if name.len() > 253 {
        return Some(format!("must be no more than 253 characters (is {})", name.len()));
    }
    let valid_label = |label: &str| {
        !label.is_empty()
            && label
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !label.starts_with('-')
            && !label.ends_with('-')
    };
    if name.split('.').all(valid_label) {
        None
    } else {
        Some(
            "must be a lowercase RFC 1123 subdomain: lowercase alphanumerics, '-' and '.', starting and \
             ending with an alphanumeric character"
                .to_owned(),
        )
    }
}

fn is_qualified_name_part(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
        && s.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric())
        && s.bytes().last().is_some_and(|b| b.is_ascii_alphanumeric())
}

/// Why a label key is invalid, or `None`: an optional DNS subdomain prefix and `/`, then a
/// name of at most 63 alphanumerics, `-`, `_` and `.`, starting and ending alphanumeric.
pub fn label_key_error(key: &str) -> Option<String> {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(prefix) = prefix
        && let Some(e) = dns_subdomain_error(prefix)
    {
        return Some(format!("invalid label key {key:?}: prefix {e}"));
    }
    if is_qualified_name_part(name) {
        None
    } else {
        Some(format!(
            "invalid label key {key:?}: name part must be at most 63 alphanumerics, '-', '_' or '.', \
             starting and ending with an alphanumeric character"
        ))
    }
}

/// Why a label value is invalid, or `None`: empty, or at most 63 alphanumerics, `-`, `_`
/// and `.`, starting and ending alphanumeric.
pub fn label_value_error(value: &str) -> Option<String> {
    if value.is_empty() || is_qualified_name_part(value) {
        None
    } else {
        Some(format!(
            "invalid label value {value:?}: must be empty or at most 63 alphanumerics, '-', '_' or '.', \
             starting and ending with an alphanumeric character"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subdomains() {
        for ok in ["a", "hello-world-app", "a.b-c", "0x"] {
            assert_eq!(dns_subdomain_error(ok), None, "{ok}");
        }
        for bad in ["", "..", "../etc", "a/b", "A", "-a", "a-", "a..b", ".a"] {
            assert!(dns_subdomain_error(bad).is_some(), "{bad}");
        }
    }

    #[test]
    fn labels() {
        assert_eq!(label_key_error("kustomize.toolkit.fluxcd.io/name"), None);
        assert_eq!(label_key_error("platform-config"), None);
        assert!(label_key_error("bad key").is_some());
        assert!(label_key_error("/x").is_some());
        assert_eq!(label_value_error(""), None);
        assert_eq!(label_value_error("West_US.1"), None);
        assert!(label_value_error("West US").is_some());
    }
}
