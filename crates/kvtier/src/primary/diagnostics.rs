//! Diagnostics: views of the tier's insides for tests, benchmarks and
//! debugging (the metadata size per slot, the eviction order, the
//! internal invariants).  Each reads the whole tier (O(capacity) or
//! O(resident keys)): never called on a hot path.

use super::PrimaryTier;
use super::policy::Policy;
use super::slots::{self, PARKED, RESIDENT};
use crate::key::Key;

impl PrimaryTier {
    /// Makes batch loops read ahead, or not, whatever the capacity (tests
    /// compare both paths on small tiers).
    #[cfg(test)]
    pub(crate) fn set_read_ahead(&mut self, on: bool) {
        self.slots.read_ahead = on;
    }

    /// Bytes of metadata per slot, excluding key bytes: slot arrays, key
    /// index, free list at its largest, and the policy's lists (and ARC's
    /// ghost lists and index as they are now).
    pub fn metadata_bytes_per_slot(&self) -> f64 {
        (self.slots.metadata_bytes() + self.policy.metadata_bytes()) as f64
            / self.config.capacity as f64
    }

    /// Resident slots in the policy's eviction-preference order (pinned and
    /// write-pending included).  O(n): for tests and diagnostics.
    pub fn eviction_order(&self) -> Vec<Key> {
        self.policy
            .order()
            .into_iter()
            .map(|s| *self.slots.key(s))
            .collect()
    }

    /// Checks the internal invariants (every slot free or resident exactly
    /// once, index and lists agree, gauges match, requests' pin counts
    /// add up, no key kept in the spent pins
    /// at 0).  O(capacity): for tests.
    #[allow(clippy::needless_range_loop)]
    pub fn check_invariants(&self) -> std::result::Result<(), String> {
        let cap = self.config.capacity as usize;
        let mut seen = vec![0u8; cap];
        let free = self.slots.free_slots();
        if free.len() != self.slots.free_len as usize {
            return Err("free stack length differs from its count".into());
        }
        for &f in &free {
            let f = f as usize;
            if f >= self.slots.fresh as usize {
                return Err(format!("free slot {f} was never allocated"));
            }
            seen[f] += 1;
        }
        let (mut wp, mut pinned, mut idle) = (0u32, 0u32, 0u32);
        let mut per_writer = std::collections::HashMap::new();
        if self.slots.records.len() != self.slots.fresh as usize {
            return Err("records differ from allocated slots".into());
        }
        for s in 0..self.slots.fresh {
            if self.slots.flags(s) & RESIDENT != 0 {
                seen[s as usize] += 1;
                let key = self.slots.key(s);
                if self.slots.find(key, self.slots.hash(key)) != Some(s) {
                    return Err(format!("slot {s} resident but not indexed"));
                }
                match self.slots.refs(s) {
                    r if r < 0 => {
                        wp += 1;
                        *per_writer.entry(slots::writer_id(r)).or_insert(0u32) += 1;
                    }
                    0 if self.slots.flags(s) & slots::HELD == 0 => idle += 1,
                    _ => pinned += 1,
                }
            }
        }
        for (s, &n) in seen.iter().enumerate().take(self.slots.fresh as usize) {
            if n != 1 {
                return Err(format!("slot {s} is free/resident {n} times"));
            }
        }
        self.writers.check(&per_writer)?;
        if self.slots.index.len() != (wp + pinned + idle) as usize {
            return Err("index size differs from resident count".into());
        }
        if (wp, pinned, idle) != (self.write_pending, self.pinned, self.idle) {
            return Err(format!(
                "gauges {:?} differ from counted {:?}",
                (self.write_pending, self.pinned, self.idle),
                (wp, pinned, idle)
            ));
        }
        let order = self.policy.order();
        if order.len() != self.slots.index.len() {
            return Err("policy lists differ from resident keys".into());
        }
        for &s in &order {
            if self.slots.flags(s) & RESIDENT == 0 {
                return Err(format!("policy lists free slot {s}"));
            }
        }
        // Candidates: the order less the parked slots, which are all busy.
        let unparked: Vec<u32> = order
            .into_iter()
            .filter(|&s| self.slots.flags(s) & PARKED == 0)
            .collect();
        if unparked != self.policy.candidate_order() {
            return Err("eviction candidates differ from the unparked order".into());
        }
        for s in 0..self.slots.fresh {
            if self.slots.flags(s) & PARKED != 0 && self.slots.is_idle(s) {
                return Err(format!("slot {s} is idle but parked"));
            }
        }
        for (id, r) in self.requests.iter().chain(&self.finished_loads) {
            let held: u64 = r.accesses.iter().map(|a| a.pins as u64).sum();
            if held != r.pins {
                return Err(format!(
                    "request #{} counts {} pins, its keys {held}",
                    id.0, r.pins
                ));
            }
        }
        // No key is kept with no spent pin.
        for (key, n) in self.spent.iter() {
            if *n == 0 {
                return Err(format!("key {key}: kept with no spent pin"));
            }
        }
        for (id, r) in &self.finished_loads {
            if r.pins == 0 || self.requests.contains_key(id) {
                return Err(format!(
                    "finished request #{} kept with {} pins (active: {})",
                    id.0,
                    r.pins,
                    self.requests.contains_key(id)
                ));
            }
        }
        Ok(())
    }
}
