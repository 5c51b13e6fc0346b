//! Set-up shared by the tests of this folder (each test file that needs it says `mod common;`).

#[allow(dead_code)] // Each test file uses a part.
pub mod rollout;
