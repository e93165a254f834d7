//! The standalone primary tier's C options read into the core's
//! [`PrimaryConfig`], and policy names both ways.  The manager reads the
//! primary-tier fields of its own options through [`primary_config_of`]
//! too, so the two C objects read them one way.

use std::ffi::{CStr, c_char};

use super::{kvtier_primary_options, kvtier_primary_options_default};
use crate::boundary::{Failure, in_str};
use crate::growth::read_grown;
use kvtier_core::primary::{PolicyKind, PrimaryConfig};

/// The core options of the caller's `kvtier_primary_options` (NULL: the
/// defaults).
///
/// # Safety
/// `options` NULL or valid for its `struct_size`, `policy` NULL or NUL-terminated.
pub(crate) unsafe fn primary_config_of(
    options: *const kvtier_primary_options,
) -> Result<PrimaryConfig, Failure> {
    let o = unsafe { read_grown(options, kvtier_primary_options_default()) }?;
    Ok(PrimaryConfig {
        capacity: o.capacity,
        policy: unsafe { policy_of(o.policy, "options->policy") }?,
        store_threshold: o.store_threshold,
        admission_table_size: o.admission_table_size,
        event_capacity: o.event_capacity,
        kv_groups: o.kv_groups,
    })
}

/// The policy's name as a static C string.
pub(crate) fn policy_name(policy: PolicyKind) -> *const c_char {
    let name: &'static CStr = match policy {
        PolicyKind::Lru => c"lru",
        PolicyKind::Arc => c"arc",
    };
    name.as_ptr()
}

/// The policy named by `name` (NULL: the default).
///
/// # Safety
/// `name` NULL or NUL-terminated.
pub(crate) unsafe fn policy_of(
    name: *const c_char,
    what: &'static str,
) -> Result<PolicyKind, Failure> {
    if name.is_null() {
        return Ok(PolicyKind::default());
    }
    Ok(unsafe { in_str(name, what) }?.parse()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn c_defaults_are_the_core_defaults() {
        let p = unsafe { primary_config_of(&kvtier_primary_options_default()) }.unwrap();
        assert_eq!(p, PrimaryConfig::default());
        assert_eq!(p, serde_json::from_str::<PrimaryConfig>("{}").unwrap());
    }

    #[test]
    fn policy_names_read_back_as_their_policy() {
        for p in [PolicyKind::Lru, PolicyKind::Arc] {
            assert_eq!(unsafe { policy_of(policy_name(p), "policy") }.ok(), Some(p));
        }
        assert_eq!(
            unsafe { policy_of(std::ptr::null(), "policy") }.ok(),
            Some(PolicyKind::default())
        );
        assert!(unsafe { policy_of(c"fifo".as_ptr(), "policy") }.is_err());
    }
}
