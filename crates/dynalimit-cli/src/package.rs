//! Packaging an aggregator binary as a Lambda zip: one stored (uncompressed) entry named
//! `bootstrap`, executable, as the `provided.al2023` runtime expects.

fn crc32(data: &[u8]) -> u32 {
    let mut crc = 0xffff_ffffu32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            let mask = (crc & 1).wrapping_neg();
            crc = (crc >> 1) ^ (0xedb8_8320 & mask);
        }
    }
    !crc
}

/// A zip archive holding `binary` as the executable file `bootstrap`.
///
/// # Errors
/// When the binary is larger than a zip without ZIP64 can hold (4 GiB).
pub(crate) fn bootstrap_zip(binary: &[u8]) -> anyhow::Result<Vec<u8>> {
    let size = u32::try_from(binary.len())
        .map_err(|_| anyhow::anyhow!("the aggregator binary is larger than 4 GiB"))?;
    let name = b"bootstrap";
    let crc = crc32(binary);
    let mut out = Vec::with_capacity(binary.len() + 200);
    let u16le = |v: u16| v.to_le_bytes();
    let u32le = |v: u32| v.to_le_bytes();
    // Local file header.
    out.extend_from_slice(&u32le(0x0403_4b50));
    out.extend_from_slice(&u16le(20)); // version needed
    out.extend_from_slice(&u16le(0)); // flags
    out.extend_from_slice(&u16le(0)); // stored
    out.extend_from_slice(&u16le(0)); // time
    out.extend_from_slice(&u16le(0x21)); // date 1980-01-01
    out.extend_from_slice(&u32le(crc));
    out.extend_from_slice(&u32le(size));
    out.extend_from_slice(&u32le(size));
    out.extend_from_slice(&u16le(name.len() as u16));
    out.extend_from_slice(&u16le(0));
    out.extend_from_slice(name);
    out.extend_from_slice(binary);
    let central = out.len();
    // Central directory entry, made by Unix (3) so the mode bits count: -rwxr-xr-x.
    out.extend_from_slice(&u32le(0x0201_4b50));
    out.extend_from_slice(&u16le(0x0314));
    out.extend_from_slice(&u16le(20));
    out.extend_from_slice(&u16le(0));
    out.extend_from_slice(&u16le(0));
    out.extend_from_slice(&u16le(0));
    out.extend_from_slice(&u16le(0x21));
    out.extend_from_slice(&u32le(crc));
    out.extend_from_slice(&u32le(size));
    out.extend_from_slice(&u32le(size));
    out.extend_from_slice(&u16le(name.len() as u16));
    out.extend_from_slice(&u16le(0)); // extra
    out.extend_from_slice(&u16le(0)); // comment
    out.extend_from_slice(&u16le(0)); // disk
    out.extend_from_slice(&u16le(0)); // internal attributes
    out.extend_from_slice(&u32le(0o100_755 << 16)); // external attributes
    out.extend_from_slice(&u32le(0)); // offset of the local header
    out.extend_from_slice(name);
    let central_size = out.len() - central;
    // End of central directory.
    out.extend_from_slice(&u32le(0x0605_4b50));
    out.extend_from_slice(&u16le(0));
    out.extend_from_slice(&u16le(0));
    out.extend_from_slice(&u16le(1));
    out.extend_from_slice(&u16le(1));
    out.extend_from_slice(&u32le(central_size as u32));
    out.extend_from_slice(&u32le(central as u32));
    out.extend_from_slice(&u16le(0));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc_matches_the_standard_check_value() {
        assert_eq!(crc32(b"123456789"), 0xcbf4_3926);
    }

    #[test]
    fn archive_holds_the_binary_as_bootstrap() {
        let zip = bootstrap_zip(b"\x7fELF binary").unwrap();
        assert!(zip.starts_with(b"PK\x03\x04"));
        assert_eq!(&zip[30..39], b"bootstrap");
        assert_eq!(&zip[39..50], b"\x7fELF binary");
        let end = zip.len() - 22;
        assert_eq!(&zip[end..end + 4], b"PK\x05\x06");
    }
}
