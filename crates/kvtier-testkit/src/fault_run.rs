//! Settings shared by the fault runs: how many rounds (short under
//! `make test`, long under `make faults`) and the random seed, both from
//! the environment so a failing run can be repeated exactly.

/// Rounds of a fault run: `KVTIER_FAULT_ROUNDS`, or `default` (the short
/// setting `make test` uses).
pub fn rounds(default: u32) -> u32 {
    match std::env::var("KVTIER_FAULT_ROUNDS") {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("KVTIER_FAULT_ROUNDS={v:?} is not a number")),
        Err(_) => default,
    }
}

/// The seed of a fault run: `KVTIER_FAULT_SEED`, or one from the clock
/// (printed with the run's figures, so the run can be repeated).
pub fn seed() -> u64 {
    match std::env::var("KVTIER_FAULT_SEED") {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("KVTIER_FAULT_SEED={v:?} is not a number")),
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1),
    }
}
