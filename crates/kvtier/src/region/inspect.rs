//! What `kvtier-inspect` reports about a region: the layout its header
//! records and the processes that hold its backing files (an open
//! descriptor or a mapping, found in `/proc`).  Read-only: it maps the
//! header page read-only and takes no lock, so it never disturbs the
//! region's set-up protocol.  The process inspecting is never listed as a
//! holder: it opens the files to look at them.

use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::header::{self, Found};
use crate::error::{Error, Result};

/// A region's layout, as its header records it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegionLayout {
    /// Bytes before slot 0 in the first file (one page).
    pub header_bytes: u64,
    /// Number of slots.
    pub slot_count: u64,
    /// Bytes per slot (the row stride).
    pub slot_bytes: u64,
    /// Bytes of each worker's area in a row (0: rows not split).
    pub worker_bytes: u64,
    /// Number of backing files.
    pub segments: u64,
    /// Bytes of all slots.
    pub total_bytes: u64,
}

/// A process holding a region's backing file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holder {
    /// Its process id.
    pub pid: u32,
    /// Its command name (`/proc/<pid>/comm`).
    pub command: String,
    /// Descriptors it has open on the first backing file.
    pub descriptors: u32,
    /// Whether it maps the first backing file.
    pub maps: bool,
}

/// What [`inspect`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegionReport {
    /// The first backing file.
    pub path: PathBuf,
    /// Its size in bytes.
    pub file_bytes: u64,
    /// The layout, or why it cannot be read (`Err`: not written yet, or
    /// not a region header of this format).
    pub layout: std::result::Result<RegionLayout, String>,
    /// Processes holding it, other than the one inspecting (only those
    /// whose `/proc` entries this process may read: all of them as root).
    pub holders: Vec<Holder>,
}

/// Reads the header of region `name` in `directory` (`/dev/shm` for the
/// default) and finds who holds it.
pub fn inspect(directory: &Path, name: &str) -> Result<RegionReport> {
    let path = directory.join(name);
    let file =
        File::open(&path).map_err(|e| Error::io(format!("opening {}", path.display()), e))?;
    let meta = file
        .metadata()
        .map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
    let page = super::sys::page_size_for(directory)?;
    let layout = if meta.len() < page as u64 {
        Err(format!(
            "the file has {} bytes, less than its header page",
            meta.len()
        ))
    } else {
        // SAFETY: a read-only shared mapping of the header page; the region
        // only ever writes the magic after the body, and the bytes are
        // copied out at once.
        let m = unsafe { memmap2::MmapOptions::new().len(page).map(&file) }
            .map_err(|e| Error::io(format!("mapping {}", path.display()), e))?;
        let seen = u64::from_le_bytes(m[..8].try_into().unwrap_or([0; 8]));
        match header::parse(seen, &m[..header::LEN]) {
            Found::NotWritten => Err("its creator has not written the header yet".to_string()),
            Found::Foreign(why) => Err(why),
            Found::Layout(l) => Ok(RegionLayout {
                header_bytes: l.header_bytes,
                slot_count: l.slot_count,
                slot_bytes: l.slot_bytes,
                worker_bytes: l.worker_bytes,
                segments: l.segments,
                total_bytes: l.total,
            }),
        }
    };
    Ok(RegionReport {
        holders: holders((meta.dev(), meta.ino())),
        path,
        file_bytes: meta.len(),
        layout,
    })
}

/// Processes with a descriptor open on, or a mapping of, the file `id`
/// (device, inode).
fn holders(id: (u64, u64)) -> Vec<Holder> {
    holders_of(&[id]).pop().unwrap_or_default()
}

/// For each file of `ids` (device, inode), the processes other than this
/// one with a descriptor open on it or a mapping of it (only those whose
/// `/proc` entries this process may read: all of them as root), by process
/// id; one pass over `/proc`.  Read-only: it takes no lock.
///
/// This process is left out, whatever it holds: whoever asks has opened
/// the files to find them.  Its threads share its descriptors and
/// mappings and `/proc` lists a process once, not per thread, so none of
/// them is listed either.
pub fn holders_of(ids: &[(u64, u64)]) -> Vec<Vec<Holder>> {
    scan(ids, Some(std::process::id()))
}

