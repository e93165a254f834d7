//! What `kvtierd` reads besides the manager's configuration: the
//! `"server"` object of its JSON file (who may connect, how far one client
//! may go, the layout fingerprint), with defaults documented in
//! `docs/server.md`.

use serde::Deserialize;

use crate::config::Config;
use crate::{Error, Result};

/// The server's own options (the `"server"` object of its configuration).
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ServerOptions {
    /// Permission bits of the socket file and of the region's files
    /// (default 0600: the server's user alone).  0660 with `group` lets
    /// that group's members connect and map the region.
    pub mode: u32,
    /// Group owning the socket and the region's files (a gid); absent:
    /// the server's.
    pub group: Option<u32>,
    /// Users allowed to connect (uids, checked with `SO_PEERCRED`); empty
    /// with `allowed_gids` empty: only the server's own user.
    pub allowed_uids: Vec<u32>,
    /// Groups whose members (primary group of the peer) may connect.
    pub allowed_gids: Vec<u32>,
    /// The model/layout fingerprint every engine must pass at connect
    /// (empty by default: engines pass an empty one).
    pub fingerprint: String,
    /// Most connections at once (default 64); more are refused at accept.
    pub max_clients: usize,
    /// Most requests one client may hold at once (default 4096).
    pub max_requests_per_client: usize,
    /// Share of the primary tier's slots one client may hold pinned by
    /// its loads (default 0.5).
    pub max_pinned_share: f64,
    /// Share of the primary tier's slots one client may hold write
    /// pending by its stores in flight (default 0.5).
    pub max_store_share: f64,
    /// Milliseconds a new connection has to complete its handshake
    /// (default 5000); then it is closed.
    pub handshake_timeout_ms: u64,
    /// Milliseconds an answer may wait for room in a client's socket
    /// (default 10000); a client that reads nothing for that long is taken
    /// as gone and its connection closed.
    pub send_timeout_ms: u64,
    /// Whether an engine may have its calls carried in shared memory
    /// instead of the socket (default true; see `docs/server.md`).
    pub ring: bool,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            mode: 0o600,
            group: None,
            allowed_uids: Vec::new(),
            allowed_gids: Vec::new(),
            fingerprint: String::new(),
            max_clients: 64,
            max_requests_per_client: 4096,
            max_pinned_share: 0.5,
            max_store_share: 0.5,
            handshake_timeout_ms: 5000,
            send_timeout_ms: 10_000,
            ring: true,
        }
    }
}

impl ServerOptions {
    /// [`ServerOptions::send_timeout_ms`] as a duration.
    pub fn send_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.send_timeout_ms)
    }

    /// An error naming the first option out of range.
    pub fn validate(&self) -> Result<()> {
        let bad = |what: &str| {
            Err(Error::InvalidArgument(format!(
                "configuration: server.{what}"
            )))
        };
        if self.mode & !0o777 != 0 {
            return bad("mode: only permission bits (at most 0o777)");
        }
        if self.max_clients == 0 {
            return bad("max_clients: must be at least 1");
        }
        if self.max_requests_per_client == 0 {
            return bad("max_requests_per_client: must be at least 1");
        }
        for (name, v) in [
            ("max_pinned_share", self.max_pinned_share),
            ("max_store_share", self.max_store_share),
        ] {
            if !(v > 0.0 && v <= 1.0) {
                return bad(&format!("{name}: must be in (0, 1], not {v}"));
            }
        }
        if self.handshake_timeout_ms == 0 {
            return bad("handshake_timeout_ms: must be at least 1");
        }
        if self.send_timeout_ms == 0 {
            return bad("send_timeout_ms: must be at least 1");
        }
        Ok(())
    }
}

/// `kvtierd`'s whole configuration: the manager's document (what
/// `kvtier_manager_new_from_json` reads, which must name a `region`) and
/// the server's options under `"server"`.
#[derive(Clone, Debug)]
pub struct DaemonConfig {
    /// The manager, its region and its tiers.
    pub manager: Config,
    /// Who may connect and how far each client may go.
    pub server: ServerOptions,
}

