//! The kalypso binary needs no system library beyond the C runtime: libgit2, libssh2, OpenSSL
//! and zlib are built from source and linked in (see the `git2` and `libz-sys` features in
//! the workspace's Cargo.toml). So a fresh machine with only the Rust toolchain and a C
//! compiler builds it (`.ci/run` installs no library headers) and the binary runs on any
//! machine with glibc. The test reads the binary's dynamic section: a `-sys` crate that
//! links a system library (`libssl.so.3`, `libz.so.1`...) would show up there.

#![cfg(target_os = "linux")]

use object::read::elf::{Dyn, ElfFile64, FileHeader};
use object::{Endianness, elf};

/// The libraries of glibc and the compiler runtime, present on every Linux machine.
const C_RUNTIME: &[&str] = &[
    "libc.so.6",
    "libm.so.6",
    "libgcc_s.so.1",
    "libpthread.so.0",
    "libdl.so.2",
    "librt.so.1",
    "ld-linux-x86-64.so.2",
    "ld-linux-aarch64.so.1",
];

/// The `DT_NEEDED` entries of the ELF file `data`.
fn needed(data: &[u8]) -> Vec<String> {
    let file = ElfFile64::<Endianness>::parse(data).expect("the kalypso binary is a 64-bit ELF file");
    let endian = file.endian();
    let sections = file
        .elf_header()
        .sections(endian, data)
        .expect("the binary has a section table");
    let (dynamic, link) = sections
        .dynamic(endian, data)
        .expect("readable dynamic section")
        .expect("the binary is dynamically linked");
    let strings = sections.strings(endian, data, link).expect("its string table");
    dynamic
        .iter()
        .filter(|d| d.d_tag(endian) == elf::DT_NEEDED)
        .map(|d| {
            let offset = u32::try_from(d.d_val(endian)).expect("a 32-bit string offset");
            String::from_utf8_lossy(strings.get(offset).expect("a library name")).into_owned()
        })
        .collect()
}

#[test]
fn the_binary_links_only_the_c_runtime() {
    let data = std::fs::read(env!("CARGO_BIN_EXE_kalypso")).expect("the kalypso binary");
    let libraries = needed(&data);
    assert!(
        libraries.iter().any(|l| l == "libc.so.6"),
        "the dynamic section was not read: {libraries:?}"
    );
    let system: Vec<&String> = libraries
        .iter()
        .filter(|l| !C_RUNTIME.contains(&l.as_str()))
        .collect();
    assert!(
        system.is_empty(),
        "the kalypso binary links system libraries {system:?} (all it needs: {libraries:?}); \
         build them from source (a `vendored`/`static` feature) so that a machine with only the \
         Rust toolchain builds and runs it"
    );
}
