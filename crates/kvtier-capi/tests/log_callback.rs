//! The C log callback receives records at its level and nothing after
//! removal; an fs tier of small blocks warns through it at open of the
//! share its block headers take.

use std::ffi::{CStr, c_char, c_void};
use std::sync::Mutex;

use kvtier::kvtier_status;
use kvtier::log::kvtier_set_log_callback;

static SEEN: Mutex<Vec<(i32, String, String)>> = Mutex::new(Vec::new());
/// The sink is the process's: one test at a time installs it.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

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
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
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

static FS_SEEN: Mutex<Vec<(i32, String)>> = Mutex::new(Vec::new());

unsafe extern "C" fn fs_record(
    _user: *mut c_void,
    level: i32,
    _target: *const c_char,
    msg: *const c_char,
) {
    let msg = unsafe { CStr::from_ptr(msg) }
        .to_string_lossy()
        .into_owned();
    FS_SEEN.lock().unwrap().push((level, msg));
}

/// The records naming `dir` logged while an fs tier of `block_bytes`
/// opened there and shut down.
fn records_of_an_fs_tier(block_bytes: usize, layout: &str) -> Vec<(i32, String)> {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display().to_string();
    let json = format!(
        r#"{{"block_bytes": {block_bytes}, "primary": {{"capacity": 2}},
            "tiers": [{{"type": "fs", "options": {{"directory": "{d}", "layout": "{layout}",
                        "capacity_bytes": {}, "read_threads": 1, "write_threads": 1,
                        "direct_io": false}}}}]}}"#,
        4 * (4096 + block_bytes)
    );
    let m = kvtier_core::config::Config::from_json(&json)
        .unwrap()
        .build()
        .unwrap();
    m.shutdown().unwrap();
    FS_SEEN
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, msg)| msg.contains(&d))
        .cloned()
        .collect()
}

#[test]
fn an_fs_tier_of_small_blocks_warns_of_its_header_share() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    assert_eq!(
        unsafe { kvtier_set_log_callback(Some(fs_record), std::ptr::null_mut(), 2) },
        kvtier_status::Ok
    );
    let small = records_of_an_fs_tier(16 << 10, "files");
    let small_records = records_of_an_fs_tier(16 << 10, "segments");
    let large = records_of_an_fs_tier(64 << 10, "files");
    assert_eq!(
        unsafe { kvtier_set_log_callback(None, std::ptr::null_mut(), 5) },
        kvtier_status::Ok
    );
    assert_eq!(small.len(), 1, "{small:?}");
    let (level, msg) = &small[0];
    assert_eq!(*level, 2, "a warning: {msg}");
    assert!(
        msg.contains(
            "each block of 16384 bytes is stored with a 4096-byte header, 20.0% of every block file"
        ),
        "{msg}"
    );
    assert!(msg.contains(r#""layout": "segments""#), "{msg}");
    assert_eq!(small_records.len(), 1, "{small_records:?}");
    assert!(
        small_records[0].1.contains("20.0% of every record"),
        "{small_records:?}"
    );
    assert_eq!(large, [], "no warning for 64 KiB blocks");
}
