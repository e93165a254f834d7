//! The self-describing header in front of every block stored in Redis.
//!
//! A value is `header || payload`.  The header binds the value to the key it
//! was stored under (the key's bytes are in it) and carries checksums of
//! itself and of the payload, so a value that was truncated, overwritten by
//! someone else, written under the wrong name or damaged in transit is
//! recognised on load and never copied into a slot.
//!
//! Layout (little endian):
//!
//! | bytes | field |
//! | --- | --- |
//! | 0..8 | magic `KVTRRDS1` |
//! | 8..10 | format version (1) |
//! | 10 | key length (1..=64) |
//! | 11 | flags (0) |
//! | 12..16 | payload length |
//! | 16..24 | payload checksum: xxh3-64 of the payload, seeded with xxh3-64 of the key |
//! | 24..32 | header checksum: xxh3-64 of bytes 0..24 followed by the key |
//! | 32..32+key length | the key |

use twox_hash::XxHash3_64;

/// XXH3-64 of `data`.
fn xxh3_64(data: &[u8]) -> u64 {
    XxHash3_64::oneshot(data)
}

/// XXH3-64 of `data` with `seed`.
fn xxh3_64_with_seed(data: &[u8], seed: u64) -> u64 {
    XxHash3_64::oneshot_with_seed(seed, data)
}

use crate::key::{Key, MAX_KEY_LEN};

/// Magic bytes that open every value.
pub(crate) const MAGIC: [u8; 8] = *b"KVTRRDS1";
/// Current format version.
pub(crate) const VERSION: u16 = 1;
/// Bytes of the header before the key.
pub(crate) const FIXED_LEN: usize = 32;
/// Longest header (a 64-byte key).
pub(crate) const MAX_LEN: usize = FIXED_LEN + MAX_KEY_LEN;

/// Bytes of the header for `key` (the value is this plus the slot size).
pub fn header_len(key: &Key) -> usize {
    FIXED_LEN + key.len()
}

/// Why a stored value was rejected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Corruption {
    /// Shorter than its header says.
    Truncated,
    /// Does not start with the magic bytes or has an unknown version.
    NotABlock,
    /// The header's own checksum does not match.
    HeaderChecksum,
    /// Stored under one key but names another.
    WrongKey,
    /// The payload is not one slot long.
    WrongSize,
    /// The payload's checksum does not match.
    PayloadChecksum,
}

/// Writes the header for `payload` stored under `key` into `out` and
/// returns its length.
pub(crate) fn encode(key: &Key, payload: &[u8], out: &mut [u8; MAX_LEN]) -> usize {
    let k = key.as_bytes();
    out[0..8].copy_from_slice(&MAGIC);
    out[8..10].copy_from_slice(&VERSION.to_le_bytes());
    out[10] = k.len() as u8;
    out[11] = 0;
    out[12..16].copy_from_slice(&(payload.len() as u32).to_le_bytes());
    let payload_hash = xxh3_64_with_seed(payload, xxh3_64(k));
    out[16..24].copy_from_slice(&payload_hash.to_le_bytes());
    out[FIXED_LEN..FIXED_LEN + k.len()].copy_from_slice(k);
    let header_hash = header_checksum(&out[..24], k);
    out[24..32].copy_from_slice(&header_hash.to_le_bytes());
    FIXED_LEN + k.len()
}

fn header_checksum(fixed: &[u8], key: &[u8]) -> u64 {
    let mut buf = [0u8; 24 + MAX_KEY_LEN];
    buf[..24].copy_from_slice(fixed);
    buf[24..24 + key.len()].copy_from_slice(key);
    xxh3_64(&buf[..24 + key.len()])
}

/// Checks `value` (as read back from Redis) against `key` and the expected
/// payload size and returns the payload.
pub(super) fn verify<'a>(
    value: &'a [u8],
    key: &Key,
    payload_len: usize,
) -> Result<&'a [u8], Corruption> {
    if value.len() < FIXED_LEN {
        return Err(Corruption::Truncated);
    }
    if value[0..8] != MAGIC || u16::from_le_bytes([value[8], value[9]]) != VERSION {
        return Err(Corruption::NotABlock);
    }
    let key_len = value[10] as usize;
    if key_len == 0 || key_len > MAX_KEY_LEN || value.len() < FIXED_LEN + key_len {
        return Err(Corruption::Truncated);
    }
    let stored_key = &value[FIXED_LEN..FIXED_LEN + key_len];
    let header_hash = u64::from_le_bytes(value[24..32].try_into().expect("8 bytes"));
    if header_checksum(&value[..24], stored_key) != header_hash {
        return Err(Corruption::HeaderChecksum);
    }
    if stored_key != key.as_bytes() {
        return Err(Corruption::WrongKey);
    }
    let len = u32::from_le_bytes(value[12..16].try_into().expect("4 bytes")) as usize;
    if len != payload_len {
        return Err(Corruption::WrongSize);
    }
    let payload = &value[FIXED_LEN + key_len..];
    if payload.len() != len {
        return Err(Corruption::Truncated);
    }
    let payload_hash = u64::from_le_bytes(value[16..24].try_into().expect("8 bytes"));
    if xxh3_64_with_seed(payload, xxh3_64(stored_key)) != payload_hash {
        return Err(Corruption::PayloadChecksum);
    }
    Ok(payload)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(key: &Key, payload: &[u8]) -> Vec<u8> {
        let mut h = [0u8; MAX_LEN];
        let n = encode(key, payload, &mut h);
        let mut v = h[..n].to_vec();
        v.extend_from_slice(payload);
        v
    }

    /// Values stored by any earlier version stay readable: the checksums
    /// are the standard XXH3-64 (answers from the reference implementation).
    #[test]
    fn checksums_are_standard_xxh3_64() {
        assert_eq!(xxh3_64(b""), 0x2d06_8005_38d3_94c2);
        let block: Vec<u8> = (0..=255u8).cycle().take(768).collect();
        assert_eq!(xxh3_64(&block), 0x4066_a57f_4496_584a);
        assert_eq!(
            xxh3_64_with_seed(b"kvtier block", 0x0123_4567_89ab_cdef),
            0x9e6d_229f_c6a3_8236
        );
    }

    #[test]
    fn round_trip_and_every_kind_of_damage_is_caught() {
        let key = Key::new(b"block-7").unwrap();
        let payload: Vec<u8> = (0..4096u32).map(|i| (i * 7) as u8).collect();
        let v = value(&key, &payload);
        assert_eq!(verify(&v, &key, 4096).unwrap(), &payload[..]);

        let other = Key::new(b"block-8").unwrap();
        assert_eq!(verify(&v, &other, 4096), Err(Corruption::WrongKey));
        assert_eq!(verify(&v, &key, 8192), Err(Corruption::WrongSize));
        assert_eq!(
            verify(&v[..v.len() - 1], &key, 4096),
            Err(Corruption::Truncated)
        );
        assert_eq!(verify(&v[..10], &key, 4096), Err(Corruption::Truncated));

        let mut bad = v.clone();
        *bad.last_mut().unwrap() ^= 1;
        assert_eq!(verify(&bad, &key, 4096), Err(Corruption::PayloadChecksum));
        let mut bad = v.clone();
        bad[13] ^= 1;
        assert_eq!(verify(&bad, &key, 4096), Err(Corruption::HeaderChecksum));
        let mut bad = v.clone();
        bad[0] = b'X';
        assert_eq!(verify(&bad, &key, 4096), Err(Corruption::NotABlock));
        assert_eq!(verify(b"hello", &key, 4096), Err(Corruption::Truncated));
    }
}
