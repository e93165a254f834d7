//! The restart benchmark's figures: what one case measured, its medians,
//! the linear extrapolation to [`TARGET_BLOCKS`], the printed tables and
//! the JSON.  Nothing here touches a file; its tests are
//! `crates/kvtier/tests/fs_restart_report.rs`.

use serde_json::{Value, json};

/// The size the table extrapolates to: 10^8 blocks (6.6 TB of 64 KiB blocks).
pub const TARGET_BLOCKS: u64 = 100_000_000;

/// What one case (layout, block size, block count) measured: a sample per
/// round for each timed figure.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Case {
    pub layout: String,
    pub block_bytes: u64,
    pub blocks: u64,
    /// Bytes of the files the tier left in its directory.
    pub bytes_on_disk: u64,
    /// Storing every block through the tier, once.
    pub fill_s: f64,
    /// After a clean shutdown: until `FsTier::open` returned (the engine
    /// is blocked this long).
    pub clean_open_s: Vec<f64>,
    /// After a clean shutdown: until the index was complete
    /// (`FsTier::wait_rebuilt` returned).
    pub clean_rebuilt_s: Vec<f64>,
    /// After a crash (no shutdown): until `FsTier::open` returned.
    pub crash_open_s: Vec<f64>,
    /// After a crash: until the index was complete.
    pub crash_rebuilt_s: Vec<f64>,
    /// One thread reading every file front to back (like `cat`).
    pub seq_read_s: Vec<f64>,
    /// Bytes that read.
    pub seq_read_bytes: u64,
    /// One 4 KiB header per block, positioned reads from several threads.
    pub header_read_s: Vec<f64>,
    pub header_threads: usize,
    /// Heap the index holds per block once complete: the tier's heap with
    /// its event queue off, less an empty tier's (median of every open;
    /// `None`: not measured).
    pub index_bytes_per_block: Option<f64>,
    /// Most heap per block while opening, counted the same way (the
    /// largest of every open).
    pub index_peak_bytes_per_block: Option<f64>,
    /// The heap of an empty tier of the same layout, subtracted above.
    pub empty_tier_bytes: Option<f64>,
    /// Pages found still cached (mincore) after the cache was dropped, of
    /// those sampled, over every drop.
    pub cached_pages: u64,
    pub sampled_pages: u64,
}

/// The median of `v` (0 for none).
pub fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    match n {
        0 => 0.0,
        _ if n % 2 == 1 => s[n / 2],
        _ => (s[n / 2 - 1] + s[n / 2]) / 2.0,
    }
}

/// `seconds` measured over `from` blocks, grown linearly to `to` blocks.
pub fn extrapolate(seconds: f64, from: u64, to: u64) -> f64 {
    assert!(from > 0, "extrapolating from no blocks");
    seconds * to as f64 / from as f64
}

/// Megabytes (10^6 bytes) per second.
pub fn mb_per_s(bytes: u64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        bytes as f64 / seconds / 1e6
    } else {
        0.0
    }
}

/// A duration for a reader: "0.4 ms", "12 ms", "0.74 s", "7.2 s", "63 s",
/// "4.3 min", "2.1 h".
pub fn human_seconds(s: f64) -> String {
    if s < 0.01 {
        format!("{:.1} ms", s * 1e3)
    } else if s < 0.1 {
        format!("{:.0} ms", s * 1e3)
    } else if s < 1.0 {
        format!("{s:.2} s")
    } else if s < 10.0 {
        format!("{s:.1} s")
    } else if s < 120.0 {
        format!("{s:.0} s")
    } else if s < 7200.0 {
        format!("{:.1} min", s / 60.0)
    } else {
        format!("{:.1} h", s / 3600.0)
    }
}

/// "4 KiB", "64 KiB", "2 MiB".
pub fn block_label(bytes: u64) -> String {
    if bytes >= 1 << 20 && bytes % (1 << 20) == 0 {
        format!("{} MiB", bytes >> 20)
    } else {
        format!("{} KiB", bytes >> 10)
    }
}

/// "10^4" for powers of ten, else the number.
pub fn count_label(n: u64) -> String {
    let mut p = 0;
    let mut m = n;
    while m >= 10 && m % 10 == 0 {
        m /= 10;
        p += 1;
    }
    if m == 1 && p > 0 {
        format!("10^{p}")
    } else {
        n.to_string()
    }
}

/// The cases with the largest block count of each (layout, block size),
/// in first-seen order: what the extrapolation grows from.
pub fn largest_per_kind(cases: &[Case]) -> Vec<&Case> {
    let mut out: Vec<&Case> = Vec::new();
    for c in cases {
        match out
            .iter_mut()
            .find(|o| o.layout == c.layout && o.block_bytes == c.block_bytes)
        {
            Some(o) if o.blocks < c.blocks => *o = c,
            Some(_) => {}
            None => out.push(c),
        }
    }
    out
}

