//! Primary-tier benchmark: ns per lookup, per key of prepare_load +
//! complete_load, and per key of prepare_store + complete_store with and
//! without eviction, at 10^4, 10^6 and 10^7 slots, for lru and arc.
//!
//! Two access patterns: `uniform` draws keys uniformly from every resident
//! key (the worst case for caches: at 10^7 slots most accesses miss the CPU
//! caches), `hot` draws from a fixed working set of 10^4 resident keys (the
//! same working set at every size, so the figure shows what the data
//! structure's size itself costs).  Calls of 16 keys, as an engine's
//! per-step calls, in requests of 1024 keys; lookups and loads also in
//! calls of 128 keys (`lookup_request`, `load_request`: a request's keys in
//! one call).  Request commits are timed apart (`commit_loads`, ns per
//! committed key).  Also reports metadata bytes per block (key bytes
//! excluded), measured on the live tier.
//!
//! `machine/N/memory_floor/uniform` calibrates: what the memory reads of
//! a uniform batched lookup cost on this machine with no tier logic at all
//! (see [`memory_floor`]); the tier cannot be faster than it.
//! `machine/N/memory_latency/uniform`: one read that depends on the one
//! before, over an array the size of the tier's records (see
//! [`memory_latency`]).  A lookup that misses the caches makes two such
//! reads in sequence (its index line, then its record); only reading
//! ahead within a call, or the processor running the next call's first
//! reads early, hides them.
//!
//!     cargo bench --bench primary -- [--out FILE.json] [--quick] [--sizes N,N..] [--policies lru,arc]

use kvtier_testkit::rng;

use std::fmt::Write as _;
use std::hint::black_box;
use std::time::Instant;

use kvtier_core::Key;
use kvtier_core::primary::{
    PolicyKind, PrimaryConfig, PrimaryLookup, PrimaryTier, StoreOutcome, StorePlan,
};
use kvtier_core::request::RequestId;
use rng::Rng;

/// Keys per call.
const BATCH: usize = 16;
/// Keys per call when a call carries a request's keys (lookups and loads).
const REQUEST_CALL: usize = 128;
const HOT: u64 = 10_000;
/// Keys per request: requests are finished (their accesses committed) after this many.
const REQUEST_KEYS: usize = 1024;

/// Key `i`: 12 bytes like vLLM's (8-byte block hash, 4-byte group index).
fn key(i: u64) -> Key {
    let mut b = [0u8; 12];
    b[..8].copy_from_slice(&Rng(i).next().to_le_bytes());
    b[8..].copy_from_slice(&((i % 3) as u32).to_be_bytes());
    Key::new(&b).unwrap()
}

struct Fig {
    name: String,
    ns: f64,
}

fn fill(t: &mut PrimaryTier, from: u64, to: u64, plan: &mut StorePlan) {
    let req = RequestId(0);
    let mut keys = Vec::with_capacity(BATCH);
    let mut i = from;
    while i < to {
        keys.clear();
        let end = (i + BATCH as u64).min(to);
        keys.extend((i..end).map(key));
        assert_eq!(
            t.prepare_store(req, &keys, plan).unwrap(),
            StoreOutcome::Planned
        );
        t.complete_store(req, &plan.to_store, true);
        i = end;
    }
}

fn pick(rng: &mut Rng, n: u64, hot: bool, hot_base: u64) -> u64 {
    if hot {
        hot_base + rng.next() % HOT.min(n)
    } else {
        rng.next() % n
    }
}

/// Repetitions of each measurement; the fastest is reported (the machine
/// may be shared: the minimum is the figure least disturbed by others).
const REPS: u64 = 5;

/// Runs `f` (which returns the number of operations it timed and the
/// elapsed nanoseconds) `REPS` times; the lowest ns per operation.
fn best(mut f: impl FnMut(u64) -> (u64, f64)) -> f64 {
    (0..REPS)
        .map(|rep| {
            let (n, ns) = f(rep);
            ns / n as f64
        })
        .fold(f64::INFINITY, f64::min)
}

