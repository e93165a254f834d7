//! The restart benchmark's figures (`benches/fs_restart/report.rs`):
//! medians, the extrapolation to 10^8 blocks, the printed tables and the
//! JSON fields.  The benchmark has its own main, so the tests live
//! here.

#[path = "../benches/fs_restart/report.rs"]
#[allow(dead_code)]
mod report;

use report::*;
use serde_json::json;

/// A case whose opens returned after 5 ms and whose index was complete
/// after `rebuilt` seconds.
fn case(layout: &str, block_bytes: u64, blocks: u64, rebuilt: &[f64]) -> Case {
    Case {
        layout: layout.into(),
        block_bytes,
        blocks,
        bytes_on_disk: blocks * (block_bytes + 4096),
        fill_s: 1.0,
        clean_open_s: vec![0.005; rebuilt.len()],
        clean_rebuilt_s: rebuilt.to_vec(),
        crash_open_s: vec![0.004, 0.006, 0.020][..rebuilt.len().min(3)].to_vec(),
        crash_rebuilt_s: rebuilt.to_vec(),
        seq_read_s: vec![2.0, 4.0],
        seq_read_bytes: 8_000_000,
        header_read_s: vec![0.5],
        header_threads: 8,
        index_bytes_per_block: Some(250.0),
        index_peak_bytes_per_block: Some(400.0),
        empty_tier_bytes: Some(300_000.0),
        cached_pages: 0,
        sampled_pages: 64,
    }
}

#[test]
fn median_of_odd_even_and_empty_samples() {
    assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
    assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
    assert_eq!(median(&[]), 0.0);
}

#[test]
fn extrapolation_grows_linearly_from_the_measured_size() {
    assert_eq!(extrapolate(7.2, 100_000, TARGET_BLOCKS), 7200.0);
    assert_eq!(extrapolate(0.5, 10_000, 10_000), 0.5);
}

#[test]
fn labels_for_durations_sizes_and_counts() {
    assert_eq!(human_seconds(0.0004), "0.4 ms");
    assert_eq!(human_seconds(0.0123), "12 ms");
    assert_eq!(human_seconds(0.744), "0.74 s");
    assert_eq!(human_seconds(7.24), "7.2 s");
    assert_eq!(human_seconds(63.5), "64 s");
    assert_eq!(human_seconds(600.0), "10.0 min");
    assert_eq!(human_seconds(18_000.0), "5.0 h");
    assert_eq!(block_label(4096), "4 KiB");
    assert_eq!(block_label(65536), "64 KiB");
    assert_eq!(block_label(2 << 20), "2 MiB");
    assert_eq!(count_label(10_000), "10^4");
    assert_eq!(count_label(100_000_000), "10^8");
    assert_eq!(count_label(25_000), "25000");
    assert_eq!(count_label(1), "1");
}

#[test]
fn the_largest_count_of_each_kind_is_extrapolated() {
    let cases = [
        case("files", 4096, 10_000, &[1.0]),
        case("files", 4096, 100_000, &[10.0]),
        case("segments", 4096, 10_000, &[0.5]),
        case("files", 65536, 10_000, &[2.0]),
    ];
    let got: Vec<(&str, u64, u64)> = largest_per_kind(&cases)
        .iter()
        .map(|c| (c.layout.as_str(), c.block_bytes, c.blocks))
        .collect();
    assert_eq!(
        got,
        [
            ("files", 4096, 100_000),
            ("segments", 4096, 10_000),
            ("files", 65536, 10_000)
        ]
    );
    let v = result_json("/d", 2, &cases);
    let x = &v["extrapolated"][0];
    assert_eq!(x["blocks"], TARGET_BLOCKS);
    assert_eq!(x["from_blocks"], 100_000);
    assert_eq!(x["clean_rebuilt_s"], 10_000.0);
    assert_eq!(x["index_gb"], 25.0);
    assert_eq!(x["index_peak_gb"], 40.0);
    // The time until open returns is not grown with the blocks.
    assert!(x.get("clean_open_s").is_none() && x.get("crash_open_s").is_none());
    assert!(x["kind"].as_str().unwrap().starts_with("extrapolated"));
    assert_eq!(v["extrapolated"].as_array().unwrap().len(), 3);
}

#[test]
fn json_has_medians_rates_and_samples() {
    let c = case("segments", 4096, 1000, &[3.0, 1.0, 2.0]);
    let v = case_json(&c);
    assert_eq!(v["layout"], "segments");
    assert_eq!(v["blocks"], 1000);
    assert_eq!(v["clean_rebuilt_s"], 2.0);
    assert_eq!(v["clean_open_s"], 0.005);
    assert_eq!(v["crash_open_s"], 0.006);
    assert_eq!(v["crash_rebuilt_s"], 2.0);
    assert_eq!(v["seq_read_s"], 3.0);
    // 8 MB in 3 s; 1000 headers of 4096 bytes in 0.5 s.
    assert!((v["seq_read_mbps"].as_f64().unwrap() - 8.0 / 3.0).abs() < 1e-9);
    assert_eq!(v["header_read_mbps"], 8.192);
    assert_eq!(v["samples"]["clean_rebuilt_s"], json!([3.0, 1.0, 2.0]));
    assert_eq!(v["index_bytes_per_block"], 250.0);
    assert_eq!(v["index_peak_bytes_per_block"], 400.0);
    assert_eq!(v["empty_tier_bytes"], 300_000.0);
    let none = Case {
        index_bytes_per_block: None,
        ..c
    };
    assert!(case_json(&none)["index_bytes_per_block"].is_null());
}

#[test]
fn printed_lines_line_up_with_their_headers() {
    let c = case("files", 65536, 100_000, &[7.2]);
    let line = case_line(&c);
    assert_eq!(line.len(), case_header().len(), "{line}\n{}", case_header());
    assert!(line.contains("64 KiB") && line.contains("10^5") && line.contains("250/400"));
    // Open and indexed apart: 5 ms, then 7.2 s.
    assert!(line.contains("5.0 ms") && line.contains("7.2 s"), "{line}");
    let x = extrapolation_lines(&[c], TARGET_BLOCKS);
    assert_eq!(x.len(), 2);
    assert!(x[0].contains("extrapolated") && x[0].contains("10^8"));
    assert!(x[1].contains("2.0 h"), "{}", x[1]);
    assert_eq!(x[0].len(), x[1].len(), "{}\n{}", x[0], x[1]);
}
