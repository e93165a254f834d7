use super::*;

fn round_trip(e: Error) -> Error {
    let mut buf = Vec::new();
    put_error(&mut Writer::new(&mut buf), &e);
    let mut r = Reader::new(&buf);
    let back = get_error(&mut r).unwrap();
    assert_eq!(r.finish(), Ok(()));
    back
}

#[test]
fn every_error_comes_back_as_the_same_variant_and_text() {
    let report = CompleteStoreReport {
        ready: 1,
        dropped: 2,
        ignored: 3,
        foreign: 4,
        already_ready: 5,
    };
    let all = vec![
        Error::InvalidArgument("a".into()),
        Error::InvalidKey {
            index: 3,
            reason: "empty".into(),
        },
        Error::KeyState {
            index: 4,
            key: "ab".into(),
            reason: "absent".into(),
        },
        Error::UnknownRequest("r".into()),
        Error::DuplicateRequest("d".into()),
        Error::UnknownJob {
            job: 9,
            tier: "fs".into(),
        },
        Error::Io {
            context: "opening x".into(),
            source: io::Error::from_raw_os_error(libc::ENOSPC),
        },
        Error::Io {
            context: "y".into(),
            source: io::Error::other("no errno"),
        },
        Error::NotFound("n".into()),
        Error::AlreadyExists("e".into()),
        Error::Timeout("t".into()),
        Error::NoSpace("s".into()),
        Error::PeerFailed("p".into()),
        Error::Tier {
            tier: "redis".into(),
            message: "m".into(),
        },
        Error::Reentrant("re".into()),
        Error::Closed("c".into()),
        Error::Unsupported("u".into()),
        Error::OutOfMemory("o".into()),
        Error::KeysIgnored {
            report,
            message: "k".into(),
        },
        Error::BufferTooSmall {
            needed: 10,
            given: 2,
        },
        Error::Disconnected("gone".into()),
    ];
    for e in all {
        let text = e.to_string();
        let disc = std::mem::discriminant(&e);
        let back = round_trip(e);
        assert_eq!(std::mem::discriminant(&back), disc, "{text}");
        assert_eq!(back.to_string(), text);
        if let Error::KeysIgnored { report: r, .. } = back {
            assert_eq!(r, report);
        }
    }
    let back = round_trip(Error::Io {
        context: "z".into(),
        source: io::Error::from_raw_os_error(libc::EACCES),
    });
    let Error::Io { source, .. } = back else {
        panic!("not Io")
    };
    assert_eq!(source.raw_os_error(), Some(libc::EACCES));
}

#[test]
fn answers_states_policies_and_params_read_back_as_written() {
    let answers = [
        LookupAnswer {
            hits: 3,
            pending: 1,
            end: 4,
            stop: LookupResult::Retry,
            reason: None,
        },
        LookupAnswer {
            hits: 0,
            pending: 0,
            end: 0,
            stop: LookupResult::Miss,
            reason: Some(MissReason::TimedOut),
        },
        LookupAnswer {
            hits: 2,
            pending: 1,
            end: 3,
            stop: LookupResult::HitPending,
            reason: None,
        },
        LookupAnswer {
            hits: 5,
            pending: 0,
            end: 5,
            stop: LookupResult::Hit,
            reason: None,
        },
        LookupAnswer {
            hits: 1,
            pending: 0,
            end: 1,
            stop: LookupResult::Miss,
            reason: Some(MissReason::NoRoom),
        },
        LookupAnswer {
            hits: 1,
            pending: 0,
            end: 1,
            stop: LookupResult::Miss,
            reason: Some(MissReason::Absent),
        },
    ];
    for a in answers {
        let mut buf = Vec::new();
        put_answer(&mut Writer::new(&mut buf), &a);
        assert_eq!(get_answer(&mut Reader::new(&buf)).unwrap(), a);
    }
    for s in [
        RequestState::NeverIssued,
        RequestState::Active,
        RequestState::Finishing,
        RequestState::LoadsPinned,
        RequestState::Gone,
    ] {
        let mut buf = Vec::new();
        put_state(&mut Writer::new(&mut buf), s);
        assert_eq!(get_state(&mut Reader::new(&buf)).unwrap(), s);
    }
    for pol in [OffloadPolicy::BlockLevel, OffloadPolicy::RequestLevel] {
        let mut buf = Vec::new();
        put_policy(&mut Writer::new(&mut buf), pol);
        assert_eq!(get_policy(&mut Reader::new(&buf)).unwrap(), pol);
    }
    let params = RequestParams {
        params: vec![("ttl".into(), "5".into()), ("".into(), "ü".into())],
        user_data: 0,
        filter: TierFilter::Only(vec![
            TierMatcher {
                medium: Some(Medium::Storage),
                locality: None,
            },
            TierMatcher {
                medium: None,
                locality: Some(Locality::Remote),
            },
            TierMatcher {
                medium: Some(Medium::Cpu),
                locality: Some(Locality::Local),
            },
        ]),
    };
    let mut buf = Vec::new();
    put_params(&mut Writer::new(&mut buf), &params);
    let back = get_params(&mut Reader::new(&buf)).unwrap();
    assert_eq!(back.params, params.params);
    assert_eq!(back.filter, params.filter);
    let mut buf = Vec::new();
    put_params(&mut Writer::new(&mut buf), &RequestParams::default());
    assert_eq!(
        get_params(&mut Reader::new(&buf)).unwrap().filter,
        TierFilter::All
    );
}

