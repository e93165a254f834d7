//! Layout fingerprints: the string an engine passes to say which block
//! layout (model id, dtype, block size, KV layout) its keys belong to.  A
//! store (an fs directory, a redis namespace) keeps the fingerprint it was
//! first opened with and refuses to be opened with another one, so blocks
//! of one layout are never served to another.  The rule for the string is
//! here, and the wording of a refusal.

use crate::error::{Error, Result};

/// Longest fingerprint, in bytes.
pub const MAX_FINGERPRINT_LEN: usize = 256;

/// Checks a fingerprint: 1..=256 bytes of printable ASCII (space to `~`).
/// `what` names the option in the message.
pub fn check_fingerprint(what: &str, f: &str) -> Result<()> {
    if f.is_empty() || f.len() > MAX_FINGERPRINT_LEN {
        return Err(Error::InvalidArgument(format!(
            "{what} must be 1 to {MAX_FINGERPRINT_LEN} bytes (got {})",
            f.len()
        )));
    }
    if let Some(b) = f.bytes().find(|b| !(0x20..=0x7e).contains(b)) {
        return Err(Error::InvalidArgument(format!(
            "{what} must be printable ASCII (got byte {b:#04x})"
        )));
    }
    Ok(())
}

/// The refusal of a store holding another layout's blocks: names both
/// fingerprints and what to do.
pub(crate) fn mismatch(store: &str, stored: &str, given: &str, clear: &str) -> Error {
    Error::InvalidArgument(format!(
        "{store} holds blocks of layout fingerprint {stored:?}, not {given:?}: \
         its blocks are not served to another layout; use another {clear}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprints_are_one_to_256_printable_ascii_bytes() {
        check_fingerprint("f", "Qwen/Qwen3-8B|bfloat16|16|NHD").unwrap();
        check_fingerprint("f", &"x".repeat(256)).unwrap();
        assert!(check_fingerprint("f", "").is_err());
        assert!(check_fingerprint("f", &"x".repeat(257)).is_err());
        let e = check_fingerprint("layout_fingerprint", "a\nb").unwrap_err();
        assert!(e.to_string().contains("layout_fingerprint"), "{e}");
        assert!(check_fingerprint("f", "é").is_err());
    }

    #[test]
    fn a_mismatch_names_both_fingerprints_and_the_way_out() {
        let e = mismatch("fs tier directory /d", "a", "b", "directory").to_string();
        assert!(
            e.contains("\"a\"") && e.contains("\"b\"") && e.contains("another directory"),
            "{e}"
        );
    }
}
