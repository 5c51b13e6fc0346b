//! `semver` and `semverCompare` (Sprig's `semver.go`) with Masterminds/semver v3.2.0
//! semantics: loose version parsing (`v1.2` is `1.2.0`), constraints with `||`, `,`, hyphen
//! ranges, `x` wildcards, `~` and v3's `^` (where `^0.2.3` means `>=0.2.3 <0.3.0`), and
//! pre-releases that only satisfy constraints which mention a pre-release themselves.
//!
//! `semver` returns a `*semver.Version` object whose fields the template reaches as methods
//! (`.Major`, `.Prerelease`, `.Compare`, `.IncPatch`...). The parsing regular expressions are
//! the library's own, run through this crate's Go-compatible regexp engine.

pub(crate) mod v1;

use std::any::Any;
use std::cmp::Ordering;
use std::sync::{Arc, OnceLock};

use kalypso_gotmpl::{Func, FuncError, FuncMap, IntKind, Obj, Object, Str, Type, UintKind, Value};

use crate::regex::{GoRegex, compile};
use crate::util::{arg_str, func, register, split};

pub(crate) const SEMVER_REGEX: &str = r"v?([0-9]+)(\.[0-9]+)?(\.[0-9]+)?(-([0-9A-Za-z\-]+(\.[0-9A-Za-z\-]+)*))?(\+([0-9A-Za-z\-]+(\.[0-9A-Za-z\-]+)*))?";
pub(crate) const CV_REGEX: &str = r"v?([0-9|x|X|\*]+)(\.[0-9|x|X|\*]+)?(\.[0-9|x|X|\*]+)?(-([0-9A-Za-z\-]+(\.[0-9A-Za-z\-]+)*))?(\+([0-9A-Za-z\-]+(\.[0-9A-Za-z\-]+)*))?";
pub(crate) const OPS: &str = r"=||!=|>|<|>=|=>|<=|=<|~|~>|\^";

const INVALID_SEMVER: &str = "Invalid Semantic Version";

/// The library's regular expressions (v1.5.0 uses the same `version`, `constraint` and
/// `range` patterns).
pub(crate) struct Regexes {
    pub(crate) version: Arc<GoRegex>,
    pub(crate) constraint: Arc<GoRegex>,
    pub(crate) range: Arc<GoRegex>,
    find: Arc<GoRegex>,
    valid: Arc<GoRegex>,
}

pub(crate) fn regexes() -> Option<&'static Regexes> {
    static CELL: OnceLock<Option<Regexes>> = OnceLock::new();
    CELL.get_or_init(|| {
        let c = |p: String| compile(p.as_bytes()).ok();
        Some(Regexes {
            version: c(format!("^{SEMVER_REGEX}$"))?,
            constraint: c(format!(r"^\s*({OPS})\s*({CV_REGEX})\s*$"))?,
            range: c(format!(r"\s*({CV_REGEX})\s+-\s+({CV_REGEX})\s*"))?,
            find: c(format!(r"({OPS})\s*({CV_REGEX})"))?,
            valid: c(format!(
                r"^(\s*({OPS})\s*({CV_REGEX})\s*)((?:\s+|,\s*)({OPS})\s*({CV_REGEX})\s*)*$"
            ))?,
        })
    })
    .as_ref()
}

pub(crate) fn regex_unavailable() -> FuncError {
    FuncError::new("semver: internal regular expression failed to compile")
}

/// A parsed semantic version (Masterminds/semver's `Version`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Version {
    pub(crate) major: u64,
    pub(crate) minor: u64,
    pub(crate) patch: u64,
    pub(crate) pre: String,
    pub(crate) metadata: String,
    pub(crate) original: String,
}

/// Which Masterminds/semver a version object behaves like: v1.5.0 (Sprig v2.22.0, see
/// [`v1`]) or v3.2.0 (Sprig v3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Library {
    V1,
    V3,
}

fn bytes_str(b: Option<&[u8]>) -> String {
    b.map(|b| String::from_utf8_lossy(b).into_owned())
        .unwrap_or_default()
}

