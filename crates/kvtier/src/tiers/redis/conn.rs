//! One connection to Redis (a standalone server or a Redis Cluster), the
//! pipelined operations the tier needs, and the classification of failures.
//!
//! Each worker thread owns one [`Conn`]; nothing here is shared.  A
//! standalone connection encodes its pipeline straight into one reused
//! buffer (the slot bytes are copied once); a cluster connection hands the
//! commands to the client's cluster pipeline, which splits them per node and
//! follows MOVED/ASK redirections.

use std::io::{IoSlice, Write};
use std::time::Duration;

use ::redis::cluster::{ClusterClient, ClusterClientBuilder, ClusterConnection, ClusterPipeline};
use ::redis::{
    Client, Cmd, ConnectionAddr, ConnectionInfo, ConnectionLike, IntoConnectionInfo, RedisError,
    RedisResult, RedisWrite, ToRedisArgs, Value,
};

use super::RedisTierConfig;
use super::resp::{RawConn, RawParams};
use crate::error::{Error, Result};

use super::outcome::{Cause, Failure, Reply};

/// How to reach the server or cluster; cheap to clone into worker threads.
#[derive(Clone)]
pub(super) enum Endpoint {
    /// One server over plain TCP, through the tier's own pipelined reader.
    Raw(RawParams),
    /// One server over TLS, through the redis crate.
    Single {
        /// The client (holds the address and credentials; connects nothing by itself).
        client: Client,
        /// Connect timeout.
        connect_timeout: Duration,
        /// Read and write timeout of every command.
        command_timeout: Duration,
    },
    /// A Redis Cluster, reached through its seed nodes.
    Cluster {
        /// The cluster client (seed nodes, credentials, timeouts).
        client: ClusterClient,
        /// Read and write timeout of every command.
        command_timeout: Duration,
    },
}

pub(super) fn node_info(addr: &str, config: &RedisTierConfig) -> Result<ConnectionInfo> {
    let (host, port) = addr.rsplit_once(':').ok_or_else(|| {
        Error::InvalidArgument(format!(
            "redis node address {addr:?} is not host:port (for example 127.0.0.1:6379)"
        ))
    })?;
    let port: u16 = port.parse().map_err(|_| {
        Error::InvalidArgument(format!("redis node address {addr:?} has no valid port"))
    })?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return Err(Error::InvalidArgument(format!(
            "redis node address {addr:?} has no host"
        )));
    }
    let tcp = ConnectionAddr::Tcp(host.to_string(), port);
    let addr_kind = if config.tls {
        tls_addr(host, port)?
    } else {
        tcp
    };
    let info = addr_kind
        .into_connection_info()
        .map_err(|e| Error::InvalidArgument(format!("redis node address {addr:?}: {e}")))?;
    let mut redis = info.redis_settings().clone().set_db(config.db);
    if let Some(user) = &config.username {
        redis = redis.set_username(user);
    }
    if let Some(password) = &config.password {
        redis = redis.set_password(password);
    }
    Ok(info.set_redis_settings(redis))
}

/// The CA bundle to trust instead of the system's, read when the tier is created.
pub(super) fn tls_roots(config: &RedisTierConfig) -> Result<Option<Vec<u8>>> {
    match &config.tls_ca_file {
        None => Ok(None),
        Some(path) => std::fs::read(path).map(Some).map_err(|e| {
            Error::io(
                format!("reading the redis TLS CA file {}", path.display()),
                e,
            )
        }),
    }
}

#[cfg(feature = "redis-tls")]
fn certificates(roots: &Option<Vec<u8>>) -> ::redis::TlsCertificates {
    // rustls needs a process-wide crypto provider; ring is the one built in.
    // Installing fails harmlessly when the process already has one.
    let _ = rustls::crypto::ring::default_provider().install_default();
    ::redis::TlsCertificates {
        client_tls: None,
        root_cert: roots.clone(),
    }
}

#[cfg(feature = "redis-tls")]
pub(super) fn tls_client(info: ConnectionInfo, roots: &Option<Vec<u8>>) -> Result<Client> {
    Client::build_with_tls(info, certificates(roots))
        .map_err(|e| Error::InvalidArgument(format!("redis TLS setup: {e}")))
}

#[cfg(not(feature = "redis-tls"))]
pub(super) fn tls_client(_info: ConnectionInfo, _roots: &Option<Vec<u8>>) -> Result<Client> {
    tls_addr("", 0).map(|_| unreachable!("tls_addr fails without the feature"))
}

