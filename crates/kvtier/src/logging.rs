//! Routing of kvtier's log records to the embedding engine.
//!
//! The core logs through the `log` facade (tier misbehaviour, failed jobs,
//! recoveries).  Nothing is printed unless the engine installs a sink: with
//! no sink the records are dropped.  A process has one sink at a time.

use std::sync::OnceLock;

use log::{Level, LevelFilter, Log, Metadata, Record};
use parking_lot::RwLock;

use crate::error::{Error, Result};

/// Receives one record: level, target (the module that logged), message.
/// Called from any thread that logs, possibly concurrently.
pub type LogSink = Box<dyn Fn(Level, &str, &str) + Send + Sync>;

static SINK: RwLock<Option<LogSink>> = RwLock::new(None);
static INSTALLED: OnceLock<bool> = OnceLock::new();

struct Forwarder;

impl Log for Forwarder {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.level() <= log::max_level() && metadata.target().starts_with("kvtier")
    }

    fn log(&self, record: &Record<'_>) {
        if !self.enabled(record.metadata()) {
            return;
        }
        if let Some(sink) = SINK.read().as_ref() {
            let message = record.args().to_string();
            sink(record.level(), record.target(), &message);
        }
    }

    fn flush(&self) {}
}

static FORWARDER: Forwarder = Forwarder;

/// Installs `sink` for records at `max` or more severe, or removes the sink
/// (`None`: nothing is logged any more).
///
/// Fails with [`Error::Unsupported`] if the process already has another
/// `log` logger (a Rust host that set its own); kvtier's records then go to
/// that logger instead.
pub fn set_sink(sink: Option<LogSink>, max: LevelFilter) -> Result<()> {
    let installed = *INSTALLED.get_or_init(|| log::set_logger(&FORWARDER).is_ok());
    if !installed {
        return Err(Error::Unsupported(
            "the process already has a `log` logger; kvtier logs to it".into(),
        ));
    }
    let enabled = sink.is_some();
    *SINK.write() = sink;
    log::set_max_level(if enabled { max } else { LevelFilter::Off });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[test]
    fn records_reach_the_sink_filtered_by_level_and_stop_when_removed() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        set_sink(
            Some(Box::new(move |level, target, msg| {
                s.lock()
                    .unwrap()
                    .push((level, target.to_string(), msg.to_string()))
            })),
            LevelFilter::Warn,
        )
        .unwrap();
        log::warn!(target: "kvtier::test", "tier {} failed", 3);
        log::info!(target: "kvtier::test", "not at this level");
        set_sink(None, LevelFilter::Trace).unwrap();
        log::error!(target: "kvtier::test", "after removal");
        // Other tests in this process may log meanwhile: look at ours only.
        let seen: Vec<_> = seen
            .lock()
            .unwrap()
            .iter()
            .filter(|r| r.1 == "kvtier::test")
            .cloned()
            .collect();
        assert_eq!(seen.len(), 1, "{seen:?}");
        assert_eq!(seen[0].0, Level::Warn);
        assert_eq!(seen[0].1, "kvtier::test");
        assert_eq!(seen[0].2, "tier 3 failed");
    }
}
