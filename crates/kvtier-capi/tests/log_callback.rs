//! The C log callback receives records at its level and nothing after removal.

use std::ffi::{CStr, c_char, c_void};
use std::sync::Mutex;

use kvtier::kvtier_status;
use kvtier::log::kvtier_set_log_callback;

static SEEN: Mutex<Vec<(i32, String, String)>> = Mutex::new(Vec::new());

unsafe extern "C" fn record(
    user: *mut c_void,
    level: i32,
    target: *const c_char,
    msg: *const c_char,
) {
    assert_eq!(user as usize, 0x1234);
    let target = unsafe { CStr::from_ptr(target) }
        .to_string_lossy()
        .into_owned();
    let msg = unsafe { CStr::from_ptr(msg) }
        .to_string_lossy()
        .into_owned();
    SEEN.lock().unwrap().push((level, target, msg));
}

#[test]
fn callback_gets_records_at_its_level_only() {
    let user = 0x1234usize as *mut c_void;
    assert_eq!(
        unsafe { kvtier_set_log_callback(Some(record), user, 2) },
        kvtier_status::Ok
    );
    log::warn!(target: "kvtier_core::tiering", "job {} failed", 7);
    log::info!(target: "kvtier_core::tiering", "below the level");
    log::warn!(target: "other_crate", "not ours");
    assert_eq!(
        unsafe { kvtier_set_log_callback(Some(record), user, 9) },
        kvtier_status::InvalidArgument
    );
    assert_eq!(
        unsafe { kvtier_set_log_callback(None, std::ptr::null_mut(), 5) },
        kvtier_status::Ok
    );
    log::error!(target: "kvtier_core::tiering", "after removal");
    let seen = SEEN.lock().unwrap();
    assert_eq!(
        *seen,
        vec![(
            2,
            "kvtier_core::tiering".to_string(),
            "job 7 failed".to_string()
        )]
    );
}