fn parse_segment(text: &str) -> Result<u64, FuncError> {
    text.parse::<u64>().map_err(|_| {
        FuncError::new(format!(
            "Error parsing version segment: strconv.ParseUint: parsing \"{text}\": value out of range"
        ))
    })
}

const ALLOWED: &str = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-0123456789";

fn validate_prerelease(pre: &str) -> Result<(), FuncError> {
    for part in pre.split('.') {
        if !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit()) {
            if part.len() > 1 && part.starts_with('0') {
                return Err(FuncError::new("Version segment starts with 0"));
            }
        } else if !part.chars().all(|c| ALLOWED.contains(c)) {
            return Err(FuncError::new("Invalid Prerelease string"));
        }
    }
    Ok(())
}

fn validate_metadata(meta: &str) -> Result<(), FuncError> {
    for part in meta.split('.') {
        if !part.chars().all(|c| ALLOWED.contains(c)) {
            return Err(FuncError::new("Invalid Metadata string"));
        }
    }
    Ok(())
}

impl Version {
    /// Masterminds/semver `NewVersion`.
    pub(crate) fn parse(v: &[u8]) -> Result<Version, FuncError> {
        let re = regexes().ok_or_else(regex_unavailable)?;
        let Some(m) = re.version.submatch(v) else {
            return Err(FuncError::new(INVALID_SEMVER));
        };
        let group = |i: usize| bytes_str(m.get(i).copied().flatten());
        let mut sv = Version {
            major: parse_segment(&group(1))?,
            minor: 0,
            patch: 0,
            pre: group(5),
            metadata: group(8),
            original: String::from_utf8_lossy(v).into_owned(),
        };
        let minor = group(2);
        if !minor.is_empty() {
            sv.minor = parse_segment(minor.trim_start_matches('.'))?;
        }
        let patch = group(3);
        if !patch.is_empty() {
            sv.patch = parse_segment(patch.trim_start_matches('.'))?;
        }
        if !sv.pre.is_empty() {
            validate_prerelease(&sv.pre)?;
        }
        if !sv.metadata.is_empty() {
            validate_metadata(&sv.metadata)?;
        }
        Ok(sv)
    }

    fn render(&self) -> String {
        let mut s = format!("{}.{}.{}", self.major, self.minor, self.patch);
        if !self.pre.is_empty() {
            s.push('-');
            s.push_str(&self.pre);
        }
        if !self.metadata.is_empty() {
            s.push('+');
            s.push_str(&self.metadata);
        }
        s
    }

    pub(crate) fn compare(&self, o: &Version) -> Ordering {
        self.major
            .cmp(&o.major)
            .then(self.minor.cmp(&o.minor))
            .then(self.patch.cmp(&o.patch))
            .then_with(|| match (self.pre.is_empty(), o.pre.is_empty()) {
                (true, true) => Ordering::Equal,
                (true, false) => Ordering::Greater,
                (false, true) => Ordering::Less,
                (false, false) => compare_prerelease(&self.pre, &o.pre),
            })
    }

    fn v_prefix(&self) -> &'static str {
        if self.original.starts_with('v') { "v" } else { "" }
    }

    fn with_original(mut self, prefix: &str) -> Version {
        self.original = format!("{prefix}{}", self.render());
        self
    }

    fn inc_patch(&self) -> Version {
        let mut next = self.clone();
        next.metadata.clear();
        if self.pre.is_empty() {
            next.patch = self.patch.wrapping_add(1);
        }
        next.pre.clear();
        next.with_original(self.v_prefix())
    }

    fn inc_minor(&self) -> Version {
        let mut next = self.clone();
        next.metadata.clear();
        next.pre.clear();
        next.patch = 0;
        next.minor = self.minor.wrapping_add(1);
        next.with_original(self.v_prefix())
    }

    fn inc_major(&self) -> Version {
        let mut next = self.clone();
        next.metadata.clear();
        next.pre.clear();
        next.patch = 0;
        next.minor = 0;
        next.major = self.major.wrapping_add(1);
        next.with_original(self.v_prefix())
    }
}

