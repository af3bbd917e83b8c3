//! The `krec` binary: the command line lives in [`krec::cli`], one file per command.

/// mimalloc instead of glibc's allocator: the embedded API server allocates and frees hundreds of
/// small values per request (decoded bodies, defaults, field sets), and mimalloc's thread-local
/// free lists do that in a sixth fewer instructions per write (BENCHMARKS.md, "Embedded API
/// server before and after issue 11"). The process opts out of transparent huge pages at start
/// (`krec::cli::main`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    krec::cli::main()
}
