//! Sprig (github.com/Masterminds/sprig), the function library every Go template user knows,
//! for kalypso-gotmpl, in two versions: v3.2.3 ([`funcs`]) and v2.22.0 ([`funcs_for`] with
//! [`Version::V2`]), the version the Kalypso scheduler links.
//!
//! v2.22.0 differs from v3 in four ways ([`V3_ONLY`] and [`Version::V2`] list them): the
//! functions added in v3 do not exist; `int`, `int64`, `add`, `add1`, `sub`, `mul`, `div`,
//! `mod`, `max`, `biggest`, `min` and `slice` parse strings as decimal (`int "010"` is 10,
//! v3's spf13/cast reads it as octal 8); `trunc` with a negative length panics instead of
//! keeping the end of the string; and `semver`/`semverCompare` use Masterminds/semver v1.5.0,
//! whose constraints differ from v3's (`semver::v1`).
//!
//! Only deterministic functions are provided: nothing that reads the clock, random numbers,
//! the process environment (`env`, `expandenv`) or generates keys. Templates rendered in a
//! GitOps pipeline must produce the same bytes every time, and must not be able to read
//! secrets from the scheduler's environment.
//!
//! Every function has Go's exact signature (the engine converts and checks arguments against
//! it as Go's reflection does), returns values of Go's types, and fails with Go's messages,
//! including Sprig's panics (which Go's template engine reports like errors).

mod cast;
mod date;
mod defaults;
mod dicts;
mod encoding;
mod json;
mod lists;
mod numeric;
mod paths;
mod regex;
mod semver;
mod strings;
mod url;
mod util;

use kalypso_gotmpl::FuncMap;

/// The Sprig functions that change a map they are given (`set`, `unset`, and the merges,
/// which also change maps nested in their first argument). A template that calls none of
/// them cannot change any map, so its data can be shared by many renders; on a frozen map
/// (see `kalypso_gotmpl::Map::is_frozen`) they fail instead.
pub const CHANGE_MAPS: &[&str] = &[
    "set",
    "unset",
    "merge",
    "mustMerge",
    "mergeOverwrite",
    "mustMergeOverwrite",
];

/// The Sprig functions deliberately left out: they read the environment, the clock, the
/// network or a random source, so the same template could render differently.
pub const EXCLUDED: &[&str] = &[
    "env",
    "expandenv",
    "now",
    "ago",
    "randAlpha",
    "randAlphaNum",
    "randAscii",
    "randNumeric",
    "randBytes",
    "randInt",
    "shuffle",
    "uuidv4",
    "genPrivateKey",
    "genCA",
    "genCAWithKey",
    "genSelfSignedCert",
    "genSelfSignedCertWithKey",
    "genSignedCert",
    "genSignedCertWithKey",
    "buildCustomCert",
    "htpasswd",
    "bcrypt",
    "encryptAES",
    "getHostByName",
];

/// The functions Sprig v3 added: absent from v2.22.0's `functions.go` (its `genericMap`),
/// present in v3.2.3's. Some of them are also [`EXCLUDED`].
pub const V3_ONLY: &[&str] = &[
    "add1f",
    "addf",
    "all",
    "any",
    "bcrypt",
    "chunk",
    "dig",
    "divf",
    "duration",
    "durationRound",
    "fromJson",
    "genCAWithKey",
    "genSelfSignedCertWithKey",
    "genSignedCertWithKey",
    "get",
    "htpasswd",
    "maxf",
    "minf",
    "mulf",
    "mustAppend",
    "mustChunk",
    "mustCompact",
    "mustDateModify",
    "mustDeepCopy",
    "mustFirst",
    "mustFromJson",
    "mustHas",
    "mustInitial",
    "mustLast",
    "mustMerge",
    "mustMergeOverwrite",
    "mustPrepend",
    "mustPush",
    "mustRegexFind",
    "mustRegexFindAll",
    "mustRegexMatch",
    "mustRegexReplaceAll",
    "mustRegexReplaceAllLiteral",
    "mustRegexSplit",
    "mustRest",
    "mustReverse",
    "mustSlice",
    "mustToDate",
    "mustToJson",
    "mustToPrettyJson",
    "mustToRawJson",
    "mustUniq",
    "mustWithout",
    "must_date_modify",
    "osBase",
    "osClean",
    "osDir",
    "osExt",
    "osIsAbs",
    "randBytes",
    "randInt",
    "regexQuoteMeta",
    "seq",
    "subf",
    "toRawJson",
];

