//! Processes that create a region and are killed with SIGKILL, for the
//! tests of what such a process leaves behind (the test binary has its own
//! main, harness = false, and re-executes itself as those processes, with
//! `KVTIER_RECLAIM_CHILD` set; its tests run through the test kit's
//! `own_main::run_tests`).

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};

use kvtier_core::region::{Prefault, Region, RegionOptions};
use kvtier_testkit::region_files::start_creating_by_hand;

pub const PAGE: usize = 4096;
pub const CHILD_VAR: &str = "KVTIER_RECLAIM_CHILD";

pub fn opts(dir: &Path, name: &str) -> RegionOptions {
    let mut o = RegionOptions::new(name, 4, 2 * PAGE);
    o.directory = dir.to_path_buf();
    o.prefault = Prefault::Off;
    o
}

/// The child's part: `hold DIR NAME` creates the region through the
/// normal path; `start DIR NAME` does by hand what a creator does before
/// it writes the header (creates the file, marks it, locks it, sizes it
/// to the header page).  Either prints `ready` and waits for stdin to close.
pub fn child_main(spec: &str) -> i32 {
    let parts: Vec<&str> = spec.splitn(3, ' ').collect();
    let (role, dir, name) = (parts[0], Path::new(parts[1]), parts[2]);
    let _keep: Box<dyn std::any::Any> = match role {
        "hold" => Box::new(Region::create_or_join(&opts(dir, name)).unwrap()),
        "start" => {
            let f = start_creating_by_hand(&dir.join(name));
            f.set_len(PAGE as u64).unwrap();
            Box::new(f)
        }
        other => panic!("unknown child role {other}"),
    };
    println!("ready");
    for _ in std::io::stdin().lock().lines() {}
    0
}

/// A child process holding a region (or a half-made one) until it is
/// killed or its stdin closes.
pub struct Holder {
    child: Child,
    stdin: Option<ChildStdin>,
}

impl Holder {
    pub fn spawn(role: &str, dir: &Path, name: &str) -> Holder {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .env(CHILD_VAR, format!("{role} {} {name}", dir.display()))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("re-executing the test binary");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line, "ready\n", "the {role} child did not start");
        let stdin = child.stdin.take();
        Holder { child, stdin }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL: the child cleans nothing up.
    pub fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.wait();
    }
}

/// The files of region `name` that a creator killed with SIGKILL left.
pub fn killed(dir: &Path, name: &str) -> PathBuf {
    Holder::spawn("hold", dir, name).kill();
    let path = dir.join(name);
    assert!(path.exists(), "a killed creator leaves its file");
    path
}