fn run(policy: PolicyKind, n: u64, ops: u64, out: &mut Vec<Fig>, meta: &mut Vec<(String, f64)>) {
    let label = format!("{}/{}", policy.name(), n);
    let config = PrimaryConfig {
        capacity: n as u32,
        policy,
        ..Default::default()
    };
    let mut t = PrimaryTier::new(config.clone()).unwrap();
    let req = RequestId(0);
    t.request_begin(req).unwrap();
    let mut plan = StorePlan::default();
    let t0 = Instant::now();
    fill(&mut t, 0, n, &mut plan);
    let fill_s = t0.elapsed().as_secs_f64();
    // The hot set: HOT keys in the middle of the resident range.
    let hot_base = (n - HOT.min(n)) / 2;
    let mut keys: Vec<Key> = Vec::with_capacity(BATCH);
    let mut slots = Vec::with_capacity(BATCH);
    let per_rep = ops / REPS / REQUEST_KEYS as u64 * REQUEST_KEYS as u64;

    for hot in [false, true] {
        let pattern = if hot { "hot" } else { "uniform" };
        let mut rng = Rng(1);
        let probe: Vec<Key> = (0..per_rep)
            .map(|_| key(pick(&mut rng, n, hot, hot_base)))
            .collect();
        let ns = best(|_| {
            let t0 = Instant::now();
            let mut hits = 0u64;
            for k in &probe {
                hits += (t.lookup(black_box(k)) == PrimaryLookup::Hit) as u64;
            }
            let ns = t0.elapsed().as_nanos() as f64;
            assert_eq!(hits, per_rep);
            (per_rep, ns)
        });
        out.push(Fig {
            name: format!("{label}/lookup_single/{pattern}"),
            ns,
        });
        // Lookups and loads in calls of 16 keys (an engine's per-step
        // calls) and of 128 (a request's keys in one call: a 2,048-token
        // prompt at 16 tokens per block).
        for (call, suffix) in [(BATCH, ""), (REQUEST_CALL, "_request")] {
            let mut results = vec![PrimaryLookup::Miss; call];
            let ns = best(|_| {
                let t0 = Instant::now();
                let mut hits = 0u64;
                for chunk in probe.chunks_exact(call) {
                    t.lookup_batch(black_box(chunk), &mut results);
                    hits += results.iter().filter(|&&r| r == PrimaryLookup::Hit).count() as u64;
                }
                let ns = t0.elapsed().as_nanos() as f64;
                assert_eq!(hits, per_rep);
                (per_rep, ns)
            });
            out.push(Fig {
                name: format!("{label}/lookup{suffix}/{pattern}"),
                ns,
            });

            // prepare_load + complete_load, as requests of REQUEST_KEYS
            // keys; their commits (on_request_finished) are timed apart,
            // per committed key.
            let mut commit = f64::INFINITY;
            let ns = best(|_| {
                let (mut op_ns, mut fin_ns) = (0.0, 0.0);
                for request in probe.chunks(REQUEST_KEYS) {
                    let t0 = Instant::now();
                    for chunk in request.chunks_exact(call) {
                        t.prepare_load(req, black_box(chunk), &mut slots).unwrap();
                        t.complete_load(req, chunk).unwrap();
                    }
                    op_ns += t0.elapsed().as_nanos() as f64;
                    let t0 = Instant::now();
                    t.request_finished(req).unwrap();
                    fin_ns += t0.elapsed().as_nanos() as f64;
                    t.request_begin(req).unwrap();
                }
                commit = commit.min(fin_ns / per_rep as f64);
                (per_rep, op_ns)
            });
            out.push(Fig {
                name: format!("{label}/load{suffix}/{pattern}"),
                ns,
            });
            if call == BATCH {
                out.push(Fig {
                    name: format!("{label}/commit_loads/{pattern}"),
                    ns: commit,
                });
            }
        }
    }

    // prepare_store + complete_store without eviction: a second tier filled
    // to n - room, then new keys stored, `room / REPS` per repetition.
    let room = ops.min(n / 2);
    let room_rep = room / REPS / BATCH as u64 * BATCH as u64;
    {
        let mut spare = PrimaryTier::new(config.clone()).unwrap();
        spare.request_begin(req).unwrap();
        fill(&mut spare, 0, n - room, &mut plan);
        let base = 1u64 << 40;
        let ns = best(|rep| {
            let from = rep * room_rep;
            let mut paused = 0.0;
            let t0 = Instant::now();
            let mut i = from;
            while i < from + room_rep {
                keys.clear();
                keys.extend((i..i + BATCH as u64).map(|j| key(base + j)));
                spare.prepare_store(req, &keys, &mut plan).unwrap();
                assert!(plan.evicted.is_empty() && plan.to_store.len() == BATCH);
                spare.complete_store(req, &plan.to_store, true);
                i += BATCH as u64;
                if (i - from) % REQUEST_KEYS as u64 == 0 {
                    let pause = Instant::now();
                    spare.request_finished(req).unwrap();
                    spare.request_begin(req).unwrap();
                    paused += pause.elapsed().as_nanos() as f64;
                }
            }
            let ns = t0.elapsed().as_nanos() as f64 - paused;
            spare.request_finished(req).unwrap();
            spare.request_begin(req).unwrap();
            (room_rep, ns)
        });
        out.push(Fig {
            name: format!("{label}/store/no_eviction"),
            ns,
        });
    }

    // prepare_store + complete_store with eviction: the tier is full of
    // idle keys; every batch of 16 new keys evicts 16.
    let base = 1u64 << 41;
    let ns = best(|rep| {
        let from = rep * per_rep;
        let mut paused = 0.0;
        let t0 = Instant::now();
        let mut evicted = 0;
        let mut i = from;
        while i < from + per_rep {
            keys.clear();
            keys.extend((i..i + BATCH as u64).map(|j| key(base + j)));
            t.prepare_store(req, &keys, &mut plan).unwrap();
            evicted += plan.evicted.len();
            t.complete_store(req, &plan.to_store, true);
            i += BATCH as u64;
            if (i - from) % REQUEST_KEYS as u64 == 0 {
                let pause = Instant::now();
                t.request_finished(req).unwrap();
                t.request_begin(req).unwrap();
                paused += pause.elapsed().as_nanos() as f64;
            }
        }
        let ns = t0.elapsed().as_nanos() as f64 - paused;
        assert_eq!(evicted as u64, per_rep, "every stored key evicted one");
        t.request_finished(req).unwrap();
        t.request_begin(req).unwrap();
        (per_rep, ns)
    });
    out.push(Fig {
        name: format!("{label}/store/eviction"),
        ns,
    });
    meta.push((label.clone(), t.metadata_bytes_per_slot()));
    eprintln!("  {label}: filled in {fill_s:.2} s");
}

