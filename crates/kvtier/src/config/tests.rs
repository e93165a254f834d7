use super::*;

fn err(json: &str) -> String {
    match Config::from_json(json) {
        Ok(c) => match c.build() {
            Ok(_) => panic!("accepted: {json}"),
            Err(e) => e.to_string(),
        },
        Err(e) => e.to_string(),
    }
}

#[test]
fn empty_document_takes_every_default() {
    let c = Config::from_json("{}").unwrap();
    assert_eq!(c, Config::default());
    assert_eq!(c.block_bytes, 0);
    assert_eq!(c.primary.capacity, 1024);
    assert_eq!(c.error_log_capacity, 64);
    assert_eq!(c.primary.policy, crate::primary::PolicyKind::Lru);
    assert!(c.tiers.is_empty() && c.region.is_none());
    let m = c.build().unwrap();
    assert_eq!(m.tier_count(), 0);
    assert!(m.slot_memory().is_none());
}

#[test]
fn progress_is_on_by_default_and_each_key_can_be_set() {
    let on = Config::from_json("{}").unwrap().manager_options().progress;
    assert_eq!(
        (on.hold, on.wait_steps, on.wait_ms),
        (true, 16, 0),
        "holds and a 16-step bound"
    );
    let off = Config::from_json(r#"{"progress": {"hold": false, "wait_steps": 0}}"#).unwrap();
    assert_eq!(
        off.manager_options().progress,
        crate::tiering::ProgressOptions::vllm()
    );
    let ms = Config::from_json(r#"{"progress": {"wait_ms": 250}}"#).unwrap();
    assert_eq!(
        (
            ms.progress.hold,
            ms.progress.wait_steps,
            ms.progress.wait_ms
        ),
        (true, 16, 250)
    );
    assert!(err(r#"{"progress": {"hold": true, "steps": 3}}"#).contains("steps"));
    assert!(err(r#"{"progress": {"wait_steps": -1}}"#).contains("wait_steps"));
}

#[test]
fn kv_groups_reach_the_primary_tier() {
    let c = Config::from_json(r#"{"primary": {"capacity": 4, "kv_groups": true}}"#).unwrap();
    assert!(c.primary.kv_groups);
    let m = c.build().unwrap();
    let r = m.request_begin("r", Default::default()).unwrap().id;
    let short = crate::Key::new(b"tiny").unwrap();
    let mut plan = crate::primary::StorePlan::default();
    let e = m.prepare_store(r, &[short], &mut plan).unwrap_err();
    assert!(matches!(e, Error::InvalidKey { index: 0, .. }), "{e}");
    assert!(m.set_positions(r, &[short], &[16]).is_err());
    // Off by default: the same key is an ordinary key.
    let m = Config::from_json("{}").unwrap().build().unwrap();
    let r = m.request_begin("r", Default::default()).unwrap().id;
    m.prepare_store(r, &[short], &mut plan).unwrap();
    m.set_positions(r, &[short], &[16]).unwrap();
}

#[test]
fn errors_name_the_field_path() {
    let e = err(
        r#"{"block_bytes": 4096, "tiers": [{"type": "fs", "options": {"directory": "/tmp/x"}},
            {"type": "fs", "options": {"directory": "/tmp/y", "capacity_bytes": "big"}}]}"#,
    );
    assert!(
        e.contains("tiers[1].options.capacity_bytes: invalid type"),
        "{e}"
    );
    let e = err(r#"{"primary": {"capcity": 3}}"#);
    assert!(
        e.contains("primary") && e.contains("unknown field `capcity`"),
        "{e}"
    );
    let e = err(r#"{"tiers": [{"type": "tape"}]}"#);
    assert!(
        e.contains("tiers[0].type") && e.contains("unknown variant `tape`"),
        "{e}"
    );
    let e = err(r#"{"primary": {"policy": "mru"}}"#);
    assert!(e.contains("primary.policy"), "{e}");
    let e = err(r#"{"primary": {"capacity": 4, "capacity_bytes": 4096}}"#);
    assert!(e.contains("not both"), "{e}");
    let e = err(r#"{"tiers": [{"type": "fs", "options": {"directory": "/tmp/kvtier-x"}}]}"#);
    assert!(
        e.contains("tiers[0]") && e.contains("slot memory") && e.contains("block_bytes"),
        "{e}"
    );
    let e = err(r#"{"tiers": [{"type": "fs", "options": {}}]}"#);
    assert!(e.contains("tiers[0].options.directory: missing"), "{e}");
    let e = err(r#"{"block_bytes": 4096, "region": {"directory": "/tmp"}}"#);
    assert!(e.contains("region.name: missing"), "{e}");
    let e = err(r#"{"region": {"name": "x", "join_timeout": 5}}"#);
    assert!(
        e.contains("region") && e.contains("unknown field `join_timeout`"),
        "{e}"
    );
    let e =
        err(r#"{"block_bytes": 64, "tiers": [{"type": "redis", "options": {"nodes": "a:1"}}]}"#);
    assert!(e.contains("tiers[0].options.nodes: invalid type"), "{e}");
    let e = err(r#"{} x"#);
    assert!(e.contains("trailing"), "{e}");
}

#[test]
fn builds_anonymous_slots_and_an_fs_tier() {
    let dir = std::env::temp_dir().join(format!("kvtier-config-{}", std::process::id()));
    let json = format!(
        r#"{{"block_bytes": 4096, "primary": {{"capacity_bytes": 65536, "policy": "arc"}},
            "promotion_answer": "hit_pending",
            "tiers": [{{"type": "fs", "backpressure": {{"policy": "throttle"}},
                       "options": {{"directory": {:?}, "read_threads": 1, "write_threads": 1}}}}]}}"#,
        dir.display().to_string()
    );
    let c = Config::from_json(&json).unwrap();
    assert_eq!(c.primary.capacity, 16);
    assert_eq!(
        c.tiers[0].tier_options().backpressure,
        Some(crate::tiering::BackpressureConfig {
            policy: crate::tiering::PressurePolicy::Throttle,
            ..Default::default()
        })
    );
    let m = c.build().unwrap();
    assert_eq!(m.tier_count(), 1);
    let slots = m.slot_memory().unwrap();
    assert_eq!((slots.slot_count(), slots.slot_bytes()), (16, 4096));
    assert_eq!(&*m.tier_name(1).unwrap(), "fs");
    m.shutdown().unwrap();
    drop(m);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn builds_over_the_callers_slots_and_refuses_a_second_region() {
    let dir = std::env::temp_dir().join(format!("kvtier-config-over-{}", std::process::id()));
    let json = format!(
        r#"{{"primary": {{"capacity": 8}},
            "tiers": [{{"type": "fs", "options": {{"directory": {:?}, "read_threads": 1, "write_threads": 1}}}}]}}"#,
        dir.display().to_string()
    );
    let c = Config::from_json(&json).unwrap();
    // Without slot memory the fs tier is refused; over the caller's it is built.
    assert!(c.build().is_err());
    let m = c
        .build_over(SlotMemory::anonymous(16, 4096).unwrap())
        .unwrap();
    assert_eq!(m.tier_count(), 1);
    assert_eq!(m.slot_memory().unwrap().slot_count(), 16);
    m.shutdown().unwrap();
    drop(m);
    let _ = std::fs::remove_dir_all(&dir);
    // Fewer slots than the capacity: refused, naming the configuration.
    let small = Config::from_json(r#"{"primary": {"capacity": 8}}"#).unwrap();
    let e = small
        .build_over(SlotMemory::anonymous(4, 4096).unwrap())
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("configuration"), "{e}");
    let named = Config::from_json(r#"{"block_bytes": 4096, "region": {"name": "x"}}"#).unwrap();
    let e = named
        .build_over(SlotMemory::anonymous(4, 4096).unwrap())
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("configuration: region: the document names a region"),
        "{e}"
    );
}
