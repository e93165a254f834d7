//! A request's load calls with its keys read in place, as C passes them
//! (each checked to be 1..=64 bytes): the same calls as
//! [`Manager::prepare_load`], [`Manager::touch`] and
//! [`Manager::complete_load`], without copying the keys first.

use super::{Manager, RequestId, Result};
use crate::error::Error;
use crate::fallible;
use crate::key::Key;

impl Manager {
    /// [`Manager::prepare_load`] of keys read in place.
    #[doc(hidden)]
    pub fn prepare_load_in_place(
        &self,
        request: RequestId,
        keys: &[&[u8]],
        slots_out: &mut Vec<u32>,
    ) -> Result<()> {
        let mut s = self.enter("prepare_load")?;
        s.active(request)?;
        s.check_keys(keys.len(), |j| keys[j])?;
        s.poll_gated(&self.queue);
        s.primary.prepare_load_bytes(request, keys, slots_out)?;
        s.on_loaded(request, keys.len(), |j| keys[j]);
        Ok(())
    }

    /// [`Manager::touch`] of keys read in place; they are copied only for
    /// the secondary tiers that act on touches.
    #[doc(hidden)]
    pub fn touch_in_place(&self, request: RequestId, keys: &[&[u8]]) -> Result<()> {
        let mut s = self.enter("touch")?;
        let s = &mut *s;
        s.active(request)?;
        s.check_keys(keys.len(), |j| keys[j])?;
        let copy = s.tiers.iter().any(|t| t.tier.wants_touches());
        let mut copies = std::mem::take(&mut s.keys_a);
        copies.clear();
        // Room first: a call that fails changes nothing.
        let touched = if copy {
            fallible::reserve(&mut copies, keys.len(), "the keys of a touch")
        } else {
            Ok(())
        }
        .and_then(|()| s.primary.touch_bytes(request, keys));
        if touched.is_ok() && copy {
            for k in keys {
                copies.push(Key::FILLER);
                if let Some(c) = copies.last_mut() {
                    c.set_checked(k);
                }
            }
            let info = &s.reqs[&request].info;
            for t in &mut s.tiers {
                if t.tier.wants_touches() {
                    t.tier.touch(&copies, info);
                }
            }
        }
        s.keys_a = copies;
        touched
    }

    /// [`Manager::complete_load`] of keys read in place.
    #[doc(hidden)]
    pub fn complete_load_in_place(&self, request: RequestId, keys: &[&[u8]]) -> Result<()> {
        let mut s = self.enter("complete_load")?;
        // The primary tier knows both the active requests and the finished
        // ones whose loads still hold pins.
        s.check_keys(keys.len(), |j| keys[j])?;
        s.primary
            .complete_load_bytes(request, keys)
            .map_err(|e| match e {
                Error::UnknownRequest(_) => s.unknown_request(request),
                other => other,
            })
    }
}
