//! Packaging an aggregator binary as a Lambda zip: one stored (uncompressed) entry named
//! `bootstrap`, executable, as the `provided.al2023` runtime expects. Written by the `zip`
//! crate.

use std::io::{Cursor, Write};

use zip::CompressionMethod;
use zip::write::{SimpleFileOptions, ZipWriter};

/// A zip archive holding `binary` as the executable file `bootstrap` (mode `0755`).
///
/// # Errors
/// When the archive cannot be written (the `zip` crate's error).
pub(crate) fn bootstrap_zip(binary: &[u8]) -> anyhow::Result<Vec<u8>> {
    let mut zip = ZipWriter::new(Cursor::new(Vec::with_capacity(binary.len() + 200)));
    let options = SimpleFileOptions::default()
        .compression_method(CompressionMethod::Stored)
        .unix_permissions(0o755)
        .large_file(binary.len() > u32::MAX as usize);
    zip.start_file("bootstrap", options)?;
    zip.write_all(binary)?;
    Ok(zip.finish()?.into_inner())
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;

    #[test]
    fn archive_holds_the_binary_as_an_executable_bootstrap() {
        let bytes = bootstrap_zip(b"\x7fELF binary").unwrap();
        assert!(bytes.starts_with(b"PK\x03\x04"));
        let mut archive = zip::ZipArchive::new(Cursor::new(bytes)).unwrap();
        assert_eq!(archive.len(), 1);
        let mut entry = archive.by_name("bootstrap").unwrap();
        assert_eq!(entry.compression(), CompressionMethod::Stored);
        assert_eq!(entry.unix_mode().map(|m| m & 0o777), Some(0o755));
        let mut content = Vec::new();
        entry.read_to_end(&mut content).unwrap();
        assert_eq!(content, b"\x7fELF binary");
    }
}
