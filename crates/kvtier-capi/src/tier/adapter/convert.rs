//! The conversions between the core's values and the C tier's: requests,
//! names, media and localities, keys, job results, and the batches a
//! callback fills.

use super::*;

/// The C view of one request, kept while the request lives; a finished
/// request's view is filled again for a later one, its buffers kept.
pub(super) struct CRequest {
    /// The name's bytes without NULs, then a NUL.
    id: Vec<u8>,
    strings: Vec<CString>,
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

impl Default for CRequest {
    fn default() -> Self {
        CRequest {
            id: Vec::new(),
            strings: Vec::new(),
            params: Vec::new(),
            c: kvtier_request {
                id: std::ptr::null(),
                id_len: 0,
                user_data: std::ptr::null_mut(),
                params: std::ptr::null(),
                params_len: 0,
            },
        }
    }
}

impl CRequest {
    /// Makes this the view of `info`, reusing the buffers (the name's
    /// allocates only when longer than any before it).
    pub(super) fn fill(&mut self, info: &Request) {
        self.id.clear();
        let name = info.name.as_bytes();
        if name.contains(&0) {
            self.id.extend(name.iter().filter(|&&b| b != 0));
        } else {
            self.id.extend_from_slice(name);
        }
        self.id.push(0);
        self.strings.clear();
        for (k, v) in &info.params {
            self.strings.push(c_string(k));
            self.strings.push(c_string(v));
        }
        self.params.clear();
        self.params
            .extend(self.strings.chunks(2).map(|p| kvtier_param {
                key: p[0].as_ptr(),
                value: p[1].as_ptr(),
            }));
        self.c = kvtier_request {
            id: self.id.as_ptr().cast(),
            id_len: self.id.len() - 1,
            user_data: info.user_data as *mut c_void,
            params: self.params.as_ptr(),
            params_len: self.params.len(),
        };
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

    fn info(name: &str, params: &[(&str, &str)]) -> Request {
        Arc::new(kvtier_core::request::RequestInfo {
            name: name.into(),
            params: params
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            user_data: 7,
            filter: kvtier_core::request::TierFilter::All,
        })
    }

    /// A request's name, its parameters and its user data, as C sees them.
    type Shown = (Vec<u8>, Vec<(Vec<u8>, Vec<u8>)>, usize);

    /// The name and parameters `view` shows C.
    fn shown(view: &CRequest) -> Shown {
        let c = &view.c;
        let name = unsafe { std::ffi::CStr::from_ptr(c.id) }
            .to_bytes()
            .to_vec();
        assert_eq!(name.len(), c.id_len);
        let params = (0..c.params_len)
            .map(|i| {
                let p = unsafe { &*c.params.add(i) };
                let s = |q| unsafe { std::ffi::CStr::from_ptr(q) }.to_bytes().to_vec();
                (s(p.key), s(p.value))
            })
            .collect();
        (name, params, c.user_data as usize)
    }

    #[test]
    fn a_view_filled_again_shows_only_the_new_request() {
        let mut view = CRequest::default();
        view.fill(&info("a-long-request-name", &[("k", "v"), ("x", "y")]));
        let (name, params, user) = shown(&view);
        assert_eq!(name, b"a-long-request-name");
        assert_eq!(
            params,
            [
                (b"k".to_vec(), b"v".to_vec()),
                (b"x".to_vec(), b"y".to_vec())
            ]
        );
        assert_eq!(user, 7);
        let buffer = view.id.as_ptr();
        // A shorter name reuses the buffer; no parameters left over; NULs dropped.
        view.fill(&info("b\0c", &[]));
        assert_eq!(shown(&view), (b"bc".to_vec(), Vec::new(), 7));
        assert_eq!(view.id.as_ptr(), buffer);
    }

    #[test]
    fn a_c_string_drops_the_nul_bytes_it_would_hold() {
        assert_eq!(c_string("req-1").as_bytes(), b"req-1");
        assert_eq!(c_string("a\0b\0").as_bytes(), b"ab");
        assert_eq!(c_string("").as_bytes(), b"");
    }
}
