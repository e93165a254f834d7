//! `kvtier_manager_connect`: a manager in the node server `kvtierd`,
//! reached through its Unix socket, on which every manager call works as
//! on a local one (`kvtier_core::server`, docs/server.md), and
//! `kvtier_manager_server_info`, what it is connected to.

use std::ffi::c_char;
use std::path::Path;
use std::time::Duration;

use super::boundary::{Failure, enter, ffi_call, in_str, into_handle, opt_str, out_ref};
use super::growth::{Grows, read_grown, write_grown};
use super::manager::{CManager, kvtier_manager};
use kvtier_core::error::Error;
use kvtier_core::server::{Client, ConnectOptions};

/// Options of `kvtier_manager_connect`.  Initialize with
/// `kvtier_connect_options_default()` (growth rule).  Since 0.3.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct kvtier_connect_options {
    /// `sizeof(kvtier_connect_options)` as the caller was compiled with.
    pub struct_size: usize,
    /// Bytes per block the engine means (0, default: whatever the server
    /// has).  A different value is refused at connect.
    pub block_bytes: u64,
    /// Bytes from one slot to the next the engine means (0, default:
    /// whatever the server has).  A different value is refused at connect.
    pub slot_stride: u64,
    /// The engine's model/layout fingerprint (NUL-terminated, read during
    /// the call; NULL: the empty one); must equal the server's
    /// `server.fingerprint`.
    pub fingerprint: *const c_char,
    /// A name for the server's logs, metrics and client list (NULL: none).
    pub name: *const c_char,
    /// Longest wait for one answer, in milliseconds, before the server is
    /// taken as gone (`KVTIER_STATUS_DISCONNECTED`); default 10000, > 0.
    pub call_timeout_ms: u64,
    /// Microseconds a call polls for its answer before sleeping (default
    /// 50; 0: sleep at once, sparing a CPU when engines outnumber cores).
    pub spin_us: u32,
}

impl Grows for kvtier_connect_options {
    const NAME: &'static str = "kvtier_connect_options";
    const FIRST_LAYOUT_SIZE: usize = std::mem::size_of::<Self>();
}

/// Returns the default connect options: any block size and stride, the
/// empty fingerprint, no name, a call timeout of 10 s, a spin of 50 µs;
/// `struct_size` set.  Safe to call from any thread.  Since 0.3.
#[unsafe(no_mangle)]
pub extern "C" fn kvtier_connect_options_default() -> kvtier_connect_options {
    let d = ConnectOptions::default();
    kvtier_connect_options {
        struct_size: std::mem::size_of::<kvtier_connect_options>(),
        block_bytes: d.block_bytes,
        slot_stride: d.slot_stride,
        fingerprint: std::ptr::null(),
        name: std::ptr::null(),
        call_timeout_ms: d.call_timeout.as_millis() as u64,
        spin_us: d.spin.as_micros() as u32,
    }
}