impl DaemonConfig {
    /// Parses the configuration file's text: strict, like the manager's
    /// document, every error naming its field.
    pub fn from_json(text: &str) -> Result<DaemonConfig> {
        let mut doc: serde_json::Value = serde_json::from_str(text)
            .map_err(|e| Error::InvalidArgument(format!("configuration: {e}")))?;
        let server = match doc.as_object_mut().and_then(|o| o.remove("server")) {
            None => ServerOptions::default(),
            Some(v) => serde_path_to_error::deserialize(v).map_err(|e| {
                Error::InvalidArgument(format!("configuration: server.{}: {}", e.path(), e.inner()))
            })?,
        };
        server.validate()?;
        let hold_hits_given = doc.pointer("/progress/hold_hits").is_some();
        let mut manager = Config::from_json(&doc.to_string())?;
        if !hold_hits_given {
            // Several engines share this manager: a block one engine's
            // lookup found stays until its load (docs/server.md).
            manager.progress.hold_hits = true;
        }
        if manager.region.is_none() {
            return Err(Error::InvalidArgument(
                "configuration: region: kvtierd shares its slots through a named region; give \
                 \"region\": {\"name\": ...} and block_bytes"
                    .into(),
            ));
        }
        Ok(DaemonConfig { manager, server })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_a_full_server_object_parse() {
        let c = DaemonConfig::from_json(
            r#"{"block_bytes": 4096, "region": {"name": "d"}, "primary": {"capacity": 8}}"#,
        )
        .unwrap();
        assert_eq!(c.server, ServerOptions::default());
        assert_eq!(c.server.send_timeout(), std::time::Duration::from_secs(10));
        assert_eq!(c.manager.primary.capacity, 8);
        assert!(c.manager.progress.hold_hits, "held by default in kvtierd");
        let c = DaemonConfig::from_json(
            r#"{"block_bytes": 4096, "region": {"name": "d"}, "progress": {"hold_hits": false}}"#,
        )
        .unwrap();
        assert!(
            !c.manager.progress.hold_hits,
            "the document's choice stands"
        );
        let c = DaemonConfig::from_json(
            r#"{"block_bytes": 4096, "region": {"name": "d"},
                "server": {"mode": 432, "allowed_uids": [5], "max_pinned_share": 0.25}}"#,
        )
        .unwrap();
        assert_eq!(c.server.mode, 0o660);
        assert_eq!(c.server.allowed_uids, [5]);
        assert_eq!(c.server.max_pinned_share, 0.25);
    }

    #[test]
    fn bad_documents_name_their_field() {
        let err = |t: &str| DaemonConfig::from_json(t).unwrap_err().to_string();
        assert!(err(r#"{"block_bytes": 4096}"#).contains("region"));
        let e = err(r#"{"block_bytes": 4096, "region": {"name": "d"}, "server": {"mod": 1}}"#);
        assert!(
            e.contains("server.") && e.contains("unknown field `mod`"),
            "{e}"
        );
        let e = err(r#"{"block_bytes": 4096, "region": {"name": "d"}, "server": {"mode": 4095}}"#);
        assert!(e.contains("server.mode"), "{e}");
        let e = err(
            r#"{"block_bytes": 4096, "region": {"name": "d"}, "server": {"max_store_share": 0}}"#,
        );
        assert!(e.contains("server.max_store_share"), "{e}");
        let e =
            err(r#"{"block_bytes": 4096, "region": {"name": "d"}, "server": {"max_clients": 0}}"#);
        assert!(e.contains("server.max_clients"), "{e}");
        for zero in [
            "handshake_timeout_ms",
            "send_timeout_ms",
            "max_requests_per_client",
        ] {
            let e = err(&format!(
                r#"{{"block_bytes": 4096, "region": {{"name": "d"}}, "server": {{"{zero}": 0}}}}"#
            ));
            assert!(e.contains(&format!("server.{zero}")), "{e}");
        }
        assert!(err("[1]").contains("configuration"));
        // The "server" object is kvtierd's: a manager built in-process refuses it.
        let e = Config::from_json(r#"{"server": {}}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown field `server`"), "{e}");
        assert!(err("{").contains("configuration"));
    }
}
