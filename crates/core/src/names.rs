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

/// Why a name is not a DNS-1123 label, or `None`: what Kubernetes requires of namespace
/// names (at most 63 lowercase alphanumerics and `-`, starting and ending alphanumeric; no
/// dots).
pub fn dns_label_error(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("must not be empty".to_owned());
    }
    if name.len() > 63 {
        return Some(format!(
            "must be no more than 63 characters (is {}): Kubernetes namespace names are DNS-1123 labels",
            name.len()
        ));
    }
    let valid = name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-');
    (!valid).then(|| {
        "must be a lowercase RFC 1123 label: lowercase alphanumerics and '-' (no '.'), starting and ending \
         with an alphanumeric character"
            .to_owned()
    })
}

/// Why a ConfigMap data key is invalid, or `None`: Kubernetes accepts at most 253
/// alphanumerics, `-`, `_` and `.`, and not `.` or `..`.
pub fn config_map_key_error(key: &str) -> Option<String> {
    if key.is_empty() {
        return Some("a ConfigMap key must not be empty".to_owned());
    }
    if key.len() > 253 {
        return Some(format!(
            "a ConfigMap key must be no more than 253 characters (is {})",
            key.len()
        ));
    }
    if key == "." || key == ".." {
        return Some(format!("a ConfigMap key must not be {key:?}"));
    }
    if !key
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
    {
        return Some(format!(
            "invalid ConfigMap key {key:?}: Kubernetes allows only alphanumerics, '-', '_' and '.'"
        ));
    }
    None
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

#[cfg(test)]
mod k8s_tests {
    use super::*;

    #[test]
    fn labels_and_config_map_keys_follow_kubernetes() {
        assert_eq!(dns_label_error("dev-large-app"), None);
        assert!(dns_label_error("dev.large").is_some());
        assert!(dns_label_error(&"a".repeat(64)).unwrap().contains("is 64"));
        assert_eq!(dns_label_error(&"a".repeat(63)), None);
        assert!(dns_label_error("-a").is_some());
        for ok in ["a", "A_b.c-d", "..a", &"k".repeat(253)] {
            assert_eq!(config_map_key_error(ok), None, "{ok}");
        }
        for bad in ["", ".", "..", "a/b", "a b", "ä", &"k".repeat(254)] {
            assert!(config_map_key_error(bad).is_some(), "{bad}");
        }
    }
}