#[cfg(feature = "redis-tls")]
fn tls_cluster(b: ClusterClientBuilder, roots: &Option<Vec<u8>>) -> Result<ClusterClientBuilder> {
    Ok(b.tls(::redis::TlsMode::Secure).certs(certificates(roots)))
}

#[cfg(not(feature = "redis-tls"))]
fn tls_cluster(_b: ClusterClientBuilder, _roots: &Option<Vec<u8>>) -> Result<ClusterClientBuilder> {
    tls_addr("", 0).map(|_| unreachable!("tls_addr fails without the feature"))
}

#[cfg(feature = "redis-tls")]
fn tls_addr(host: &str, port: u16) -> Result<ConnectionAddr> {
    Ok(ConnectionAddr::TcpTls {
        host: host.to_string(),
        port,
        insecure: false,
        tls_params: None,
    })
}

#[cfg(not(feature = "redis-tls"))]
fn tls_addr(_host: &str, _port: u16) -> Result<ConnectionAddr> {
    Err(Error::Unsupported(
        "TLS to redis needs kvtier built with the `redis-tls` feature".into(),
    ))
}

impl Endpoint {
    /// Checks the configuration and builds the client; connects nothing.
    pub(super) fn new(config: &RedisTierConfig) -> Result<Endpoint> {
        if config.nodes.is_empty() {
            return Err(Error::InvalidArgument(
                "the redis tier needs at least one node address".into(),
            ));
        }
        if config.cluster && config.db != 0 {
            return Err(Error::InvalidArgument(format!(
                "redis cluster has only database 0 (got db {})",
                config.db
            )));
        }
        let infos = config
            .nodes
            .iter()
            .map(|n| node_info(n, config))
            .collect::<Result<Vec<_>>>()?;
        if config.cluster {
            let mut b = ClusterClientBuilder::new(infos)
                .connection_timeout(config.connect_timeout)
                .response_timeout(config.command_timeout)
                .retries(2)
                .min_retry_wait(10)
                .max_retry_wait(100);
            if let Some(user) = &config.username {
                b = b.username(user);
            }
            if let Some(password) = &config.password {
                b = b.password(password);
            }
            if config.tls {
                b = tls_cluster(b, &tls_roots(config)?)?;
            }
            let client = b
                .build()
                .map_err(|e| Error::InvalidArgument(format!("redis cluster nodes: {e}")))?;
            Ok(Endpoint::Cluster {
                client,
                command_timeout: config.command_timeout,
            })
        } else {
            if infos.len() != 1 {
                return Err(Error::InvalidArgument(format!(
                    "a standalone redis tier takes exactly one node address (got {}); set cluster for several",
                    infos.len()
                )));
            }
            if !config.tls {
                return Ok(Endpoint::Raw(RawParams {
                    addr: config.nodes[0].clone(),
                    username: config.username.clone(),
                    password: config.password.clone(),
                    db: config.db,
                    connect_timeout: config.connect_timeout,
                    command_timeout: config.command_timeout,
                }));
            }
            let info = infos.into_iter().next().expect("one node");
            let client = tls_client(info, &tls_roots(config)?)?;
            Ok(Endpoint::Single {
                client,
                connect_timeout: config.connect_timeout,
                command_timeout: config.command_timeout,
            })
        }
    }

    /// Opens a connection (blocking, bounded by the connect timeout).
    pub(super) fn connect(&self) -> Result<Conn, Failure> {
        if let Endpoint::Raw(p) = self {
            return Ok(Conn::Raw {
                conn: RawConn::connect(p)?,
                buf: Vec::new(),
            });
        }
        self.connect_client().map_err(|e| {
            let cause = match Cause::of(&e) {
                // A connect that fails without a reply means the server is down.
                Cause::ConnectionReset | Cause::Other => Cause::ServerDown,
                c => c,
            };
            Failure {
                cause,
                drop_conn: true,
            }
        })
    }

    fn connect_client(&self) -> RedisResult<Conn> {
        match self {
            Endpoint::Raw(_) => unreachable!("handled by connect"),
            Endpoint::Single {
                client,
                connect_timeout,
                command_timeout,
            } => {
                let c = client.get_connection_with_timeout(*connect_timeout)?;
                c.set_read_timeout(Some(*command_timeout))?;
                c.set_write_timeout(Some(*command_timeout))?;
                Ok(Conn::Single {
                    conn: c,
                    buf: Vec::new(),
                })
            }
            Endpoint::Cluster {
                client,
                command_timeout,
            } => {
                let c = client.get_connection()?;
                c.set_write_timeout(Some(*command_timeout))?;
                c.set_read_timeout(Some(*command_timeout))?;
                Ok(Conn::Cluster(Box::new(c)))
            }
        }
    }
}

