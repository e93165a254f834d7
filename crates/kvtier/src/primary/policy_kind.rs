//! Which eviction policy a tier runs, by name: the one enum of the
//! policies (the `Policy` trait is in `policy.rs`, the tier's dispatch
//! over them, `AnyPolicy`, in `any_policy.rs`).

use std::str::FromStr;

use crate::error::{Error, Result};

/// Eviction policy, chosen by name at creation (`"lru"` or `"arc"`, in
/// C and in JSON).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PolicyKind {
    /// [0.33] least recently used, logical recency (docs/design.md, "lru").
    #[default]
    Lru,
    /// Adaptive Replacement Cache (docs/design.md, "arc").
    Arc,
}

impl PolicyKind {
    /// The policy's name as accepted by [`FromStr`].
    pub fn name(self) -> &'static str {
        match self {
            PolicyKind::Lru => "lru",
            PolicyKind::Arc => "arc",
        }
    }
}

impl FromStr for PolicyKind {
    type Err = Error;

    fn from_str(s: &str) -> Result<PolicyKind> {
        match s {
            "lru" => Ok(PolicyKind::Lru),
            "arc" => Ok(PolicyKind::Arc),
            other => Err(Error::InvalidArgument(format!(
                "unknown eviction policy {other:?}; valid policies: \"lru\", \"arc\""
            ))),
        }
    }
}
