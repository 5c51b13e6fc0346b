//! A one-shot command turns the kernel's transparent huge pages off for its process (the
//! kernel would zero 2 MiB at each first touch of the allocator's memory; see
//! docs/performance.md, "The allocator's huge pages"). Its own test binary: the setting is the
//! process's, so no other test may run a command here.

use clap::Parser;
use kalypso_cli::{Cli, run};

#[test]
#[cfg(target_os = "linux")]
fn a_one_shot_command_runs_without_huge_pages() {
    if std::env::var_os("MIMALLOC_ALLOW_THP").is_some() {
        // The user told the allocator what to do; the command leaves it so.
        return;
    }
    let control_plane = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/control-plane");
    assert!(!rustix::thread::transparent_huge_pages_are_disabled().unwrap());
    let cli = Cli::try_parse_from(["kalypso", "validate", control_plane, "--env", "dev"]).unwrap();
    assert_eq!(run(cli), std::process::ExitCode::SUCCESS);
    assert!(rustix::thread::transparent_huge_pages_are_disabled().unwrap());
}
