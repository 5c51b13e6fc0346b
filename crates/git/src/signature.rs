//! Signed webhooks: `sha256=<hex>` HMAC-SHA256 signatures of a request body, as GitHub sends
//! them for push events (`X-Hub-Signature-256`, checked by `kalypso serve`) and Flux's
//! `generic-hmac` Provider sends them for cluster reports (`X-Signature`, checked by
//! `kalypso hub`). One implementation for both, with a constant-time comparison; Gitea's and
//! Forgejo's bare-hex form of the same signature (`X-Gitea-Signature`); and the
//! shared-secret token GitLab sends instead (`X-Gitlab-Token`, and Azure DevOps' Basic
//! password), compared in constant time too.

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Whether `signature` (`sha256=<hex>`) is the HMAC-SHA256 of `body` with `secret`. The
/// comparison takes constant time.
pub fn verify(secret: &[u8], body: &[u8], signature: &str) -> bool {
    let Some(hex_digest) = signature.trim().strip_prefix("sha256=") else {
        return false;
    };
    verify_hex(secret, body, hex_digest)
}

/// Whether `hex_digest` (bare hex, as Gitea's `X-Gitea-Signature`) is the HMAC-SHA256 of
/// `body` with `secret`. The comparison takes constant time.
pub fn verify_hex(secret: &[u8], body: &[u8], hex_digest: &str) -> bool {
    let Ok(expected) = hex::decode(hex_digest.trim()) else {
        return false;
    };
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(secret) else {
        return false;
    };
    mac.update(body);
    mac.verify_slice(&expected).is_ok()
}

/// Whether `token` (GitLab's `X-Gitlab-Token`: the secret itself) is `secret`. Both are
/// turned into an HMAC of the same message with themselves as the key, and the two are
/// compared in constant time: neither the secret's bytes nor its length show in the time.
pub fn token_matches(secret: &[u8], token: &[u8]) -> bool {
    const MESSAGE: &[u8] = b"kalypso webhook token";
    let (Ok(mut expected), Ok(mut given)) = (
        Hmac::<Sha256>::new_from_slice(secret),
        Hmac::<Sha256>::new_from_slice(token),
    ) else {
        return false;
    };
    expected.update(MESSAGE);
    given.update(MESSAGE);
    given.verify_slice(&expected.finalize().into_bytes()).is_ok()
}

/// The `sha256=<hex>` signature of `body` with `secret`, as a sender puts it in its header.
pub fn sign(secret: &[u8], body: &[u8]) -> String {
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(secret) else {
        return String::new();
    };
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_match_only_the_secret_itself() {
        assert!(token_matches(b"s3cret", b"s3cret"));
        for other in [&b""[..], b"s3cre", b"s3cret ", b"S3cret", b"x"] {
            assert!(!token_matches(b"s3cret", other), "{other:?}");
        }
    }

    #[test]
    fn signatures_verify_only_with_the_right_secret_and_body() {
        let body = b"{\"ref\":\"refs/heads/dev\"}";
        let header = sign(b"s3cret", body);
        assert!(header.starts_with("sha256="));
        assert!(verify(b"s3cret", body, &header));
        assert!(!verify(b"other", body, &header));
        assert!(!verify(b"s3cret", b"{\"ref\":\"refs/heads/main\"}", &header));
        assert!(!verify(b"s3cret", b"x", "sha1=abcd"));
        assert!(!verify(b"s3cret", b"x", "sha256=zz"));
        let bare = header.strip_prefix("sha256=").unwrap();
        assert!(verify_hex(b"s3cret", body, bare));
        assert!(!verify_hex(b"s3cret", body, header.as_str()));
        assert!(!verify_hex(b"other", body, bare));
        assert!(!verify_hex(b"s3cret", body, ""));
    }
}