fn compare_prerelease(v: &str, o: &str) -> Ordering {
    let sparts: Vec<&str> = v.split('.').collect();
    let oparts: Vec<&str> = o.split('.').collect();
    for i in 0..sparts.len().max(oparts.len()) {
        let s = sparts.get(i).copied().unwrap_or("");
        let o = oparts.get(i).copied().unwrap_or("");
        let d = compare_pre_part(s, o);
        if d != Ordering::Equal {
            return d;
        }
    }
    Ordering::Equal
}

fn compare_pre_part(s: &str, o: &str) -> Ordering {
    if s == o {
        return Ordering::Equal;
    }
    if s.is_empty() {
        return Ordering::Less;
    }
    if o.is_empty() {
        return Ordering::Greater;
    }
    let parse = |x: &str| -> Option<u64> {
        if x.bytes().all(|b| b.is_ascii_digit()) {
            x.parse().ok()
        } else {
            None
        }
    };
    match (parse(s), parse(o)) {
        (None, None) => {
            if s > o {
                Ordering::Greater
            } else {
                Ordering::Less
            }
        }
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (Some(a), Some(b)) => {
            if a > b {
                Ordering::Greater
            } else {
                Ordering::Less
            }
        }
    }
}

/// One operator-and-version constraint: the operator, the version it compares with, and which
/// parts were wildcards (both libraries parse into this; they check it differently).
#[derive(Debug)]
pub(crate) struct Constraint {
    pub(crate) con: Version,
    pub(crate) op: String,
    pub(crate) minor_dirty: bool,
    pub(crate) patch_dirty: bool,
    pub(crate) dirty: bool,
}

pub(crate) fn is_x(s: &str) -> bool {
    matches!(s, "x" | "*" | "X")
}

fn parse_constraint(c: &str) -> Result<Constraint, FuncError> {
    let re = regexes().ok_or_else(regex_unavailable)?;
    if c.is_empty() {
        return Ok(Constraint {
            con: Version::parse(b"0.0.0")?,
            op: String::new(),
            minor_dirty: false,
            patch_dirty: false,
            dirty: true,
        });
    }
    let Some(m) = re.constraint.submatch(c.as_bytes()) else {
        return Err(FuncError::new(format!("improper constraint: {c}")));
    };
    let g = |i: usize| bytes_str(m.get(i).copied().flatten());
    let (m3, m4, m5, m6) = (g(3), g(4), g(5), g(6));
    let mut ver = g(2);
    let (mut minor_dirty, mut patch_dirty, mut dirty) = (false, false, false);
    if is_x(&m3) || m3.is_empty() {
        ver = format!("0.0.0{m6}");
        dirty = true;
    } else if is_x(m4.trim_start_matches('.')) || m4.is_empty() {
        minor_dirty = true;
        dirty = true;
        ver = format!("{m3}.0.0{m6}");
    } else if is_x(m5.trim_start_matches('.')) || m5.is_empty() {
        dirty = true;
        patch_dirty = true;
        ver = format!("{m3}{m4}.0{m6}");
    }
    let con = Version::parse(ver.as_bytes()).map_err(|_| FuncError::new("constraint Parser Error"))?;
    Ok(Constraint {
        con,
        op: g(1),
        minor_dirty,
        patch_dirty,
        dirty,
    })
}

impl Constraint {
    fn check(&self, v: &Version) -> bool {
        let c = &self.con;
        let pre_blocked = !v.pre.is_empty() && c.pre.is_empty();
        match self.op.as_str() {
            "" | "=" => {
                if pre_blocked {
                    return false;
                }
                if self.dirty {
                    return self.tilde(v);
                }
                v.compare(c) == Ordering::Equal
            }
            "!=" => self.not_equal(v),
            ">" => {
                if pre_blocked {
                    return false;
                }
                if !self.dirty {
                    return v.compare(c) == Ordering::Greater;
                }
                if v.major > c.major {
                    return true;
                }
                if v.major < c.major || self.minor_dirty {
                    return false;
                }
                if self.patch_dirty {
                    return v.minor > c.minor;
                }
                v.compare(c) == Ordering::Greater
            }
            "<" => !pre_blocked && v.compare(c) == Ordering::Less,
            ">=" | "=>" => !pre_blocked && v.compare(c) != Ordering::Less,
            "<=" | "=<" => {
                if pre_blocked {
                    return false;
                }
                if !self.dirty {
                    return v.compare(c) != Ordering::Greater;
                }
                if v.major > c.major {
                    return false;
                }
                !(v.major == c.major && v.minor > c.minor && !self.minor_dirty)
            }
            "~" | "~>" => !pre_blocked && self.tilde(v),
            "^" => !pre_blocked && self.caret(v),
            _ => false,
        }
    }