/// Connects to the node server `kvtierd` listening at `socket_path` and
/// writes a manager to `*manager_out` on which every manager call works
/// with the semantics and statuses of a local manager, with these
/// differences (docs/server.md):
///
/// - blocks are shared with every engine connected to the server (a block
///   another engine stored is a hit), while requests are this handle's:
///   another engine's request handle is `KVTIER_STATUS_UNKNOWN_REQUEST`;
/// - the server's region is mapped in this process:
///   `kvtier_manager_slot_memory` gives its slots, and blocks are copied
///   to and from them directly (only keys, slots and answers cross the
///   socket);
/// - the server bounds what one engine holds (requests, pins, stores in
///   flight): past a bound a call is `KVTIER_STATUS_NO_SPACE` and changes
///   nothing;
/// - tiers, events, callbacks, the wake-up descriptor and resets belong
///   to the server: `kvtier_manager_add_*`, `_complete_job`,
///   `_set_event_callback`, `_take_events`, `_events_queued`,
///   `_set_request_report_callback`, `_wake_fd`, `_reset_cache` and
///   `_reset_flushed` are `KVTIER_STATUS_UNSUPPORTED`;
/// - once the server is gone (closed the connection, died, or did not
///   answer within `call_timeout_ms`), that call and every later one are
///   `KVTIER_STATUS_DISCONNECTED`; free the handle and connect again.
///   The server releases what this handle's requests held when the
///   connection ends, however it ends (the process killed included).
///
/// `options` NULL means the defaults (`kvtier_connect_options_default`).
/// A layout (block bytes, slot stride, fingerprint) other than the
/// server's is refused with `KVTIER_STATUS_INVALID_ARGUMENT` and a
/// message naming the difference; a server of another protocol version
/// with `KVTIER_STATUS_UNSUPPORTED`; a user the server does not allow with
/// `KVTIER_STATUS_PEER_FAILED`; no server at the path with
/// `KVTIER_STATUS_DISCONNECTED`.  On success writes the handle (free it
/// with `kvtier_manager_free`, which closes the connection); on failure
/// writes nothing.  Thread-safe; the handle is internally synchronized
/// like a local one (calls on it are made one at a time).  Since 0.3.
///
/// # Safety
/// `socket_path` a NUL-terminated string; `options` NULL or valid for
/// reads of its `struct_size`; `manager_out` valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_manager_connect(
    socket_path: *const c_char,
    options: *const kvtier_connect_options,
    manager_out: *mut *mut kvtier_manager,
) -> super::kvtier_status {
    ffi_call!({
        let out = unsafe { out_ref(manager_out, "manager_out") }?;
        let path = unsafe { in_str(socket_path, "socket_path") }?;
        let o = unsafe { read_grown(options, kvtier_connect_options_default()) }?;
        if o.call_timeout_ms == 0 {
            return Err(
                Error::InvalidArgument("options.call_timeout_ms: must be above 0".into()).into(),
            );
        }
        let options = ConnectOptions {
            block_bytes: o.block_bytes,
            slot_stride: o.slot_stride,
            fingerprint: unsafe { opt_str(o.fingerprint, "options.fingerprint") }?
                .unwrap_or("")
                .to_string(),
            name: unsafe { opt_str(o.name, "options.name") }?
                .unwrap_or("")
                .to_string(),
            call_timeout: Duration::from_millis(o.call_timeout_ms),
            spin: Duration::from_micros(u64::from(o.spin_us)),
            map_region: true,
            ..ConnectOptions::default()
        };
        let client = Client::connect(Path::new(path), &options)?;
        *out = into_handle::<kvtier_manager>(CManager::connected(client)?);
        Ok(())
    })
}

/// What a manager made by `kvtier_manager_connect` is connected to, as
/// `kvtier_manager_server_info` writes it.  Set `struct_size` to
/// `sizeof(kvtier_server_info)` before the call.  Since 0.3.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct kvtier_server_info {
    /// `sizeof(kvtier_server_info)` as the caller was compiled with.
    pub struct_size: usize,
    /// The protocol version spoken.
    pub protocol: u32,
    /// The id the server gave this connection.
    pub client_id: u64,
    /// The region's file name (NUL-terminated, owned by the manager,
    /// valid until `kvtier_manager_free`).
    pub region_name: *const c_char,
    /// The directory of the region's files (same ownership).
    pub region_directory: *const c_char,
    /// The layout fingerprint the server and this engine share (same ownership).
    pub fingerprint: *const c_char,
    /// The region's slot count.
    pub slot_count: u32,
    /// Bytes per block (the slot size).
    pub slot_bytes: u64,
    /// Bytes from one slot to the next.
    pub slot_stride: u64,
    /// Slots of the server's primary tier.
    pub capacity: u32,
}

impl Grows for kvtier_server_info {
    const NAME: &'static str = "kvtier_server_info";
    const FIRST_LAYOUT_SIZE: usize = std::mem::size_of::<Self>();
}

/// Writes what `manager` (made by `kvtier_manager_connect`) is connected
/// to: the region (name, directory, slots and their layout), the block
/// size, the fingerprint and the protocol version.  A local manager is
/// `KVTIER_STATUS_NOT_FOUND` (it has no server).  Thread-safe.  Since 0.3.
///
/// # Safety
/// `manager` NULL or a live handle; `info_out` valid for writes of its
/// `struct_size`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_manager_server_info(
    manager: *const kvtier_manager,
    info_out: *mut kvtier_server_info,
) -> super::kvtier_status {
    ffi_call!({
        let m = unsafe { enter::<kvtier_manager>(manager) }?;
        if info_out.is_null() {
            return Err(Failure::Null("info_out"));
        }
        let (client, strings) = m.remote().ok_or_else(|| {
            Error::NotFound("server info: this manager is local, not connected to kvtierd".into())
        })?;
        let i = client.info();
        let info = kvtier_server_info {
            struct_size: std::mem::size_of::<kvtier_server_info>(),
            protocol: i.protocol,
            client_id: i.client_id,
            region_name: strings.region_name.as_ptr(),
            region_directory: strings.region_directory.as_ptr(),
            fingerprint: strings.fingerprint.as_ptr(),
            slot_count: i.slot_count,
            slot_bytes: i.slot_bytes,
            slot_stride: i.slot_stride,
            capacity: i.capacity,
        };
        unsafe { write_grown(info_out, &info, "info_out") }
    })
}