/// A Sprig release whose semantics templates run with.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Version {
    /// github.com/Masterminds/sprig v2.22.0, which the original Kalypso scheduler links
    /// (`sprig.TxtFuncMap()` in `scheduler/templater.go`): no [`V3_ONLY`] functions, decimal
    /// string parsing in the integer functions, `trunc` panics on a negative length.
    #[default]
    V2,
    /// github.com/Masterminds/sprig/v3 v3.2.3.
    V3,
}

impl Version {
    /// The name used in settings: `v2` or `v3`.
    pub fn as_str(self) -> &'static str {
        match self {
            Version::V2 => "v2",
            Version::V3 => "v3",
        }
    }

    /// Reads a setting: `v2`, `v2.22`, `v2.22.0` or `v3`, `v3.2`, `v3.2.3` (case-insensitive).
    pub fn parse(text: &str) -> Option<Version> {
        match text.trim().to_ascii_lowercase().as_str() {
            "v2" | "2" | "v2.22" | "v2.22.0" => Some(Version::V2),
            "v3" | "3" | "v3.2" | "v3.2.3" => Some(Version::V3),
            _ => None,
        }
    }
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The functions of the given Sprig version (see [`funcs`] for what is left out).
pub fn funcs_for(version: Version) -> FuncMap {
    let mut m = funcs();
    if version == Version::V2 {
        for name in V3_ONLY {
            m.remove(name);
        }
        numeric::register_int_math(&mut m, cast::to_int64_v2);
        semver::v1::register_all(&mut m);
        util::register(
            &mut m,
            &["slice"],
            util::variadic(
                vec![kalypso_gotmpl::Type::Interface],
                kalypso_gotmpl::Type::Interface,
                |a| lists::slice(a, cast::to_int64_v2),
            ),
        );
        util::register(
            &mut m,
            &["trunc"],
            util::func(
                vec![kalypso_gotmpl::Type::INT, kalypso_gotmpl::Type::String],
                |a| {
                    Ok(util::string_value(strings::trunc_v2(
                        util::arg_int(a, 0),
                        util::arg_bytes(a, 1),
                    )?))
                },
            ),
        );
    }
    m
}

/// Every Sprig v3.2.3 function this crate provides, as Go's `sprig.TxtFuncMap()` minus the
/// non-deterministic and environment-reading ones (see [`EXCLUDED`]).
pub fn funcs() -> FuncMap {
    let mut m = FuncMap::new();
    strings::register_all(&mut m);
    lists::register_all(&mut m);
    dicts::register_all(&mut m);
    numeric::register_all(&mut m);
    defaults::register_all(&mut m);
    encoding::register_all(&mut m);
    regex::register_all(&mut m);
    semver::register_all(&mut m);
    date::register_all(&mut m);
    paths::register_all(&mut m);
    url::register_all(&mut m);
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn environment_functions_are_absent() {
        let m = funcs();
        assert!(!m.contains("env"));
        assert!(!m.contains("expandenv"));
        for name in EXCLUDED {
            assert!(!m.contains(name), "{name} must not be provided");
        }
    }

    #[test]
    fn provides_the_deterministic_sprig_v3_set() {
        let m = funcs();
        for name in [
            "hello",
            "trunc",
            "substr",
            "splitList",
            "toJson",
            "fromJson",
            "mustFromJson",
            "semverCompare",
            "toDate",
            "dateInZone",
            "regexReplaceAll",
            "dig",
            "chunk",
            "seq",
            "addf",
            "toDecimal",
            "derivePassword",
            "decryptAES",
            "urlParse",
            "osBase",
            "slice",
            "tuple",
            "must_date_modify",
            "date_in_zone",
            "deepEqual",
            "all",
            "any",
        ] {
            assert!(m.contains(name), "{name} missing");
        }
        // Not in v3.2.3.
        for name in ["sha512sum", "fromJsonArray", "required", "tpl", "include", "abs"] {
            assert!(!m.contains(name), "{name} is not a Sprig v3.2.3 function");
        }
    }
}