/// Whether `e` is (or, for a pipeline, contains) a cluster redirection.
fn is_redirect(e: &RedisError) -> bool {
    let code = |c: &str| c == "MOVED" || c == "ASK";
    e.code().is_some_and(code)
        || e.clone()
            .into_server_errors()
            .is_some_and(|errs| errs.iter().any(|(_, s)| code(s.code())))
}

/// One command of a pipeline, borrowing its bytes.
pub(super) enum Op<'a> {
    /// `SET name header||payload [PX ttl]`.
    Set {
        /// The Redis key.
        name: &'a [u8],
        /// The block header.
        header: &'a [u8],
        /// The slot's bytes.
        payload: &'a [u8],
        /// Expiry in milliseconds, if any.
        ttl_ms: Option<u64>,
    },
    /// `GET name`.
    Get(&'a [u8]),
    /// `EXISTS name`.
    Exists(&'a [u8]),
    /// `DEL name`.
    Del(&'a [u8]),
}

/// A value written as one argument from two slices (header, then payload),
/// so the slot bytes are copied once, into the command.
struct TwoPart<'a>(&'a [u8], &'a [u8]);

impl ToRedisArgs for TwoPart<'_> {
    fn write_redis_args<W: ?Sized + RedisWrite>(&self, out: &mut W) {
        let mut w = out.writer_for_next_arg();
        // Writing into a Vec-backed command buffer cannot fail.
        let _ = w.write_all(self.0);
        let _ = w.write_all(self.1);
    }
}

fn to_cmd(op: &Op<'_>) -> Cmd {
    match *op {
        Op::Set {
            name,
            header,
            payload,
            ttl_ms,
        } => {
            let mut c = ::redis::cmd("SET");
            c.arg(name).arg(TwoPart(header, payload));
            if let Some(ms) = ttl_ms {
                c.arg("PX").arg(ms);
            }
            c
        }
        Op::Get(name) => one_key("GET", name),
        Op::Exists(name) => one_key("EXISTS", name),
        Op::Del(name) => one_key("DEL", name),
    }
}

/// The command `verb name`.
fn one_key(verb: &str, name: &[u8]) -> Cmd {
    let mut c = ::redis::cmd(verb);
    c.arg(name);
    c
}

fn bulk(buf: &mut Vec<u8>, parts: &[&[u8]]) {
    let len: usize = parts.iter().map(|p| p.len()).sum();
    // Writing into a Vec cannot fail; formatting an integer allocates nothing.
    let _ = write!(buf, "${len}\r\n");
    for p in parts {
        buf.extend_from_slice(p);
    }
    buf.extend_from_slice(b"\r\n");
}

fn encode(buf: &mut Vec<u8>, op: &Op<'_>) {
    encode_split(buf, op, &mut |_, _| false);
}

/// Encodes `op` into `buf`; a SET's payload is offered to `cut` (with the
/// position in `buf` where it belongs) and copied only if `cut` declines.
fn encode_split<'a>(buf: &mut Vec<u8>, op: &Op<'a>, cut: &mut dyn FnMut(usize, &'a [u8]) -> bool) {
    match *op {
        Op::Set {
            name,
            header,
            payload,
            ttl_ms,
        } => {
            buf.extend_from_slice(if ttl_ms.is_some() {
                b"*5\r\n"
            } else {
                b"*3\r\n"
            });
            bulk(buf, &[b"SET"]);
            bulk(buf, &[name]);
            let _ = write!(buf, "${}\r\n", header.len() + payload.len());
            buf.extend_from_slice(header);
            if !cut(buf.len(), payload) {
                buf.extend_from_slice(payload);
            }
            buf.extend_from_slice(b"\r\n");
            if let Some(ms) = ttl_ms {
                bulk(buf, &[b"PX"]);
                let mut digits = [0u8; 20];
                let n = {
                    let mut w = &mut digits[..];
                    let _ = write!(w, "{ms}");
                    20 - w.len()
                };
                bulk(buf, &[&digits[..n]]);
            }
        }
        Op::Get(name) => {
            buf.extend_from_slice(b"*2\r\n");
            bulk(buf, &[b"GET"]);
            bulk(buf, &[name]);
        }
        Op::Exists(name) => {
            buf.extend_from_slice(b"*2\r\n");
            bulk(buf, &[b"EXISTS"]);
            bulk(buf, &[name]);
        }
        Op::Del(name) => {
            buf.extend_from_slice(b"*2\r\n");
            bulk(buf, &[b"DEL"]);
            bulk(buf, &[name]);
        }
    }
}

/// An open connection.
pub(super) enum Conn {
    /// To one server over plain TCP, with the reused encoding buffer.
    Raw {
        /// The connection.
        conn: RawConn,
        /// Pipeline encoding buffer, reused across round trips.
        buf: Vec<u8>,
    },
    /// To one server over TLS, with the reused encoding buffer.
    Single {
        /// The connection.
        conn: ::redis::Connection,
        /// Pipeline encoding buffer, reused across round trips.
        buf: Vec<u8>,
    },
    /// To a cluster (one connection per node inside).
    Cluster(Box<ClusterConnection>),
}

impl Conn {
    /// Sends `ops` as one pipeline and hands each reply, in order, to `f`.
    /// On a cluster a per-command error fails the whole call; on one server
    /// it is handed to `f` as [`Reply::Error`].
    pub(super) fn run(
        &mut self,
        ops: &[Op<'_>],
        f: &mut dyn FnMut(usize, Reply<'_>),
    ) -> Result<(), Failure> {
        if ops.is_empty() {
            return Ok(());
        }
        let values = match self {
            Conn::Raw { conn, buf } => {
                buf.clear();
                let mut cuts: Vec<(usize, &[u8])> = Vec::new();
                for op in ops {
                    encode_split(buf, op, &mut |at, payload| {
                        cuts.push((at, payload));
                        true
                    });
                }
                let r = if cuts.is_empty() {
                    conn.round_trip(buf, ops.len(), f)
                } else {
                    let mut parts = Vec::with_capacity(2 * cuts.len() + 1);
                    let mut prev = 0;
                    for (at, payload) in &cuts {
                        parts.push(IoSlice::new(&buf[prev..*at]));
                        parts.push(IoSlice::new(payload));
                        prev = *at;
                    }
                    parts.push(IoSlice::new(&buf[prev..]));
                    conn.round_trip_parts(&mut parts, ops.len(), f)
                };
                if buf.capacity() > 64 << 20 {
                    *buf = Vec::new();
                }
                return r;
            }
            Conn::Single { conn, buf } => {
                buf.clear();
                for op in ops {
                    encode(buf, op);
                }
                let r = conn.req_packed_commands(buf, 0, ops.len());
                if buf.capacity() > 64 << 20 {
                    *buf = Vec::new();
                }
                r
            }
            Conn::Cluster(conn) => {
                let mut pipe = ClusterPipeline::with_capacity(ops.len());
                for op in ops {
                    pipe.add_command(to_cmd(op));
                }
                match pipe.query::<Vec<Value>>(conn) {
                    // The blocking cluster pipeline of redis 1.2 passes
                    // MOVED/ASK replies through as errors instead of
                    // following them (single commands do follow them, and
                    // refresh the slot map): send each command on its own
                    // once.  Every command the tier sends is idempotent.
                    Err(e) if is_redirect(&e) => ops
                        .iter()
                        .map(|op| to_cmd(op).query::<Value>(conn.as_mut()))
                        .collect::<RedisResult<Vec<Value>>>(),
                    r => r,
                }
            }
        }
        .map_err(|e| Failure::of(&e))?;
        if values.len() != ops.len() {
            return Err(Failure {
                cause: Cause::Other,
                drop_conn: true,
            });
        }
        for (i, v) in values.iter().enumerate() {
            let r = match v {
                Value::Nil => Reply::Nil,
                Value::Okay | Value::SimpleString(_) => Reply::Ok,
                Value::Int(n) => Reply::Int(*n),
                Value::BulkString(b) => Reply::Bulk(b),
                Value::ServerError(e) => Reply::Error(Cause::of(&RedisError::from(e.clone()))),
                _ => Reply::Error(Cause::Other),
            };
            f(i, r);
        }
        Ok(())
    }

    /// `PING`, for probing a server the breaker gave up on.
    pub(super) fn ping(&mut self) -> Result<(), Failure> {
        match self {
            Conn::Raw { conn, .. } => {
                let mut failed = None;
                conn.round_trip(b"*1\r\n$4\r\nPING\r\n", 1, &mut |_, r| {
                    if let Reply::Error(c) = r {
                        failed = Some(c);
                    }
                })?;
                match failed {
                    None => Ok(()),
                    Some(cause) => Err(Failure {
                        cause,
                        drop_conn: true,
                    }),
                }
            }
            Conn::Single { conn, .. } => {
                ::redis::cmd("PING").exec(conn).map_err(|e| Failure::of(&e))
            }
            Conn::Cluster(conn) => {
                if conn.check_connection() {
                    Ok(())
                } else {
                    Err(Failure {
                        cause: Cause::ConnectionReset,
                        drop_conn: true,
                    })
                }
            }
        }
    }
}
