//! Loads arbitrary bytes as a control-plane YAML file: the loader must never panic or
//! overflow the stack, and whatever it refuses it refuses with a diagnostic. Deep nesting
//! and alias bombs must be stopped by the YAML limits, not by the machine.

#![no_main]

use kalypso_core::diag::Diagnostics;
use kalypso_core::source::{SourceFile, SourceTree};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let tree = SourceTree::new("fuzz", vec![SourceFile::new("main/f.yaml", data.to_vec())]);
    let mut diagnostics = Diagnostics::new();
    let _ = kalypso_core::load::load_tree(&tree, &mut diagnostics);
});
