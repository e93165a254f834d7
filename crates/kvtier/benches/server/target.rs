//! Where a benchmark engine's manager is: the server over a transport, or
//! its own.

use std::path::Path;

use kvtier_core::server::Transport;

/// A transport's name in the arguments and the figures.
pub(super) fn transport_name(t: Transport) -> &'static str {
    match t {
        Transport::Ring => "ring",
        Transport::Socket => "socket",
    }
}

/// The transport `name` names.
pub(super) fn transport_of(name: &str) -> Transport {
    match name {
        "ring" => Transport::Ring,
        "socket" => Transport::Socket,
        other => panic!("--transport: ring or socket, not {other:?}"),
    }
}

/// Where an engine's manager is: a server (its socket, over a transport)
/// or its own.
#[derive(Clone, Copy)]
pub(super) enum Target<'a> {
    Server(&'a Path, Transport),
    Local,
}

impl Target<'_> {
    /// The engine arguments that say so (`local` for an in-process one).
    pub(super) fn args(self, local: &[String]) -> Vec<String> {
        match self {
            Target::Server(s, t) => vec![
                "--socket".into(),
                s.display().to_string(),
                "--transport".into(),
                transport_name(t).into(),
            ],
            Target::Local => local.to_vec(),
        }
    }
}
