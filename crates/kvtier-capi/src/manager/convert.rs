//! The manager's C options and request parameters read into the core's
//! types: `kvtier_manager_options` into a [`Config`], and
//! `kvtier_request_params` (with its tier filter) into [`RequestParams`].

use super::*;

/// The core options of the caller's `kvtier_manager_options` (NULL: the
/// defaults).
///
/// # Safety
/// `options` NULL or valid for its `struct_size`, `policy` NULL or NUL-terminated.
pub(crate) unsafe fn manager_config_of(
    options: *const kvtier_manager_options,
) -> Result<Config, Failure> {
    let o = unsafe { read_grown(options, kvtier_manager_options_default()) }?;
    let promotion_answer = match o.promotion_answer {
        KVTIER_PROMOTION_ANSWER_RETRY => PromotionAnswer::Retry,
        KVTIER_PROMOTION_ANSWER_HIT_PENDING => PromotionAnswer::HitPending,
        v => {
            return Err(Error::InvalidArgument(format!(
                "options->promotion_answer {v} is not KVTIER_PROMOTION_ANSWER_RETRY or _HIT_PENDING"
            ))
            .into());
        }
    };
    Ok(Config {
        block_bytes: o.block_bytes,
        region: None,
        primary: unsafe { primary_config_of(&primary_options_of(&o)) }?,
        promotion_answer,
        error_log_capacity: o.error_log_capacity,
        progress: ProgressOptions {
            hold: o.progress_hold,
            wait_steps: o.progress_wait_steps,
            wait_ms: o.progress_wait_ms,
            // Only kvtierd's managers are shared by several engines.
            hold_hits: false,
        },
        tiers: Vec::new(),
        metrics: None,
        layout_fingerprint: None,
    })
}

fn matcher_of(m: &kvtier_tier_matcher, index: usize) -> Result<TierMatcher, Error> {
    let medium = match m.medium {
        KVTIER_MEDIUM_ANY => None,
        KVTIER_MEDIUM_CPU => Some(Medium::Cpu),
        KVTIER_MEDIUM_STORAGE => Some(Medium::Storage),
        v => {
            return Err(Error::InvalidArgument(format!(
                "filter matcher {index}: medium {v} is not a KVTIER_MEDIUM_* value"
            )));
        }
    };
    let locality = match m.locality {
        KVTIER_LOCALITY_ANY => None,
        KVTIER_LOCALITY_LOCAL => Some(Locality::Local),
        KVTIER_LOCALITY_REMOTE => Some(Locality::Remote),
        v => {
            return Err(Error::InvalidArgument(format!(
                "filter matcher {index}: locality {v} is not a KVTIER_LOCALITY_* value"
            )));
        }
    };
    Ok(TierMatcher { medium, locality })
}

/// Reads the request parameters at `params` under the growth rule (NULL:
/// nothing attached, no filter), copying their strings and arrays.
///
/// # Safety
/// `params` NULL or valid for its `struct_size`, with its arrays valid for
/// their lengths.
pub(crate) unsafe fn read_request_params(
    params: *const kvtier_request_params,
) -> Result<RequestParams, Failure> {
    let mut rp = RequestParams::default();
    if params.is_null() {
        return Ok(rp);
    }
    let p = &unsafe { read_grown(params, kvtier_request_params_default()) }?;
    rp.user_data = p.user_data as usize;
    let raw = unsafe { in_slice(p.params, p.params_len, "params->params") }?;
    kvtier_core::fallible::reserve(&mut rp.params, raw.len(), "request parameters")?;
    for kv in raw {
        let k = unsafe { in_str(kv.key, "params->params[].key") }?;
        let v = unsafe { in_str(kv.value, "params->params[].value") }?;
        rp.params.push((k.to_string(), v.to_string()));
    }
    if p.filter_set {
        let raw = unsafe { in_slice(p.filter, p.filter_len, "params->filter") }?;
        let mut ms = kvtier_core::fallible::with_capacity(raw.len(), "request tier filter")?;
        for (i, mt) in raw.iter().enumerate() {
            ms.push(matcher_of(mt, i)?);
        }
        rp.filter = TierFilter::Only(ms);
    }
    Ok(rp)
}

/// The primary-tier fields of the manager's options, as the standalone
/// primary tier's options: both objects read them with
/// [`primary_config_of`].
fn primary_options_of(o: &kvtier_manager_options) -> kvtier_primary_options {
    kvtier_primary_options {
        capacity: o.capacity,
        policy: o.policy,
        store_threshold: o.store_threshold,
        admission_table_size: o.admission_table_size,
        event_capacity: o.event_capacity,
        kv_groups: o.kv_groups,
        ..kvtier_primary_options_default()
    }
}
