//! `semver` and `semverCompare` as Sprig v2.22.0 has them: with Masterminds/semver **v1.5.0**,
//! the library it links, whose constraints differ from v3's ([`crate::semver`]) in ways a
//! template can see:
//!
//! - AND terms are separated by commas only: `">= 1.2 < 2"` is an improper constraint (v3
//!   accepts spaces);
//! - a missing patch (`=1.2`) is the exact version `1.2.0`, not `~1.2`;
//! - `^0.2.3` is `>= 0.2.3, < 1.0.0` (v3: `< 0.3.0`), `> 1.x` compares with `1.0.0`, and
//!   `< 1.x` / `<= 1.x` accept every `1.*`;
//! - versions accept any pre-release text (`1.2.3-01`), and `.Major`, `.Minor`, `.Patch`
//!   are `int64`.
//!
//! Each constraint function follows v1.5.0's `constraints.go`; versions compare as in v3 (the
//! comparison did not change).

use std::cmp::Ordering;

use kalypso_gotmpl::{FuncError, FuncMap};

use super::{Constraint, Library, Regexes, Version, is_x, regex_unavailable, register_with};

fn regexes() -> Result<&'static Regexes, FuncError> {
    super::regexes().ok_or_else(regex_unavailable)
}

fn group(m: &[Option<&[u8]>], i: usize) -> String {
    m.get(i)
        .copied()
        .flatten()
        .map(|b| String::from_utf8_lossy(b).into_owned())
        .unwrap_or_default()
}

/// `strconv.ParseInt(text, 10, 64)` as v1.5.0 wraps its error.
fn parse_segment(text: &str) -> Result<u64, FuncError> {
    match text.parse::<i64>() {
        Ok(n) => Ok(n.unsigned_abs()),
        Err(_) => Err(FuncError::new(format!(
            "Error parsing version segment: strconv.ParseInt: parsing \"{text}\": value out of range"
        ))),
    }
}

/// v1.5.0's `NewVersion`: the pre-release and metadata are not validated beyond the pattern.
pub(crate) fn parse_version(v: &[u8]) -> Result<Version, FuncError> {
    let re = regexes()?;
    let Some(m) = re.version.submatch(v) else {
        return Err(FuncError::new("Invalid Semantic Version"));
    };
    let segment = |i: usize| -> Result<u64, FuncError> {
        let text = group(&m, i);
        if text.is_empty() {
            Ok(0)
        } else {
            parse_segment(text.trim_start_matches('.'))
        }
    };
    Ok(Version {
        major: segment(1)?,
        minor: segment(2)?,
        patch: segment(3)?,
        pre: group(&m, 5),
        metadata: group(&m, 8),
        original: String::from_utf8_lossy(v).into_owned(),
    })
}