/// `len` copies of `value` in a buffer that asked for huge pages first,
/// as the tier's large arrays do.
fn advised_vec<T: Clone>(len: usize, value: T) -> Vec<T> {
    let mut v: Vec<T> = Vec::with_capacity(len);
    let bytes = len * std::mem::size_of::<T>();
    let (start, huge) = (v.as_ptr() as usize, 2usize << 20);
    let first = start.next_multiple_of(huge);
    let end = (start + bytes) / huge * huge;
    if end > first {
        // SAFETY: the range lies inside `v`'s allocation; advice only.
        unsafe {
            libc::madvise(first as *mut libc::c_void, end - first, libc::MADV_HUGEPAGE);
        }
    }
    v.resize(len, value);
    v
}

/// The machine's own cost of the memory reads a uniform lookup needs, with
/// no tier logic: per key one random 8-byte entry of an index-sized array
/// (2 entries per slot) and then the 72-byte record it names in a
/// keys-sized array, in windows of 16 keys (all index reads requested
/// first, then all record reads), as the tier's batched lookup does; ns per
/// key.  Arrays ask for huge pages, as the tier's do.
fn memory_floor(n: u64) -> f64 {
    let mut rng = Rng(7);
    let mut index = advised_vec(2 * n as usize, 0u64);
    for e in index.iter_mut() {
        *e = rng.next() % n;
    }
    let records = advised_vec(n as usize, [1u8; 72]);
    let probes: Vec<u64> = (0..1 << 20).map(|_| rng.next() % (2 * n)).collect();
    best(|_| {
        let t0 = Instant::now();
        let mut sum = 0u64;
        let mut at = [0u64; BATCH];
        for window in probes.chunks_exact(BATCH) {
            for &p in window {
                prefetch(&index[p as usize]);
            }
            for (a, &p) in at.iter_mut().zip(window) {
                *a = index[p as usize];
                prefetch(&records[*a as usize]);
            }
            for &a in &at {
                sum += records[a as usize][5] as u64;
            }
        }
        let ns = t0.elapsed().as_nanos() as f64;
        assert_eq!(sum, probes.len() as u64);
        (probes.len() as u64, ns)
    })
}

