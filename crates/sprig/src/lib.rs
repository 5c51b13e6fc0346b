//! Sprig v3 (github.com/Masterminds/sprig/v3), the function library every Go template user
//! knows, for kalypso-gotmpl.
//!
//! Only deterministic functions are provided: nothing that reads the clock, random numbers,
//! the process environment (`env`, `expandenv`) or generates keys. Templates rendered in a
//! GitOps pipeline must produce the same bytes every time, and must not be able to read
//! secrets from the scheduler's environment.

use kalypso_gotmpl::FuncMap;

/// Every Sprig function this crate provides, as Go's `sprig.TxtFuncMap()` minus the
/// non-deterministic and environment-reading ones.
pub fn funcs() -> FuncMap {
    FuncMap::new()
}