/// v1.5.0's `validPrereleaseRegex`, for `SetPrerelease` and `SetMetadata`.
pub(crate) fn valid_label(text: &str) -> bool {
    text.split('.')
        .all(|part| !part.is_empty() && part.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'))
}

fn parse_constraint(c: &str) -> Result<Constraint, FuncError> {
    let re = regexes()?;
    let Some(m) = re.constraint.submatch(c.as_bytes()) else {
        return Err(FuncError::new(format!("improper constraint: {c}")));
    };
    let (m3, m4, m5, m6) = (group(&m, 3), group(&m, 4), group(&m, 5), group(&m, 6));
    let mut ver = group(&m, 2);
    let (mut minor_dirty, mut patch_dirty, mut dirty) = (false, false, false);
    if is_x(&m3) {
        ver = "0.0.0".to_owned();
        dirty = true;
    } else if is_x(m4.trim_start_matches('.')) || m4.is_empty() {
        minor_dirty = true;
        dirty = true;
        ver = format!("{m3}.0.0{m6}");
    } else if is_x(m5.trim_start_matches('.')) {
        dirty = true;
        patch_dirty = true;
        ver = format!("{m3}{m4}.0{m6}");
    }
    let con = parse_version(ver.as_bytes()).map_err(|_| FuncError::new("constraint Parser Error"))?;
    Ok(Constraint {
        op: group(&m, 1),
        con,
        minor_dirty,
        patch_dirty,
        dirty,
    })
}

/// v1.5.0's check of one constraint (`constraints.go`, the `constraint*` functions).
fn check(constraint: &Constraint, v: &Version) -> bool {
    let c = &constraint.con;
    let (dirty, minor_dirty) = (constraint.dirty, constraint.minor_dirty);
    if constraint.op == "!=" && !dirty {
        return v.compare(c) != Ordering::Equal;
    }
    // Every other v1.5.0 constraint function starts with this (its issue 21).
    if !v.pre.is_empty() && c.pre.is_empty() {
        return false;
    }
    match constraint.op.as_str() {
        "" | "=" if dirty => tilde(constraint, v),
        "" | "=" => v.compare(c) == Ordering::Equal,
        "!=" => c.major != v.major || (c.minor != v.minor && !minor_dirty),
        ">" => v.compare(c) == Ordering::Greater,
        ">=" | "=>" => v.compare(c) != Ordering::Less,
        "<" | "<=" | "=<" if dirty => !(v.major > c.major || (v.minor > c.minor && !minor_dirty)),
        "<" => v.compare(c) == Ordering::Less,
        "<=" | "=<" => v.compare(c) != Ordering::Greater,
        "~" | "~>" => tilde(constraint, v),
        "^" => v.compare(c) != Ordering::Less && v.major == c.major,
        _ => false,
    }
}

/// v1.5.0's `constraintTilde`.
fn tilde(constraint: &Constraint, v: &Version) -> bool {
    let c = &constraint.con;
    if v.compare(c) == Ordering::Less {
        return false;
    }
    if c.major == 0 && c.minor == 0 && c.patch == 0 && !constraint.minor_dirty && !constraint.patch_dirty {
        return true;
    }
    v.major == c.major && (v.minor == c.minor || constraint.minor_dirty)
}

/// v1.5.0's `NewConstraint`: hyphen ranges rewritten, `||` groups of `,`-separated terms.
fn parse_constraints(text: &str) -> Result<Vec<Vec<Constraint>>, FuncError> {
    let re = regexes()?;
    let mut c = text.to_owned();
    for m in re.range.all_submatches(text.as_bytes()) {
        let whole = group(&m, 0);
        let rewritten = format!(">= {}, <= {}", group(&m, 1), group(&m, 11));
        c = c.replacen(&whole, &rewritten, 1);
    }
    c.split("||")
        .map(|or| or.split(',').map(parse_constraint).collect())
        .collect()
}

/// Sprig v2.22.0's `semverCompare`.
fn semver_compare(constraint: &str, version: &[u8]) -> Result<bool, FuncError> {
    let groups = parse_constraints(constraint)?;
    let v = parse_version(version)?;
    Ok(groups.iter().any(|and| and.iter().all(|c| check(c, &v))))
}

/// Replaces `semver` and `semverCompare` with Sprig v2.22.0's.
pub(crate) fn register_all(m: &mut FuncMap) {
    register_with(m, Library::V1, parse_version, semver_compare);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(c: &str, v: &str) -> Result<bool, String> {
        semver_compare(c, v.as_bytes()).map_err(|e| e.message().to_owned())
    }

    #[test]
    fn and_terms_are_separated_by_commas_only() {
        assert_eq!(check(">= 1.2, < 2", "1.5.0"), Ok(true));
        assert_eq!(
            check(">= 1.2 < 2", "1.5.0"),
            Err("improper constraint: >= 1.2 < 2".to_owned())
        );
        assert_eq!(check("", "1.5.0"), Err("improper constraint: ".to_owned())); // as in v3
        assert_eq!(check("1.2 - 1.4", "1.4.0"), Ok(true));
        assert_eq!(check("1.2 - 1.4", "1.4.1"), Ok(false));
        assert_eq!(check("<1 || >=3", "3.1.0"), Ok(true));
    }

    #[test]
    fn wildcards_and_missing_parts_follow_v1() {
        // A missing patch is exact in v1 (v3: ~1.2).
        assert_eq!(check("=1.2", "1.2.5"), Ok(false));
        assert_eq!(check("=1.2", "1.2.0"), Ok(true));
        assert_eq!(check("1.2.x", "1.2.5"), Ok(true));
        assert_eq!(check("1", "1.9.0"), Ok(true));
        assert_eq!(check("*", "7.0.0"), Ok(true));
        // `> 1.x` compares with 1.0.0 (v3: > 1.*, so 2.0.0 and up).
        assert_eq!(check("> 1.x", "1.5.0"), Ok(true));
        // `< 1.x` accepts every 1.* (v3: < 1.0.0).
        assert_eq!(check("< 1.x", "1.5.0"), Ok(true));
        assert_eq!(check("< 1.x", "2.0.0"), Ok(false));
        assert_eq!(check("!= 1.x", "1.3.0"), Ok(false));
        assert_eq!(check("!= 1.x", "2.3.0"), Ok(true));
    }

    #[test]
    fn caret_keeps_the_major_version_even_below_one() {
        assert_eq!(check("^0.2.3", "0.9.0"), Ok(true));
        assert_eq!(check("^0.2.3", "1.0.0"), Ok(false));
        assert_eq!(check("^1.2", "1.9.9"), Ok(true));
        assert_eq!(check("~1.2.3", "1.2.9"), Ok(true));
        assert_eq!(check("~1.2.3", "1.3.0"), Ok(false));
    }

    #[test]
    fn prereleases_need_a_prerelease_constraint() {
        assert_eq!(check(">= 1.0.0", "1.2.0-beta"), Ok(false));
        assert_eq!(check(">= 1.0.0-0", "1.2.0-beta"), Ok(true));
        // `!=` without a wildcard does not exclude pre-releases.
        assert_eq!(check("!= 1.0.0", "1.2.0-beta"), Ok(true));
        assert_eq!(check("~*", "3.0.0"), Ok(true));
    }

    #[test]
    fn versions_take_any_prerelease_text() {
        let v = parse_version(b"1.2.3-01").unwrap();
        assert_eq!(v.pre, "01");
        assert_eq!(
            parse_version(b"99999999999999999999").unwrap_err().message(),
            "Error parsing version segment: strconv.ParseInt: parsing \"99999999999999999999\": value out of range"
        );
        assert!(valid_label("rc.1") && !valid_label("rc..1") && !valid_label("rc_1"));
    }
}
