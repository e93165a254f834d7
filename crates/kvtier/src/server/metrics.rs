//! What the server reports about its clients: Prometheus families with a
//! `client` label (appended to the manager's exposition), and the client
//! list `kvtier-inspect server` prints.

use std::fmt::Write;
use std::sync::atomic::Ordering;

use super::state::{Peer, Shared};

/// One client in the list.
#[derive(Debug, serde::Serialize)]
struct ClientRow<'a> {
    id: u64,
    name: &'a str,
    engine: bool,
    peer: Peer,
    requests: usize,
    pins: usize,
    stores: usize,
    calls: usize,
}

/// The server and its clients as JSON: `{"region": ..., "clients": [...]}`.
pub(super) fn clients_json(shared: &Shared) -> String {
    let clients = shared.clients.lock();
    let mut rows: Vec<ClientRow<'_>> = clients
        .iter()
        .map(|(id, c)| ClientRow {
            id: *id,
            name: &c.name,
            engine: c.engine,
            peer: c.peer,
            requests: c.status.requests.load(Ordering::Relaxed),
            pins: c.status.pins.load(Ordering::Relaxed),
            stores: c.status.stores.load(Ordering::Relaxed),
            calls: c.status.calls.load(Ordering::Relaxed),
        })
        .collect();
    rows.sort_by_key(|r| r.id);
    serde_json::json!({
        "server": shared.info,
        "disconnects": shared.disconnects.load(Ordering::Relaxed),
        "refused": shared.refused.load(Ordering::Relaxed),
        "clients": rows,
    })
    .to_string()
}

/// Label value: the client's name and id (names are the engines' own and
/// may repeat), with characters outside `[A-Za-z0-9_.:/-]` replaced.
fn label(id: u64, name: &str) -> String {
    let clean: String = name
        .chars()
        .take(64)
        .map(|c| {
            if c.is_ascii_alphanumeric() || "_.:/-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("{clean}#{id}")
}

/// The server's `/metrics` endpoint (the configuration's `"metrics"`)
/// serves the manager's families and the server's, and the manager's
/// health and readiness.
impl crate::serve::MetricsSource for Shared {
    fn prometheus_text(&self) -> crate::Result<String> {
        let mut text = self.manager.prometheus_text()?;
        append(self, &mut text);
        Ok(text)
    }

    fn health(&self) -> crate::Result<()> {
        crate::serve::MetricsSource::health(&*self.manager)
    }

    fn readiness(&self) -> crate::Result<crate::tiering::Readiness> {
        self.manager.readiness()
    }
}

/// Appends the server's families to `text` (the manager's exposition).
pub(super) fn append(shared: &Shared, text: &mut String) {
    let clients = shared.clients.lock();
    let mut family =
        |name: &str, kind: &str, help: &str, rows: &mut dyn Iterator<Item = (String, u64)>| {
            let _ = writeln!(text, "# HELP {name} {help}");
            let _ = writeln!(text, "# TYPE {name} {kind}");
            for (client, v) in rows {
                if client.is_empty() {
                    let _ = writeln!(text, "{name} {v}");
                } else {
                    let _ = writeln!(text, "{name}{{client=\"{client}\"}} {v}");
                }
            }
        };
    let engines = || clients.iter().filter(|(_, c)| c.engine);
    family(
        "kvtier_server_clients",
        "gauge",
        "Connections the server holds now.",
        &mut std::iter::once((String::new(), clients.len() as u64)),
    );
    family(
        "kvtier_server_disconnects_total",
        "counter",
        "Connections that ended (their requests' pins and stores released).",
        &mut std::iter::once((String::new(), shared.disconnects.load(Ordering::Relaxed))),
    );
    family(
        "kvtier_server_refused_total",
        "counter",
        "Connections refused at accept (credentials or the connection bound).",
        &mut std::iter::once((String::new(), shared.refused.load(Ordering::Relaxed))),
    );
    family(
        "kvtier_server_client_requests",
        "gauge",
        "Requests each engine holds.",
        &mut engines().map(|(id, c)| {
            (
                label(*id, &c.name),
                c.status.requests.load(Ordering::Relaxed) as u64,
            )
        }),
    );
    family(
        "kvtier_server_client_pinned_blocks",
        "gauge",
        "Blocks each engine holds pinned by its loads.",
        &mut engines().map(|(id, c)| {
            (
                label(*id, &c.name),
                c.status.pins.load(Ordering::Relaxed) as u64,
            )
        }),
    );
    family(
        "kvtier_server_client_stores_in_flight",
        "gauge",
        "Blocks each engine's stores hold write pending.",
        &mut engines().map(|(id, c)| {
            (
                label(*id, &c.name),
                c.status.stores.load(Ordering::Relaxed) as u64,
            )
        }),
    );
    family(
        "kvtier_server_client_calls_total",
        "counter",
        "Calls each engine made.",
        &mut engines().map(|(id, c)| {
            (
                label(*id, &c.name),
                c.status.calls.load(Ordering::Relaxed) as u64,
            )
        }),
    );
}

#[cfg(test)]
mod tests {
    use super::label;

    #[test]
    fn labels_keep_safe_characters_and_carry_the_id() {
        assert_eq!(label(3, "engine-0"), "engine-0#3");
        assert_eq!(label(4, "a\"b\nc}"), "a_b_c_#4");
        assert_eq!(label(5, &"x".repeat(100)).len(), 64 + 2);
    }
}