/// The machine's latency for one read that depends on the one before
/// (what a call's first key waits for, twice: its index line, then its
/// record): a chase through `n` 72-byte records in one random cycle,
/// in an array the size of the tier's records; ns per read.
fn memory_latency(n: u64) -> f64 {
    let n = n as usize;
    let mut next = advised_vec(n, [0u64; 9]);
    // Sattolo's shuffle: one cycle through every record.
    let mut order: Vec<u32> = (0..n as u32).collect();
    let mut rng = Rng(11);
    for i in (1..n).rev() {
        order.swap(i, (rng.next() % i as u64) as usize);
    }
    for i in 0..n {
        next[order[i] as usize][0] = order[(i + 1) % n] as u64;
    }
    drop(order);
    let reads = 1u64 << 20;
    best(|_| {
        let t0 = Instant::now();
        let mut at = 0usize;
        for _ in 0..reads {
            at = next[at][0] as usize;
        }
        let ns = t0.elapsed().as_nanos() as f64;
        black_box(at);
        (reads, ns)
    })
}

#[inline(always)]
fn prefetch<T>(p: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint and never faults.
    unsafe {
        core::arch::x86_64::_mm_prefetch(
            p as *const T as *const i8,
            core::arch::x86_64::_MM_HINT_T0,
        );
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// The C API as an engine calls it, on a tier made and filled through it,
/// keys passed as (pointer, length) pairs over the engine's own key bytes
/// (12 each, packed): `kvtier_primary_lookup` and prepare_load +
/// complete_load in calls of 16 and of 128, uniform and hot as in [`run`],
/// and prepare_store + complete_store with eviction in calls of 16; ns
/// per key.  Request commits are left out of the timing, as in [`run`].
fn run_c_api(policy: PolicyKind, n: u64, ops: u64, out: &mut Vec<Fig>) {
    use kvtier::dialect::{KVTIER_LOOKUP_HIT, kvtier_key_buf, kvtier_lookup_answer};
    use kvtier::dialect::{kvtier_request_handle, kvtier_store_plan};
    use kvtier::key::kvtier_key;
    use kvtier::primary::*;
    use std::cell::Cell;
    use std::ffi::CString;

    let label = format!("{}/{}", policy.name(), n);
    let name = CString::new(policy.name()).unwrap();
    let req = CString::new("bench").unwrap();
    let mut opts = kvtier_primary_options_default();
    opts.capacity = n as u32;
    opts.policy = name.as_ptr();
    let mut p = std::ptr::null_mut();
    // SAFETY (every call below): `p` is the live handle made here, freed at
    // the end; every pointer passed names a live buffer of the length given.
    let ok = |status: kvtier::kvtier_status| assert!(status == kvtier::kvtier_status::Ok);
    ok(unsafe { kvtier_primary_new(&opts, &mut p) });
    let begin = || -> kvtier_request_handle {
        let mut r = 0;
        ok(unsafe { kvtier_primary_request_begin(p, req.as_ptr(), &mut r) });
        r
    };
    // The bench's one request at a time: its handle changes at each finish.
    let current = Cell::new(begin());
    let bytes_of = |i: u64| -> [u8; 12] { key(i).as_bytes().try_into().unwrap() };
    let pairs = |keys: &[[u8; 12]]| -> Vec<kvtier_key> {
        keys.iter()
            .map(|k| kvtier_key {
                data: k.as_ptr(),
                len: k.len(),
            })
            .collect()
    };
    let finish = || {
        ok(unsafe { kvtier_primary_request_finished(p, current.get()) });
        current.set(begin());
    };
    // Stores keys `from..to` in calls of BATCH; the number evicted.
    let store = |from: u64, to: u64| -> usize {
        let (mut store_indices, mut slots) = ([0usize; BATCH], [0u32; BATCH]);
        let mut evicted = [kvtier_key_buf {
            len: 0,
            bytes: [0; 64],
        }; BATCH];
        let mut plan = kvtier_store_plan {
            store_indices: store_indices.as_mut_ptr(),
            slots: slots.as_mut_ptr(),
            evicted: evicted.as_mut_ptr(),
            store_count: 0,
            evicted_count: 0,
            refused: false,
        };
        let mut count = 0;
        let mut bytes = [[0u8; 12]; BATCH];
        let mut c = [kvtier_key {
            data: std::ptr::null(),
            len: 0,
        }; BATCH];
        for start in (from..to).step_by(BATCH) {
            let m = (to - start).min(BATCH as u64) as usize;
            for j in 0..m {
                bytes[j] = bytes_of(start + j as u64);
                c[j] = kvtier_key {
                    data: bytes[j].as_ptr(),
                    len: 12,
                };
            }
            ok(unsafe { kvtier_primary_prepare_store(p, current.get(), c.as_ptr(), m, &mut plan) });
            count += plan.evicted_count;
            ok(unsafe {
                kvtier_primary_complete_store(
                    p,
                    current.get(),
                    c.as_ptr(),
                    m,
                    true,
                    std::ptr::null_mut(),
                )
            });
        }
        count
    };
    store(0, n);
    finish();
    let hot_base = (n - HOT.min(n)) / 2;
    let per_rep = ops / REPS / REQUEST_KEYS as u64 * REQUEST_KEYS as u64;
    for hot in [false, true] {
        let pattern = if hot { "hot" } else { "uniform" };
        let mut rng = Rng(1);
        let keys: Vec<[u8; 12]> = (0..per_rep)
            .map(|_| bytes_of(pick(&mut rng, n, hot, hot_base)))
            .collect();
        let probe = pairs(&keys);
        for (call, suffix) in [(BATCH, ""), (REQUEST_CALL, "_request")] {
            let mut answer = kvtier_lookup_answer {
                hits: 0,
                stop: 0,
                reason: 0,
                pending: 0,
                end: 0,
            };
            let ns = best(|_| {
                let t0 = Instant::now();
                let mut hits = 0u64;
                for chunk in probe.chunks_exact(call) {
                    ok(unsafe {
                        kvtier_primary_lookup(p, black_box(chunk.as_ptr()), call, &mut answer)
                    });
                    assert_eq!(answer.stop, KVTIER_LOOKUP_HIT);
                    hits += answer.hits as u64;
                }
                let ns = t0.elapsed().as_nanos() as f64;
                assert_eq!(hits, per_rep);
                (per_rep, ns)
            });
            out.push(Fig {
                name: format!("{label}/lookup{suffix}_c/{pattern}"),
                ns,
            });

            let mut slots = vec![0u32; call];
            let ns = best(|_| {
                let mut ns = 0.0;
                for request in probe.chunks(REQUEST_KEYS) {
                    let t0 = Instant::now();
                    for chunk in request.chunks_exact(call) {
                        let keys = black_box(chunk.as_ptr());
                        ok(unsafe {
                            kvtier_primary_prepare_load(
                                p,
                                current.get(),
                                keys,
                                call,
                                slots.as_mut_ptr(),
                            )
                        });
                        ok(unsafe { kvtier_primary_complete_load(p, current.get(), keys, call) });
                    }
                    ns += t0.elapsed().as_nanos() as f64;
                    finish();
                }
                (per_rep, ns)
            });
            out.push(Fig {
                name: format!("{label}/load{suffix}_c/{pattern}"),
                ns,
            });
        }
    }

    // Stores with eviction: the tier is full of idle keys; every call of
    // 16 new keys evicts 16.
    let base = 1u64 << 41;
    let ns = best(|rep| {
        let from = base + rep * per_rep;
        let mut ns = 0.0;
        let mut evicted = 0;
        for request in (from..from + per_rep).step_by(REQUEST_KEYS) {
            let t0 = Instant::now();
            evicted += store(request, request + REQUEST_KEYS as u64);
            ns += t0.elapsed().as_nanos() as f64;
            finish();
        }
        assert_eq!(evicted as u64, per_rep, "every stored key evicted one");
        (per_rep, ns)
    });
    out.push(Fig {
        name: format!("{label}/store/eviction_c"),
        ns,
    });
    unsafe { kvtier_primary_free(p) };
}

/// ARC metadata with both ghost lists full and heavy churn: half of each
/// batch is touched right after its store completes (so T2 and B2 fill as
/// well as T1 and B1), over `rounds` passes of `n` new keys.
fn arc_churned_metadata(n: u64, rounds: u64) -> (f64, u32, u32) {
    let mut t = PrimaryTier::new(PrimaryConfig {
        capacity: n as u32,
        policy: PolicyKind::Arc,
        ..Default::default()
    })
    .unwrap();
    let req = RequestId(0);
    t.request_begin(req).unwrap();
    let mut plan = StorePlan::default();
    let mut keys = Vec::with_capacity(BATCH);
    for i in (0..n * rounds).step_by(BATCH) {
        keys.clear();
        keys.extend((i..i + BATCH as u64).map(key));
        t.prepare_store(req, &keys, &mut plan).unwrap();
        t.complete_store(req, &plan.to_store, true);
        t.touch(req, &keys[..BATCH / 2]).unwrap();
        if i % (64 * BATCH as u64) == 0 {
            t.request_finished(req).unwrap();
            t.request_begin(req).unwrap();
        }
    }
    let s = t.stats();
    (t.metadata_bytes_per_slot(), s.arc_b1, s.arc_b2)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let out_path = args
        .iter()
        .position(|a| a == "--out")
        .and_then(|i| args.get(i + 1).cloned());
    let quick = args.iter().any(|a| a == "--quick");
    // `--sizes 10000,1000000`: only these sizes (for profiling one of them).
    let chosen: Option<Vec<u64>> = args
        .iter()
        .position(|a| a == "--sizes")
        .and_then(|i| args.get(i + 1))
        .map(|list| list.split(',').filter_map(|n| n.parse().ok()).collect());
    let sizes: &[u64] = match &chosen {
        Some(list) if !list.is_empty() => list,
        _ if quick => &[10_000, 1_000_000],
        _ => &[10_000, 1_000_000, 10_000_000],
    };
    // `--policies lru`: only these policies.
    let policies: Vec<PolicyKind> = args
        .iter()
        .position(|a| a == "--policies")
        .and_then(|i| args.get(i + 1))
        .map(|list| list.split(',').filter_map(|p| p.parse().ok()).collect())
        .unwrap_or_else(|| vec![PolicyKind::Lru, PolicyKind::Arc]);
    let ops = 1_000_000u64;
    let mut figs = Vec::new();
    let mut meta = Vec::new();
    for &n in sizes {
        figs.push(Fig {
            name: format!("machine/{n}/memory_floor/uniform"),
            ns: memory_floor(n),
        });
        figs.push(Fig {
            name: format!("machine/{n}/memory_latency/uniform"),
            ns: memory_latency(n),
        });
        for &policy in &policies {
            run(policy, n, ops, &mut figs, &mut meta);
            run_c_api(policy, n, ops, &mut figs);
        }
    }

    for &n in &sizes[..sizes.len().min(2)] {
        let (bytes, b1, b2) = arc_churned_metadata(n, 8);
        eprintln!("  arc/{n} churned: B1 {b1}, B2 {b2}");
        meta.push((format!("arc/{n}/ghosts_full_churned"), bytes));
    }

    println!("{:<34} {:>10}", "benchmark (policy/slots/op/pattern)", "ns");
    for f in &figs {
        println!("{:<34} {:>10.1}", f.name, f.ns);
    }
    let small = sizes[0];
    let large = *sizes.last().unwrap();
    let mut ratios = Vec::new();
    for f in &figs {
        let prefix = format!("/{large}/");
        if let Some((pol, rest)) = f.name.split_once(&prefix) {
            let base = format!("{pol}/{small}/{rest}");
            if let Some(b) = figs.iter().find(|g| g.name == base) {
                ratios.push((format!("{pol}/{rest}"), f.ns / b.ns));
            }
        }
    }
    if large != small {
        println!("\nratio {large}/{small} slots");
        for (name, r) in &ratios {
            println!("{:<34} {:>10.2}", name, r);
        }
    }
    println!("\nmetadata bytes per block (key bytes excluded)");
    for (name, b) in &meta {
        println!("{:<34} {:>10.1}", name, b);
    }

    if let Some(path) = out_path {
        let mut j = String::from("{\"benchmark\":\"primary\",\"batch\":16,\"reps\":5,\"ops\":");
        write!(j, "{ops},\"ns\":{{").unwrap();
        for (i, f) in figs.iter().enumerate() {
            write!(
                j,
                "{}\"{}\":{:.2}",
                if i > 0 { "," } else { "" },
                f.name,
                f.ns
            )
            .unwrap();
        }
        write!(j, "}},\"ratio_{large}_over_{small}\":{{").unwrap();
        for (i, (n, r)) in ratios.iter().enumerate() {
            write!(j, "{}\"{}\":{:.3}", if i > 0 { "," } else { "" }, n, r).unwrap();
        }
        j.push_str("},\"metadata_bytes_per_block\":{");
        for (i, (n, b)) in meta.iter().enumerate() {
            write!(j, "{}\"{}\":{:.2}", if i > 0 { "," } else { "" }, n, b).unwrap();
        }
        j.push_str("}}\n");
        std::fs::write(&path, j).expect("write --out file");
    }
}
