//! How option values that are not plain numbers, strings or booleans are
//! written in a JSON configuration (see [`crate::config`]): durations as
//! whole milliseconds in fields named `*_ms`, an optional duration as
//! milliseconds with 0 for none, and a tier's locality by name.  The option
//! types use these through `#[serde(deserialize_with = ...)]`, so the JSON
//! reads straight into them.

use std::time::Duration;

use serde::{Deserialize, Deserializer};

use crate::request::Locality;

/// A duration given as whole milliseconds.
pub(crate) fn millis<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    u64::deserialize(d).map(Duration::from_millis)
}

/// An optional duration given as whole milliseconds, 0 meaning none.
pub(crate) fn millis_or_none<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<Duration>, D::Error> {
    u64::deserialize(d).map(|ms| (ms > 0).then(|| Duration::from_millis(ms)))
}

/// A locality by name: `"local"` or `"remote"`.
pub(crate) fn locality<'de, D: Deserializer<'de>>(d: D) -> Result<Locality, D::Error> {
    #[derive(Deserialize)]
    #[serde(rename_all = "snake_case")]
    enum Name {
        Local,
        Remote,
    }
    Ok(match Name::deserialize(d)? {
        Name::Local => Locality::Local,
        Name::Remote => Locality::Remote,
    })
}

/// A file mode: an octal string (`"0640"`, `"640"`, `"0o640"`) or a
/// number (taken as is: `416` is `0o640`).
pub(crate) fn file_mode<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    #[derive(serde::Deserialize)]
    #[serde(untagged)]
    enum Mode {
        Number(u32),
        Text(String),
    }
    match Mode::deserialize(d)? {
        Mode::Number(n) => Ok(n),
        Mode::Text(t) => {
            let digits = t.strip_prefix("0o").unwrap_or(&t);
            u32::from_str_radix(digits, 8).map_err(|_| {
                serde::de::Error::custom(format!(
                    "file_mode {t:?} is not an octal mode such as \"0600\""
                ))
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize, Debug, PartialEq)]
    struct Probe {
        #[serde(deserialize_with = "millis")]
        a: Duration,
        #[serde(deserialize_with = "millis_or_none")]
        b: Option<Duration>,
        #[serde(deserialize_with = "millis_or_none")]
        c: Option<Duration>,
        #[serde(deserialize_with = "locality")]
        d: Locality,
    }

    #[test]
    fn values_read_as_their_json_forms() {
        let p: Probe =
            serde_json::from_str(r#"{"a": 1500, "b": 0, "c": 7, "d": "remote"}"#).unwrap();
        assert_eq!(
            p,
            Probe {
                a: Duration::from_millis(1500),
                b: None,
                c: Some(Duration::from_millis(7)),
                d: Locality::Remote,
            }
        );
        assert!(
            serde_json::from_str::<Probe>(r#"{"a": -1, "b": 0, "c": 0, "d": "local"}"#).is_err()
        );
        let e = serde_json::from_str::<Probe>(r#"{"a": 1, "b": 0, "c": 0, "d": "mars"}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown variant `mars`"), "{e}");
    }
}
