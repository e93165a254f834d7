//! `kvtier_region_options` read into the core's [`RegionOptions`].

use super::*;

/// The core options of the caller's struct.  A NULL name is the core's
/// empty one (refused when the region is made); a NULL directory the
/// default.
///
/// # Safety
/// The strings in `o` must be NULL or valid NUL-terminated strings.
pub(super) unsafe fn convert(o: &kvtier_region_options) -> Result<RegionOptions, Failure> {
    let d = RegionOptions::default();
    let name = if o.name.is_null() {
        d.name
    } else {
        unsafe { in_str(o.name, "options->name") }?.to_owned()
    };
    let directory = if o.directory.is_null() {
        d.directory
    } else {
        PathBuf::from(unsafe { in_str(o.directory, "options->directory") }?)
    };
    let open = match o.open {
        KVTIER_REGION_OPEN_MODE_CREATE_OR_JOIN => OpenMode::CreateOrJoin,
        KVTIER_REGION_OPEN_MODE_CREATE => OpenMode::Create,
        KVTIER_REGION_OPEN_MODE_JOIN => OpenMode::Join,
        v => {
            return Err(Error::InvalidArgument(format!(
                "options->open {v} is not KVTIER_REGION_OPEN_MODE_CREATE_OR_JOIN, _CREATE or _JOIN"
            ))
            .into());
        }
    };
    let prefault = match o.prefault {
        KVTIER_REGION_PREFAULT_OFF => Prefault::Off,
        KVTIER_REGION_PREFAULT_AUTO => Prefault::Auto,
        KVTIER_REGION_PREFAULT_TOUCH => Prefault::Touch,
        v => {
            return Err(Error::InvalidArgument(format!(
                "options->prefault {v} is not KVTIER_REGION_PREFAULT_OFF, _AUTO or _TOUCH"
            ))
            .into());
        }
    };
    Ok(RegionOptions {
        name,
        directory,
        slot_count: o.slot_count,
        slot_bytes: o.slot_bytes,
        worker_bytes: o.worker_bytes,
        open,
        join_timeout: Duration::from_millis(o.join_timeout_ms as u64),
        segments: o.segments,
        prefault,
        prefault_share: (o.prefault_share_count > 0).then_some(Share {
            index: o.prefault_share_index,
            count: o.prefault_share_count,
        }),
        prefault_threads: o.prefault_threads,
        mode: o.mode,
        replace_stale: o.replace_stale,
    })
}