    fn not_equal(&self, v: &Version) -> bool {
        let c = &self.con;
        if self.dirty {
            if !v.pre.is_empty() && c.pre.is_empty() {
                return false;
            }
            if c.major != v.major {
                return true;
            }
            if c.minor != v.minor && !self.minor_dirty {
                return true;
            } else if self.minor_dirty {
                return false;
            } else if c.patch != v.patch && !self.patch_dirty {
                return true;
            } else if self.patch_dirty {
                if !v.pre.is_empty() || !c.pre.is_empty() {
                    return compare_prerelease(&v.pre, &c.pre) != Ordering::Equal;
                }
                return false;
            }
        }
        v.compare(c) != Ordering::Equal
    }

    fn tilde(&self, v: &Version) -> bool {
        let c = &self.con;
        if !v.pre.is_empty() && c.pre.is_empty() {
            return false;
        }
        if v.compare(c) == Ordering::Less {
            return false;
        }
        if c.major == 0 && c.minor == 0 && c.patch == 0 && !self.minor_dirty && !self.patch_dirty {
            return true;
        }
        if v.major != c.major {
            return false;
        }
        v.minor == c.minor || self.minor_dirty
    }

    fn caret(&self, v: &Version) -> bool {
        let c = &self.con;
        if v.compare(c) == Ordering::Less {
            return false;
        }
        if c.major > 0 || self.minor_dirty {
            return v.major == c.major;
        }
        if v.major > 0 {
            return false;
        }
        if c.minor > 0 || self.patch_dirty {
            return v.minor == c.minor;
        }
        if v.minor > 0 {
            return false;
        }
        c.patch == v.patch
    }
}

/// Masterminds/semver `NewConstraint`: `||`-separated groups of `,`/space-separated
/// constraints.
fn parse_constraints(text: &str) -> Result<Vec<Vec<Constraint>>, FuncError> {
    let re = regexes().ok_or_else(regex_unavailable)?;
    // Rewrite hyphen ranges "a - b" into ">= a, <= b ".
    let mut c = text.to_owned();
    for m in re.range.all_submatches(text.as_bytes()) {
        let whole = bytes_str(m.first().copied().flatten());
        let lo = bytes_str(m.get(1).copied().flatten());
        let hi = bytes_str(m.get(11).copied().flatten());
        c = c.replacen(&whole, &format!(">= {lo}, <= {hi} "), 1);
    }
    let mut groups = Vec::new();
    for part in split(c.as_bytes(), b"||") {
        let part_text = String::from_utf8_lossy(&part).into_owned();
        if !re.valid.is_match(&part) {
            return Err(FuncError::new(format!("improper constraint: {part_text}")));
        }
        let found: Vec<String> = re
            .find
            .all_submatches(&part)
            .into_iter()
            .map(|m| bytes_str(m.first().copied().flatten()))
            .collect();
        let found = if found.is_empty() { vec![part_text] } else { found };
        groups.push(
            found
                .iter()
                .map(|s| parse_constraint(s))
                .collect::<Result<Vec<_>, _>>()?,
        );
    }
    Ok(groups)
}

/// Sprig's `semverCompare`.
fn semver_compare(constraint: &str, version: &[u8]) -> Result<bool, FuncError> {
    let groups = parse_constraints(constraint)?;
    let v = Version::parse(version)?;
    Ok(groups.iter().any(|and| and.iter().all(|c| c.check(&v))))
}