/// One case's JSON entry: medians, MB/s, and the samples.
pub fn case_json(c: &Case) -> Value {
    let header_bytes = c.blocks * 4096;
    let seq = median(&c.seq_read_s);
    let hdr = median(&c.header_read_s);
    json!({
        "layout": c.layout,
        "block_bytes": c.block_bytes,
        "blocks": c.blocks,
        "bytes_on_disk": c.bytes_on_disk,
        "fill_s": c.fill_s,
        "clean_open_s": median(&c.clean_open_s),
        "clean_rebuilt_s": median(&c.clean_rebuilt_s),
        "crash_open_s": median(&c.crash_open_s),
        "crash_rebuilt_s": median(&c.crash_rebuilt_s),
        "seq_read_s": seq,
        "seq_read_mbps": mb_per_s(c.seq_read_bytes, seq),
        "header_read_s": hdr,
        "header_read_mbps": mb_per_s(header_bytes, hdr),
        "header_threads": c.header_threads,
        "index_bytes_per_block": c.index_bytes_per_block,
        "index_peak_bytes_per_block": c.index_peak_bytes_per_block,
        "empty_tier_bytes": c.empty_tier_bytes,
        "cached_pages_after_drop": c.cached_pages,
        "sampled_pages": c.sampled_pages,
        "samples": {
            "clean_open_s": c.clean_open_s,
            "clean_rebuilt_s": c.clean_rebuilt_s,
            "crash_open_s": c.crash_open_s,
            "crash_rebuilt_s": c.crash_rebuilt_s,
            "seq_read_s": c.seq_read_s,
            "header_read_s": c.header_read_s,
        },
    })
}

/// The extrapolation of `c` to `to` blocks: each median time that reads
/// the blocks grown linearly (until the index is complete, the
/// references), the index's memory at its measured bytes per block.  The
/// time until `open` returns is not grown: it is given as measured, with
/// each count's case.
pub fn extrapolated_json(c: &Case, to: u64) -> Value {
    let x = |v: &[f64]| extrapolate(median(v), c.blocks, to);
    json!({
        "kind": format!("extrapolated linearly from {}", count_label(c.blocks)),
        "layout": c.layout,
        "block_bytes": c.block_bytes,
        "blocks": to,
        "from_blocks": c.blocks,
        "bytes_on_disk": extrapolate(c.bytes_on_disk as f64, c.blocks, to),
        "fill_s": extrapolate(c.fill_s, c.blocks, to),
        "clean_rebuilt_s": x(&c.clean_rebuilt_s),
        "crash_rebuilt_s": x(&c.crash_rebuilt_s),
        "seq_read_s": x(&c.seq_read_s),
        "header_read_s": x(&c.header_read_s),
        "index_gb": c.index_bytes_per_block.map(|b| b * to as f64 / 1e9),
        "index_peak_gb": c.index_peak_bytes_per_block.map(|b| b * to as f64 / 1e9),
    })
}

/// The whole result file.
pub fn result_json(dir: &str, rounds: usize, cases: &[Case]) -> Value {
    json!({
        "bench": "fs_restart",
        "dir": dir,
        "rounds": rounds,
        "runs": cases.iter().map(case_json).collect::<Vec<_>>(),
        "extrapolated": largest_per_kind(cases)
            .into_iter()
            .map(|c| extrapolated_json(c, TARGET_BLOCKS))
            .collect::<Vec<_>>(),
    })
}

/// The printed header of [`case_line`]'s table.
pub fn case_header() -> String {
    format!(
        "{:<8} {:>7} {:>7} | {:>8} {:>8} {:>8} {:>8} | {:>17} | {:>17} | {:>9}",
        "layout",
        "block",
        "blocks",
        "open",
        "indexed",
        "crash op",
        "crash ix",
        "seq read (MB/s)",
        "headers (MB/s)",
        "index B/b"
    )
}

/// One case as a line of the printed table (medians).
pub fn case_line(c: &Case) -> String {
    let seq = median(&c.seq_read_s);
    let hdr = median(&c.header_read_s);
    let index = match (c.index_bytes_per_block, c.index_peak_bytes_per_block) {
        (Some(b), Some(p)) => format!("{b:.0}/{p:.0}"),
        (Some(b), None) => format!("{b:.0}"),
        _ => "-".to_string(),
    };
    format!(
        "{:<8} {:>7} {:>7} | {:>8} {:>8} {:>8} {:>8} | {:>8} ({:>6.0}) | {:>8} ({:>6.0}) | {:>9}",
        c.layout,
        block_label(c.block_bytes),
        count_label(c.blocks),
        human_seconds(median(&c.clean_open_s)),
        human_seconds(median(&c.clean_rebuilt_s)),
        human_seconds(median(&c.crash_open_s)),
        human_seconds(median(&c.crash_rebuilt_s)),
        human_seconds(seq),
        mb_per_s(c.seq_read_bytes, seq),
        human_seconds(hdr),
        mb_per_s(c.blocks * 4096, hdr),
        index
    )
}

/// The extrapolation to `to` blocks of the largest case of each kind, as
/// printed lines (labelled as an extrapolation).
pub fn extrapolation_lines(cases: &[Case], to: u64) -> Vec<String> {
    let prefix = format!(
        "extrapolated linearly to {} blocks (not measured):",
        count_label(to)
    );
    let pad = prefix.len();
    let mut out = vec![format!(
        "{prefix} {:<8} {:>7} {:>5} | {:>9} {:>9} {:>9} {:>9} | {:>8}",
        "layout", "block", "from", "indexed", "crash ix", "seq read", "headers", "index GB"
    )];
    for c in largest_per_kind(cases) {
        let x = |v: &[f64]| human_seconds(extrapolate(median(v), c.blocks, to));
        let gb = c
            .index_bytes_per_block
            .map_or("-".to_string(), |b| format!("{:.1}", b * to as f64 / 1e9));
        out.push(format!(
            "{:pad$} {:<8} {:>7} {:>5} | {:>9} {:>9} {:>9} {:>9} | {:>8}",
            "",
            c.layout,
            block_label(c.block_bytes),
            count_label(c.blocks),
            x(&c.clean_rebuilt_s),
            x(&c.crash_rebuilt_s),
            x(&c.seq_read_s),
            x(&c.header_read_s),
            gb
        ));
    }
    out
}
