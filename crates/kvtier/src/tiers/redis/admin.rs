//! The redis tier's namespace-wide commands, each on a connection of its
//! own opened for the call (bounded by the tier's connect and command
//! timeouts): the layout key checked when the tier is created
//! (`SET NAMESPACE:layout F NX`, then `GET` and compare), and the
//! namespace's blocks deleted (`SCAN` and `UNLINK`, the layout key kept):
//! all of them at shutdown when asked, or those of a key prefix for
//! `drop_blocks`.

use ::redis::{Client, ConnectionLike, RedisError};

use super::config::RedisTierConfig;
use super::conn::{Endpoint, node_info, tls_client, tls_roots};
use crate::error::{Error, Result};
use crate::tiers::layout::mismatch;

fn failed(config: &RedisTierConfig, what: &str, e: RedisError) -> Error {
    Error::Tier {
        tier: config.name.clone(),
        message: format!("{what} on {}: {e}", config.nodes.join(",")),
    }
}

/// A connection for one namespace-wide command.
fn connect(config: &RedisTierConfig, what: &str) -> Result<Box<dyn ConnectionLike>> {
    let err = |e| failed(config, what, e);
    if config.cluster {
        let Endpoint::Cluster { client, .. } = Endpoint::new(config)? else {
            unreachable!("a cluster configuration gives a cluster endpoint")
        };
        let c = client.get_connection().map_err(err)?;
        c.set_read_timeout(Some(config.command_timeout))
            .map_err(err)?;
        c.set_write_timeout(Some(config.command_timeout))
            .map_err(err)?;
        return Ok(Box::new(c));
    }
    let info = node_info(&config.nodes[0], config)?;
    let client = if config.tls {
        tls_client(info, &tls_roots(config)?)?
    } else {
        Client::open(info).map_err(err)?
    };
    let c = client
        .get_connection_with_timeout(config.connect_timeout)
        .map_err(err)?;
    c.set_read_timeout(Some(config.command_timeout))
        .map_err(err)?;
    c.set_write_timeout(Some(config.command_timeout))
        .map_err(err)?;
    Ok(Box::new(c))
}

/// The key holding the namespace's layout fingerprint.
pub fn layout_key(namespace: &str) -> String {
    format!("{namespace}:layout")
}

/// Adopts the namespace for `fingerprint` (writes its layout key if it
/// has none) or refuses it when the key names another fingerprint.
pub(super) fn settle_layout(config: &RedisTierConfig, fingerprint: &str) -> Result<()> {
    let what = "checking the layout fingerprint";
    let mut c = connect(config, what)?;
    let key = layout_key(&config.namespace);
    let err = |e| failed(config, what, e);
    let _: Option<String> = ::redis::cmd("SET")
        .arg(&key)
        .arg(fingerprint)
        .arg("NX")
        .query(&mut *c)
        .map_err(err)?;
    let stored: Option<Vec<u8>> = ::redis::cmd("GET").arg(&key).query(&mut *c).map_err(err)?;
    match stored {
        Some(s) if s == fingerprint.as_bytes() => Ok(()),
        Some(s) => Err(mismatch(
            &format!("redis namespace {:?}", config.namespace),
            &String::from_utf8_lossy(&s),
            fingerprint,
            "namespace, or delete the namespace's keys (NAMESPACE:*) on the server",
        )),
        None => Err(Error::Tier {
            tier: config.name.clone(),
            message: format!("the layout key {key} vanished while it was written"),
        }),
    }
}

/// `namespace:HEX*` as a `SCAN` pattern (`HEX` the lowercase hex of
/// `key_prefix`, as block names spell keys), the namespace's glob
/// characters escaped.
fn pattern(namespace: &str, key_prefix: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut p = String::with_capacity(namespace.len() + 2 * key_prefix.len() + 2);
    for ch in namespace.chars() {
        if matches!(ch, '*' | '?' | '[' | ']' | '\\') {
            p.push('\\');
        }
        p.push(ch);
    }
    p.push(':');
    for b in key_prefix {
        p.push(HEX[(b >> 4) as usize] as char);
        p.push(HEX[(b & 15) as usize] as char);
    }
    p.push('*');
    p
}

/// Deletes every key of the namespace but its layout key; returns how many.
pub(super) fn clear(config: &RedisTierConfig) -> Result<u64> {
    unlink_matching(config, "clearing the namespace", &[])
}

/// Deletes the namespace's blocks whose keys start with `key_prefix`
/// (every key of the namespace for an empty one), never its layout key;
/// returns how many (the sum of `UNLINK`'s replies).  One `SCAN` round
/// trip per 1000 keys looked at and one `UNLINK` per batch found, each
/// bounded by the command timeout.
pub(super) fn unlink_matching(
    config: &RedisTierConfig,
    what: &str,
    key_prefix: &[u8],
) -> Result<u64> {
    let mut c = connect(config, what)?;
    let err = |e| failed(config, what, e);
    let keep = layout_key(&config.namespace).into_bytes();
    let pattern = pattern(&config.namespace, key_prefix);
    let mut cursor: u64 = 0;
    let mut removed = 0;
    loop {
        let (next, keys): (u64, Vec<Vec<u8>>) = ::redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(&pattern)
            .arg("COUNT")
            .arg(1000)
            .query(&mut *c)
            .map_err(err)?;
        let doomed: Vec<&Vec<u8>> = keys.iter().filter(|k| **k != keep).collect();
        if !doomed.is_empty() {
            let n: u64 = ::redis::cmd("UNLINK")
                .arg(doomed)
                .query(&mut *c)
                .map_err(err)?;
            removed += n;
        }
        if next == 0 {
            return Ok(removed);
        }
        cursor = next;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glob_characters_of_the_namespace_are_escaped() {
        assert_eq!(pattern("kv", &[]), "kv:*");
        assert_eq!(pattern("a*b?[c]\\", &[]), "a\\*b\\?\\[c\\]\\\\:*");
        assert_eq!(pattern("kv", &[0x0a, 0xf1]), "kv:0af1*");
        assert_eq!(layout_key("kv"), "kv:layout");
    }
}
