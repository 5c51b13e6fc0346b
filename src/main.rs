//! The `kalypso` command.

// Rendering a fleet allocates many small values from several threads; mimalloc handles that
// far better than the system allocator.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    kalypso_cli::main()
}
