//! The conversions between the core's values and the C tier's: requests,
//! names, media and localities, keys, job results, and the batches a
//! callback fills.

use super::*;

/// The C view of one request, kept while the request lives.
pub(super) struct CRequest {
    _id: CString,
    _strings: Vec<CString>,
    pub(super) params: Vec<kvtier_param>,
    pub(super) c: kvtier_request,
}

/// `s` as a C string, without the NUL bytes it may hold.
pub(super) fn c_string(s: &str) -> CString {
    // One copy when there is no NUL to drop (the usual case).
    CString::new(s)
        .or_else(|_| CString::new(s.replace('\0', "")))
        .unwrap_or_default()
}

impl CRequest {
    pub(super) fn new(info: &Request) -> CRequest {
        let id = c_string(&info.name);
        let mut strings = Vec::with_capacity(info.params.len() * 2);
        for (k, v) in &info.params {
            strings.push(c_string(k));
            strings.push(c_string(v));
        }
        let params: Vec<kvtier_param> = strings
            .chunks(2)
            .map(|p| kvtier_param {
                key: p[0].as_ptr(),
                value: p[1].as_ptr(),
            })
            .collect();
        let c = kvtier_request {
            id: id.as_ptr(),
            id_len: id.as_bytes().len(),
            user_data: info.user_data as *mut c_void,
            params: params.as_ptr(),
            params_len: params.len(),
        };
        CRequest {
            _id: id,
            _strings: strings,
            params,
            c,
        }
    }
}
/// Lets the tier callback `f` write up to `capacity` (at most
/// [`RESULT_BATCH`]) entries into `buf` (cleared first; its capacity is
/// kept, so nothing is allocated once it holds a batch).  Returns the
/// status `f` returned and the count it wrote to `*written`; `buf` holds
/// that many entries only when the status is OK and the count fits, and
/// stays empty otherwise.
pub(super) fn fill_batch<T>(
    buf: &mut Vec<T>,
    capacity: usize,
    user_data: *mut c_void,
    f: unsafe extern "C" fn(*mut c_void, *mut T, usize, *mut usize) -> i32,
) -> (i32, usize) {
    let capacity = capacity.min(RESULT_BATCH);
    buf.clear();
    buf.reserve(RESULT_BATCH);
    let mut written = 0usize;
    // SAFETY: the buffer has at least `capacity` writable entries.
    let rc = unsafe { f(user_data, buf.as_mut_ptr(), capacity, &mut written) };
    if rc == kvtier_status::Ok as i32 && written <= capacity {
        // SAFETY: the callback initialized `written` entries.
        unsafe { buf.set_len(written) };
    }
    (rc, written)
}

pub(super) fn medium_of(v: kvtier_medium) -> Result<Option<Medium>> {
    match v {
        KVTIER_MEDIUM_ANY => Ok(None),
        KVTIER_MEDIUM_CPU => Ok(Some(Medium::Cpu)),
        KVTIER_MEDIUM_STORAGE => Ok(Some(Medium::Storage)),
        other => Err(Error::InvalidArgument(format!(
            "tier vtable medium {other} is not KVTIER_MEDIUM_ANY, KVTIER_MEDIUM_CPU or KVTIER_MEDIUM_STORAGE"
        ))),
    }
}

pub(super) fn locality_of(v: kvtier_locality) -> Result<Option<Locality>> {
    match v {
        KVTIER_LOCALITY_ANY => Ok(None),
        KVTIER_LOCALITY_LOCAL => Ok(Some(Locality::Local)),
        KVTIER_LOCALITY_REMOTE => Ok(Some(Locality::Remote)),
        other => Err(Error::InvalidArgument(format!(
            "tier vtable locality {other} is not KVTIER_LOCALITY_ANY, KVTIER_LOCALITY_LOCAL or KVTIER_LOCALITY_REMOTE"
        ))),
    }
}

/// Copies a C key array into `out`, naming the first bad key.
///
/// # Safety
/// `keys` must be valid for `len` reads (or NULL with `len` 0).
pub(crate) unsafe fn copy_keys(
    keys: *const kvtier_key,
    len: usize,
) -> std::result::Result<Vec<Key>, String> {
    if len == 0 {
        return Ok(Vec::new());
    }
    if keys.is_null() {
        return Err(format!("{len} keys listed at a NULL pointer"));
    }
    let raw = unsafe { boundary::in_slice(keys, len, "keys") }
        .map_err(|_| format!("{len} keys listed: more than the address space holds"))?;
    let mut out = Vec::new();
    out.try_reserve_exact(len)
        .map_err(|_| format!("{len} keys listed: no memory to copy them"))?;
    for (i, k) in raw.iter().enumerate() {
        match unsafe { read_key(k, i) } {
            Ok(key) => out.push(key),
            Err(_) => return Err(format!("listed key at position {i} is not a valid key")),
        }
    }
    Ok(out)
}

/// Converts a C job result into a [`JobResult`]; a bad key list becomes an error.
///
/// # Safety
/// `r.succeeded_keys` must be valid for `r.succeeded_len` reads.
pub(crate) unsafe fn job_result_of(
    r: &kvtier_job_result,
) -> std::result::Result<JobResult, String> {
    let succeeded_keys = if r.succeeded_keys.is_null() && r.succeeded_len == 0 {
        None
    } else {
        Some(unsafe { copy_keys(r.succeeded_keys, r.succeeded_len) }?)
    };
    // Read as a byte: a C tier may have written any byte there (any but 0
    // is success).
    // SAFETY: `success` is a one-byte field of `r`.
    let success = unsafe { std::ptr::addr_of!(r.success).cast::<u8>().read() } != 0;
    Ok(JobResult {
        id: kvtier_core::tiering::JobId(r.id),
        success,
        succeeded_keys,
        bytes: r.bytes,
        duration: (r.duration_ns > 0).then(|| Duration::from_nanos(r.duration_ns)),
    })
}

/// Copies the tier's NUL-terminated name, reading at most
/// [`MAX_TIER_NAME`] + 1 bytes: a name with no NUL among them is refused.
///
/// # Safety
/// `name` must be valid for reads up to its NUL or the bound, whichever
/// comes first.
pub(super) unsafe fn bounded_name(name: *const c_char) -> Result<String> {
    let mut bytes = Vec::new();
    for i in 0..=MAX_TIER_NAME {
        // SAFETY: the caller's contract: every byte up to the NUL is readable.
        let c = unsafe { *name.add(i) } as u8;
        if c == 0 {
            return Ok(String::from_utf8_lossy(&bytes).into_owned());
        }
        bytes.push(c);
    }
    Err(Error::InvalidArgument(format!(
        "tier vtable name is longer than {MAX_TIER_NAME} bytes (or not NUL-terminated)"
    )))
}

/// Copies a NUL-terminated name out of a fixed C array.
pub(super) fn fixed_name(raw: &[c_char]) -> String {
    let bytes: Vec<u8> = raw
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_c_string_drops_the_nul_bytes_it_would_hold() {
        assert_eq!(c_string("req-1").as_bytes(), b"req-1");
        assert_eq!(c_string("a\0b\0").as_bytes(), b"ab");
        assert_eq!(c_string("").as_bytes(), b"");
    }
}
