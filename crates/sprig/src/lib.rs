//! Sprig v3 (github.com/Masterminds/sprig/v3), the function library every Go template user
//! knows, for kalypso-gotmpl.
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

/// Every Sprig function this crate provides, as Go's `sprig.TxtFuncMap()` minus the
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
