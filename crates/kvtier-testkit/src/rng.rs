//! splitmix64: a small, deterministic generator, good enough for test
//! operation sequences and benchmark key streams (the same seed gives the
//! same sequence everywhere).

/// splitmix64 state; `Rng(seed)` starts a sequence.
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 random bits (a generator's own word; the sequence
    /// never ends, so it is no `Iterator`).
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// A number below `n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    /// True with probability `percent` / 100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}