/// A `*semver.Version` (or, from `IncPatch` and friends, a `semver.Version`) in a template.
#[derive(Debug)]
struct VersionObject {
    version: Version,
    pointer: bool,
    library: Library,
}

const POINTER_TYPE: &str = "*semver.Version";

pub(crate) fn version_value(version: Version, pointer: bool, library: Library) -> Value {
    Value::Object(Arc::new(VersionObject {
        version,
        pointer,
        library,
    }))
}

fn version_of(v: &Value) -> Option<&Version> {
    match v {
        Value::Object(o) => o.as_any().downcast_ref::<VersionObject>().map(|vo| &vo.version),
        _ => None,
    }
}

impl Object for VersionObject {
    fn deep_equal(&self, other: &dyn Object) -> Option<bool> {
        other
            .as_any()
            .downcast_ref::<VersionObject>()
            .map(|y| self.pointer == y.pointer && self.version == y.version)
    }

    fn type_name(&self) -> Str {
        Str::from(if self.pointer {
            POINTER_TYPE
        } else {
            "semver.Version"
        })
    }

    fn kind_name(&self) -> &'static str {
        if self.pointer { "ptr" } else { "struct" }
    }

    fn method(&self, name: &str) -> Option<Func> {
        let v = self.version.clone();
        let ptr = || Type::Named(Str::from(POINTER_TYPE));
        let library = self.library;
        // v1.5.0's segments are int64, v3's uint64.
        let segment = move |n: u64| match library {
            Library::V1 => Value::Int(i64::try_from(n).unwrap_or(i64::MAX), IntKind::Int64),
            Library::V3 => Value::Uint(n, UintKind::Uint64),
        };
        let valid = move |text: &str, invalid: &str| -> Result<(), FuncError> {
            match library {
                Library::V1 if v1::valid_label(text) => Ok(()),
                Library::V1 => Err(FuncError::new(invalid)),
                Library::V3 if invalid.contains("Prerelease") => validate_prerelease(text),
                Library::V3 => validate_metadata(text),
            }
        };
        Some(match name {
            "Major" => func(vec![], move |_| Ok(segment(v.major))),
            "Minor" => func(vec![], move |_| Ok(segment(v.minor))),
            "Patch" => func(vec![], move |_| Ok(segment(v.patch))),
            "Prerelease" => func(vec![], move |_| Ok(Value::string(v.pre.as_str()))),
            "Metadata" => func(vec![], move |_| Ok(Value::string(v.metadata.as_str()))),
            "Original" if self.pointer => func(vec![], move |_| Ok(Value::string(v.original.as_str()))),
            "String" => func(vec![], move |_| Ok(Value::string(v.render()))),
            "IncPatch" => func(vec![], move |_| Ok(version_value(v.inc_patch(), false, library))),
            "IncMinor" => func(vec![], move |_| Ok(version_value(v.inc_minor(), false, library))),
            "IncMajor" => func(vec![], move |_| Ok(version_value(v.inc_major(), false, library))),
            "SetPrerelease" => func(vec![Type::String], move |a| {
                let pre = arg_str(a, 0).to_string();
                if !pre.is_empty() {
                    valid(&pre, "Invalid Prerelease string")?;
                }
                let mut next = v.clone();
                next.pre = pre;
                let prefix = v.v_prefix();
                Ok(version_value(next.with_original(prefix), false, library))
            }),
            "SetMetadata" => func(vec![Type::String], move |a| {
                let meta = arg_str(a, 0).to_string();
                if !meta.is_empty() {
                    valid(&meta, "Invalid Metadata string")?;
                }
                let mut next = v.clone();
                next.metadata = meta;
                let prefix = v.v_prefix();
                Ok(version_value(next.with_original(prefix), false, library))
            }),
            "Compare" | "LessThan" | "GreaterThan" | "Equal" if self.pointer => {
                let which = name.to_owned();
                func(vec![ptr()], move |a| {
                    let Some(o) = a.first().and_then(version_of) else {
                        return Err(FuncError::new(crate::util::NIL_DEREF));
                    };
                    let ord = v.compare(o);
                    Ok(match which.as_str() {
                        "Compare" => Value::int(match ord {
                            Ordering::Less => -1,
                            Ordering::Equal => 0,
                            Ordering::Greater => 1,
                        }),
                        "LessThan" => Value::Bool(ord == Ordering::Less),
                        "GreaterThan" => Value::Bool(ord == Ordering::Greater),
                        _ => Value::Bool(ord == Ordering::Equal),
                    })
                })
            }
            _ => return None,
        })
    }

    fn go_string(&self) -> Option<String> {
        Some(self.version.render())
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// A semver object's JSON (its `MarshalJSON` encodes `String()`), if `o` is one.
pub(crate) fn marshal_json(o: &Obj) -> Option<String> {
    o.as_any()
        .downcast_ref::<VersionObject>()
        .map(|v| v.version.render())
}

/// Registers `semver` and `semverCompare`.
pub(crate) fn register_all(m: &mut FuncMap) {
    register_with(m, Library::V3, Version::parse, semver_compare);
}

/// Registers `semver` and `semverCompare` with one library's version parser and constraint
/// check.
pub(crate) fn register_with(
    m: &mut FuncMap,
    library: Library,
    parse: fn(&[u8]) -> Result<Version, FuncError>,
    compare: fn(&str, &[u8]) -> Result<bool, FuncError>,
) {
    register(
        m,
        &["semver"],
        func(vec![Type::String], move |a| {
            Ok(version_value(parse(arg_str(a, 0).as_bytes())?, true, library))
        }),
    );
    register(
        m,
        &["semverCompare"],
        func(vec![Type::String, Type::String], move |a| {
            let constraint = arg_str(a, 0).to_string();
            Ok(Value::Bool(compare(&constraint, arg_str(a, 1).as_bytes())?))
        }),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(c: &str, v: &str) -> bool {
        semver_compare(c, v.as_bytes()).unwrap()
    }

    #[test]
    fn parses_loose_versions() {
        let v = Version::parse(b"1.2.3-alpha.1+b5").unwrap();
        assert_eq!((v.major, v.minor, v.patch), (1, 2, 3));
        assert_eq!(v.pre, "alpha.1");
        assert_eq!(v.metadata, "b5");
        assert_eq!(Version::parse(b"v1.2").unwrap().render(), "1.2.0");
        assert_eq!(
            Version::parse(b"not.a.version").unwrap_err().message(),
            INVALID_SEMVER
        );
        assert_eq!(
            Version::parse(b"1.2.3-01").unwrap_err().message(),
            "Version segment starts with 0"
        );
    }

    #[test]
    fn constraints_follow_semver_v3() {
        assert!(check(">=1.2.0-0", "1.2.3-beta.1"));
        assert!(!check(">=1.2.0", "1.2.3-beta.1"));
        assert!(!check("^0.2.3", "0.3.0"));
        assert!(!check("^0.0.3", "0.0.4"));
        assert!(check("^1.2.3", "1.9.0"));
        assert!(check("~1.2.3", "1.2.9"));
        assert!(!check("~1.2.3", "1.3.0"));
        assert!(check("1.2 - 1.4", "1.3.5"));
        assert!(check(">1.0 <2.0 || =3.0.0", "3.0.0"));
        assert!(check("1.x", "1.9.9"));
        assert!(check("!=1.2.3", "1.2.4"));
        assert!(check("*", "5.0.0"));
        assert_eq!(
            semver_compare("foo", b"1.0.0").unwrap_err().message(),
            "improper constraint: foo"
        );
    }

    #[test]
    fn compare_prerelease_parts() {
        let a = Version::parse(b"1.0.0-alpha.2").unwrap();
        let b = Version::parse(b"1.0.0-alpha.10").unwrap();
        assert_eq!(a.compare(&b), Ordering::Less);
        let c = Version::parse(b"1.0.0-alpha").unwrap();
        assert_eq!(c.compare(&a), Ordering::Less);
        assert_eq!(
            Version::parse(b"v1.2.3-rc.1").unwrap().inc_patch().original,
            "v1.2.3"
        );
    }
}
