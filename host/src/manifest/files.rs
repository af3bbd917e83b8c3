//! Reading files a user or a guest author controls, bounded: only regular files, only up to a
//! size cap. `module: /dev/zero`, a FIFO or a 10 GB file named `guest.yaml` fails with an error
//! naming the file instead of reading forever or exhausting memory.

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;

/// Largest guest module (`.wasm`) read: reconcilers are a few MiB; this leaves ample room.
pub const MAX_MODULE_BYTES: u64 = 128 << 20;

/// Largest object file (`krec dev --apply`, the CRDs `krec rbac` reads): many objects, each at
/// most the API server's 1.5 MiB.
pub const MAX_OBJECT_FILE_BYTES: u64 = 64 << 20;

/// Read the whole of `path`, which must be a regular file (symlinks followed) of at most
/// `max` bytes.
///
/// The file is opened without blocking (a FIFO would otherwise wait for a writer), then checked
/// by its handle, so swapping the file between the check and the read gains nothing.
///
/// # Errors
///
/// The I/O error, or `InvalidInput` saying the file is not a regular file or is too large.
pub fn read_bounded(path: &Path, max: u64) -> io::Result<Vec<u8>> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.custom_flags(libc::O_NONBLOCK);
    }
    let file = options.open(path)?;
    let metadata = file.metadata()?;
    if !metadata.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a regular file",
        ));
    }
    let too_large = |size: u64| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("file of {size} bytes exceeds the {max}-byte limit"),
        )
    };
    if metadata.len() > max {
        return Err(too_large(metadata.len()));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(metadata.len()).unwrap_or(0));
    // A file growing while it is read stops at the cap too.
    File::take(file, max + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        return Err(too_large(bytes.len() as u64));
    }
    Ok(bytes)
}

/// Like [`read_bounded`], as UTF-8 text.
///
/// # Errors
///
/// As [`read_bounded`], or `InvalidData` for text that is not UTF-8.
pub fn read_bounded_text(path: &Path, max: u64) -> io::Result<String> {
    String::from_utf8(read_bounded(path, max)?)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "not UTF-8 text"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_regular_files_under_the_cap_should_be_read() {
        let dir = tempfile::tempdir().expect("tempdir");
        let small = dir.path().join("small");
        std::fs::write(&small, b"hello").expect("write");
        assert_eq!(read_bounded(&small, 5).expect("read"), b"hello");
        let err = read_bounded(&small, 4).expect_err("too large");
        assert!(
            err.to_string().contains("exceeds the 4-byte limit"),
            "{err}"
        );
        let err = read_bounded(dir.path(), 100).expect_err("a directory");
        assert!(err.to_string().contains("not a regular file"), "{err}");
        let err = read_bounded(Path::new("/dev/zero"), 100).expect_err("a device");
        assert!(err.to_string().contains("not a regular file"), "{err}");
        // A FIFO with no writer: opening it must not block.
        let fifo = dir.path().join("fifo");
        let path = std::ffi::CString::new(fifo.to_str().expect("utf-8")).expect("path");
        #[allow(unsafe_code)] // mkfifo(3) has no safe wrapper in std
        let made = unsafe { libc::mkfifo(path.as_ptr(), 0o600) };
        assert_eq!(made, 0, "mkfifo");
        let err = read_bounded(&fifo, 100).expect_err("a FIFO");
        assert!(err.to_string().contains("not a regular file"), "{err}");
    }
}
