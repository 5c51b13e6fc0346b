//! The `kalypso` command.

fn main() -> std::process::ExitCode {
    kalypso_cli::main()
}
