//! The `krec` binary: the command line lives in [`krec::cli`], one file per command.

fn main() -> std::process::ExitCode {
    krec::cli::main()
}