#[test]
fn out_of_range_codes_are_malformed() {
    assert!(get_answer(&mut Reader::new(&[0; 26])).is_ok());
    let mut bad = [0u8; 26];
    bad[24] = 4;
    assert!(get_answer(&mut Reader::new(&bad)).is_err());
    bad[24] = 0;
    bad[25] = 4;
    assert!(get_answer(&mut Reader::new(&bad)).is_err());
    assert!(get_state(&mut Reader::new(&[5])).is_err());
    assert!(get_policy(&mut Reader::new(&[2])).is_err());
    assert!(get_error(&mut Reader::new(&[0])).is_err());
    assert!(get_error(&mut Reader::new(&[21])).is_err());
    assert!(get_params(&mut Reader::new(&[0, 0, 0, 0, 2])).is_err());
    assert!(get_params(&mut Reader::new(&[0, 0, 0, 0, 1, 1, 0, 0, 0, 3, 0])).is_err());
    assert!(get_params(&mut Reader::new(&[0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 3])).is_err());
    assert_eq!(Op::from_u8(0), None);
    assert_eq!(Op::from_u8(22), None);
    for b in 1..=21 {
        assert_eq!(Op::from_u8(b).map(|o| o as u8), Some(b));
    }
}

#[test]
fn a_hello_of_another_version_is_told_apart_before_its_fields() {
    let hello = Hello {
        version: VERSION,
        block_bytes: 4096,
        slot_stride: 8192,
        fingerprint: "llama-3-8b/bf16/tp1".into(),
        role: Role::Engine,
        name: "engine-0".into(),
    };
    let mut buf = Vec::new();
    hello.put(&mut Writer::new(&mut buf));
    let mut r = Reader::new(&buf[1..]);
    assert_eq!(Hello::get(&mut r).unwrap().unwrap(), hello);
    let mut other = buf.clone();
    other[9..13].copy_from_slice(&7u32.to_le_bytes());
    other.truncate(13);
    assert_eq!(Hello::get(&mut Reader::new(&other[1..])).unwrap(), Err(7));
    let mut wrong = buf.clone();
    wrong[1] = b'X';
    assert!(Hello::get(&mut Reader::new(&wrong[1..])).is_err());
    let observer = Hello {
        role: Role::Observer,
        ..hello
    };
    let mut buf = Vec::new();
    observer.put(&mut Writer::new(&mut buf));
    assert_eq!(
        Hello::get(&mut Reader::new(&buf[1..]))
            .unwrap()
            .unwrap()
            .role,
        Role::Observer
    );
    buf[1 + 8 + 4 + 8 + 8 + 4 + hello_fp_len()] = 2;
    assert!(Hello::get(&mut Reader::new(&buf[1..])).is_err());
}

fn hello_fp_len() -> usize {
    "llama-3-8b/bf16/tp1".len()
}
