//! Back-pressure per secondary tier: a detector that decides whether the
//! tier is under pressure, and a policy that decides what happens to
//! cascades (primary → tier stores) while it is.  Loads are never dropped.
//!
//! The detector keeps an exponential moving average of store latency per
//! byte (per block when the size is unknown), seeded by the mean of the
//! first `warmup` samples, with a high and a low water mark (hysteresis, as
//! vLLM's `EMABackpressureDetector`), and counts consecutive failed stores.

use std::time::Duration;

/// What to do with a cascade to a tier under pressure (`"drop"` or
/// `"throttle"` in JSON).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PressurePolicy {
    /// Drop every cascade while under pressure.
    #[default]
    Drop,
    /// Admit a cascade only while the tier has no store job of its own in
    /// flight (one at a time); drop the others.
    Throttle,
}

/// Configuration of one tier's back-pressure detector and policy (the
/// back-pressure fields of `kvtier_tier_options`, and a tier's
/// `"backpressure"` object in JSON; missing fields take [`Default`]'s).
#[derive(Clone, Copy, Debug, PartialEq, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BackpressureConfig {
    /// Weight of a new sample in the moving average, in (0, 1].
    pub alpha: f64,
    /// Enter pressure when the average exceeds this many nanoseconds per byte.
    pub high_ns_per_byte: f64,
    /// Leave pressure when the average falls below this (<= high).
    pub low_ns_per_byte: f64,
    /// Samples averaged to seed the moving average before it can signal.
    pub warmup: u32,
    /// Enter pressure after this many consecutive failed stores (0 = never).
    pub max_consecutive_failures: u32,
    /// What to do while under pressure.
    pub policy: PressurePolicy,
}

impl Default for BackpressureConfig {
    fn default() -> Self {
        BackpressureConfig {
            alpha: 0.3,
            high_ns_per_byte: 1.0,
            low_ns_per_byte: 0.5,
            warmup: 3,
            max_consecutive_failures: 3,
            policy: PressurePolicy::Drop,
        }
    }
}

impl BackpressureConfig {
    /// Checks the ranges; the error says which field is wrong.
    pub fn validate(&self) -> crate::Result<()> {
        if !(self.alpha > 0.0 && self.alpha <= 1.0) {
            return Err(crate::Error::InvalidArgument(format!(
                "back-pressure alpha must be in (0, 1], got {}",
                self.alpha
            )));
        }
        if !(self.low_ns_per_byte >= 0.0 && self.low_ns_per_byte <= self.high_ns_per_byte) {
            return Err(crate::Error::InvalidArgument(format!(
                "back-pressure low water ({}) must be between 0 and the high water ({})",
                self.low_ns_per_byte, self.high_ns_per_byte
            )));
        }
        Ok(())
    }
}

/// One tier's detector state.
#[derive(Clone, Debug)]
pub(crate) struct Detector {
    config: BackpressureConfig,
    ema: f64,
    samples: u32,
    warmup_sum: f64,
    latency_pressure: bool,
    consecutive_failures: u32,
}

impl Detector {
    /// A detector with `config` (checked by the caller).
    pub(super) fn new(config: BackpressureConfig) -> Detector {
        Detector {
            config,
            ema: 0.0,
            samples: 0,
            warmup_sum: 0.0,
            latency_pressure: false,
            consecutive_failures: 0,
        }
    }

    /// The configuration.
    pub(super) fn config(&self) -> &BackpressureConfig {
        &self.config
    }

    /// Records one finished store: its success, size and duration.
    pub(super) fn on_store_finished(&mut self, success: bool, units: u64, elapsed: Duration) {
        if !success {
            self.consecutive_failures = self.consecutive_failures.saturating_add(1);
            return;
        }
        self.consecutive_failures = 0;
        let sample = elapsed.as_nanos() as f64 / units.max(1) as f64;
        self.samples = self.samples.saturating_add(1);
        if self.samples <= self.config.warmup {
            self.warmup_sum += sample;
            if self.samples == self.config.warmup {
                self.ema = self.warmup_sum / self.config.warmup as f64;
            }
            return;
        }
        if self.config.warmup == 0 && self.samples == 1 {
            self.ema = sample;
        } else {
            self.ema = self.config.alpha * sample + (1.0 - self.config.alpha) * self.ema;
        }
        if self.ema > self.config.high_ns_per_byte {
            self.latency_pressure = true;
        } else if self.ema < self.config.low_ns_per_byte {
            self.latency_pressure = false;
        }
    }

    /// Whether the tier is under pressure now.
    pub(super) fn under_pressure(&self) -> bool {
        self.latency_pressure
            || (self.config.max_consecutive_failures > 0
                && self.consecutive_failures >= self.config.max_consecutive_failures)
    }

    /// The moving average (ns per byte, or per block when sizes are unknown).
    pub(super) fn ema(&self) -> f64 {
        self.ema
    }

    /// Forgets everything learned (used by `reset_cache`).
    pub(super) fn reset(&mut self) {
        *self = Detector::new(self.config);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> BackpressureConfig {
        BackpressureConfig {
            alpha: 0.5,
            high_ns_per_byte: 10.0,
            low_ns_per_byte: 6.0,
            warmup: 2,
            max_consecutive_failures: 2,
            policy: PressurePolicy::Drop,
        }
    }

    #[test]
    fn latency_enters_and_leaves_pressure_with_hysteresis() {
        let mut d = Detector::new(cfg());
        d.on_store_finished(true, 100, Duration::from_nanos(2000));
        d.on_store_finished(true, 100, Duration::from_nanos(2000));
        assert!(!d.under_pressure(), "warm-up never signals");
        assert_eq!(d.ema(), 20.0);
        d.on_store_finished(true, 100, Duration::from_nanos(2000));
        assert!(d.under_pressure());
        d.on_store_finished(true, 100, Duration::from_nanos(0));
        assert_eq!(d.ema(), 10.0);
        assert!(d.under_pressure(), "between the marks nothing changes");
        d.on_store_finished(true, 100, Duration::from_nanos(0));
        assert!(!d.under_pressure());
    }

    #[test]
    fn consecutive_failures_signal_and_a_success_or_reset_clears() {
        let mut d = Detector::new(cfg());
        d.on_store_finished(false, 1, Duration::ZERO);
        assert!(!d.under_pressure());
        d.on_store_finished(false, 1, Duration::ZERO);
        assert!(d.under_pressure());
        d.reset();
        assert!(!d.under_pressure());
        d.on_store_finished(false, 1, Duration::ZERO);
        d.on_store_finished(false, 1, Duration::ZERO);
        d.on_store_finished(true, 1, Duration::ZERO);
        assert!(!d.under_pressure());
    }

    #[test]
    fn bad_configs_are_rejected() {
        let mut c = cfg();
        c.alpha = 0.0;
        assert!(c.validate().is_err());
        let mut c = cfg();
        c.low_ns_per_byte = 11.0;
        assert!(c.validate().is_err());
        assert!(cfg().validate().is_ok());
    }
}