/// [`holders_of`], leaving out process `skip` (`None`: nobody).
fn scan(ids: &[(u64, u64)], skip: Option<u32>) -> Vec<Vec<Holder>> {
    let mut out: Vec<Vec<Holder>> = vec![Vec::new(); ids.len()];
    if ids.is_empty() {
        return out;
    }
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return out;
    };
    let inodes: Vec<String> = ids.iter().map(|id| id.1.to_string()).collect();
    for p in procs.flatten() {
        let Some(pid) = p.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        if Some(pid) == skip {
            continue;
        }
        let dir = p.path();
        let mut descriptors = vec![0u32; ids.len()];
        if let Ok(fds) = std::fs::read_dir(dir.join("fd")) {
            for fd in fds.flatten() {
                if let Ok(m) = std::fs::metadata(fd.path()) {
                    for (i, id) in ids.iter().enumerate() {
                        if (m.dev(), m.ino()) == *id {
                            descriptors[i] += 1;
                        }
                    }
                }
            }
        }
        // `maps` names the inode, not the device: a mapping of another
        // file system's file with the same inode number would count too,
        // so a file counts as mapped only by a process that maps an inode
        // of that number from a device of the same numbers.
        let mut maps = vec![false; ids.len()];
        if let Ok(text) = std::fs::read_to_string(dir.join("maps")) {
            for line in text.lines() {
                let mut fields = line.split_whitespace();
                let (Some(dev), Some(inode)) = (fields.nth(3), fields.next()) else {
                    continue;
                };
                for (i, id) in ids.iter().enumerate() {
                    if inode == inodes[i] && same_device(dev, id.0) {
                        maps[i] = true;
                    }
                }
            }
        }
        let mut command = None;
        for i in 0..ids.len() {
            if descriptors[i] == 0 && !maps[i] {
                continue;
            }
            let command = command
                .get_or_insert_with(|| {
                    std::fs::read_to_string(dir.join("comm"))
                        .map(|c| c.trim_end().to_string())
                        .unwrap_or_default()
                })
                .clone();
            out[i].push(Holder {
                pid,
                command,
                descriptors: descriptors[i],
                maps: maps[i],
            });
        }
    }
    for h in &mut out {
        h.sort_by_key(|h| h.pid);
    }
    out
}

/// Whether `maps`' device field (`major:minor`, hexadecimal) is `dev`.
fn same_device(field: &str, dev: u64) -> bool {
    let Some((major, minor)) = field.split_once(':') else {
        return false;
    };
    let (Ok(major), Ok(minor)) = (
        u32::from_str_radix(major, 16),
        u32::from_str_radix(minor, 16),
    ) else {
        return false;
    };
    libc::makedev(major, minor) as u64 == dev
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(path: &Path) -> (u64, u64) {
        let m = std::fs::metadata(path).unwrap();
        (m.dev(), m.ino())
    }

    #[test]
    fn holders_are_found_by_descriptor_and_by_mapping() {
        let t = tempfile::tempdir().unwrap();
        let path = |n: &str| t.path().join(n);
        for n in ["open", "mapped", "unheld"] {
            std::fs::write(path(n), [7u8; 4096]).unwrap();
        }
        let open = File::open(path("open")).unwrap();
        let mapped = File::open(path("mapped")).unwrap();
        // SAFETY: a fresh read-only shared mapping of a 4096-byte file.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ,
                libc::MAP_SHARED,
                std::os::fd::AsRawFd::as_raw_fd(&mapped),
                0,
            )
        };
        assert_ne!(map, libc::MAP_FAILED);
        drop(mapped);
        let ids = [id(&path("open")), id(&path("mapped")), id(&path("unheld"))];
        let found = scan(&ids, None);
        // SAFETY: the mapping made above, unmapped once.
        unsafe { libc::munmap(map, 4096) };
        drop(open);
        let me = Holder {
            pid: std::process::id(),
            command: std::fs::read_to_string("/proc/self/comm")
                .unwrap()
                .trim_end()
                .to_string(),
            descriptors: 1,
            maps: false,
        };
        assert_eq!(found.len(), 3);
        assert_eq!(found[0], std::slice::from_ref(&me), "open only");
        let mapping = Holder {
            descriptors: 0,
            maps: true,
            ..me
        };
        assert_eq!(found[1], [mapping], "mapped only");
        assert_eq!(found[2], [], "held by nobody");
        assert!(holders_of(&[]).is_empty());
    }

    #[test]
    fn the_process_asking_is_never_a_holder() {
        let t = tempfile::tempdir().unwrap();
        let path = t.path().join("held");
        std::fs::write(&path, [7u8; 4096]).unwrap();
        let file = File::open(&path).unwrap();
        // SAFETY: a fresh read-only shared mapping of a 4096-byte file.
        let map = unsafe { memmap2::MmapOptions::new().len(4096).map(&file) }.unwrap();
        let ids = [id(&path)];
        let me = std::process::id();
        let everyone = scan(&ids, None);
        assert!(
            everyone[0]
                .iter()
                .any(|h| h.pid == me && h.descriptors == 1 && h.maps),
            "{everyone:?}"
        );
        let asked = holders_of(&ids);
        assert!(
            !asked[0].iter().any(|h| h.pid == me),
            "this process is left out: {asked:?}"
        );
        // Another process holding it is still found.
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .stdin(File::open(&path).unwrap())
            .spawn()
            .unwrap();
        let others = holders_of(&ids);
        child.kill().unwrap();
        child.wait().unwrap();
        drop((map, file));
        assert!(
            others[0]
                .iter()
                .any(|h| (h.pid, h.descriptors, h.maps) == (child.id(), 1, false)),
            "the child holding it is found: {others:?}"
        );
    }

    #[test]
    fn a_maps_device_is_major_and_minor_in_hexadecimal() {
        let dev = libc::makedev(0x103, 0x2a) as u64;
        assert!(same_device("103:2a", dev));
        assert!(!same_device("103:2b", dev));
        assert!(!same_device("3:2a", dev));
        assert!(!same_device("1032a", dev));
        assert!(!same_device("x:2a", dev));
    }
}
