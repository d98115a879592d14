//! LimitSet contract scenarios 1–52 (the algorithm scenarios 9–24 that concern a single
//! counter are in `dynalimit-core`'s algorithm tests under the same names). Every timing is
//! driven by a ManualClock: no sleeps.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::Duration;

use dynalimit::limitset::{
    Algorithm, CALL_COUNT_KEY, CallLimit, LimitSet, LimitStats, NO_AMOUNTS, RateLimit,
    ResourceLimit, Window,
};
use dynalimit::time::{Clock, ManualClock};
use dynalimit::{Error, Reason, blocking};
use support::*;

// ---------------------------------------------------------------- A. limit definitions

#[test]
fn scenario_01_rate_limit_basic_fields() {
    let limit = RateLimit::builder("tokens")
        .capacity(1000)
        .window(60)
        .algorithm(Algorithm::TokenBucket)
        .build()
        .unwrap();
    assert_eq!(limit.key(), "tokens");
    assert_eq!(limit.window().as_secs_f64(), 60.0);
    assert_eq!(limit.capacity(), 1000.0);
    assert!((limit.rate_per_second() - 16.666_666).abs() < 1e-3);
}

#[test]
fn scenario_02_window_spellings() {
    for (spelling, secs) in [
        ("second", 1.0),
        ("min", 60.0),
        ("mins", 60.0),
        ("per_minute", 60.0),
        ("hr", 3_600.0),
        ("Hourly", 3_600.0),
        ("day", 86_400.0),
        ("wk", 604_800.0),
    ] {
        let limit = RateLimit::new("t", 10, spelling).unwrap();
        assert_eq!(limit.window().as_secs_f64(), secs, "{spelling}");
    }
    let per = RateLimit::builder("t")
        .capacity(10)
        .per("hour")
        .build()
        .unwrap();
    assert_eq!(per.window(), Window::HOUR);
    let both = RateLimit::builder("t")
        .capacity(10)
        .window(60)
        .per("minute")
        .build()
        .unwrap_err()
        .to_string();
    assert!(both.contains("window") && both.contains("per"), "{both}");
    let unknown = RateLimit::new("t", 10, "fortnight")
        .unwrap_err()
        .to_string();
    assert!(unknown.contains("fortnight"), "{unknown}");
    for name in ["second", "minute", "hour", "day", "week"] {
        assert!(unknown.contains(name), "{unknown}");
    }
    assert!(RateLimit::new("t", 10, 0).is_err());
    assert!(RateLimit::new("t", 10, -5).is_err());
    assert!(RateLimit::new("t", 10, f64::NAN).is_err());
}

#[test]
fn scenario_03_capacity_validation_and_unbounded_capacity() {
    for bad in [0.0, -1.0, f64::NAN, f64::NEG_INFINITY] {
        let err = RateLimit::new("t", bad, 1).unwrap_err();
        assert!(matches!(err, Error::InvalidLimit { .. }), "{bad}: {err}");
    }
    assert!(RateLimit::new("t", 0.0001, 1).is_ok());
    let unbounded = rate("t", f64::INFINITY, 1.0, Algorithm::Gcra);
    let set = set_of(&ManualClock::default(), vec![unbounded.into()]);
    for _ in 0..3 {
        let mut acquisition = set.try_acquire([("t", 1e300)]).unwrap();
        acquisition.update([("t", 1e300)]).unwrap();
    }
}

#[test]
fn scenario_04_default_algorithm_is_explicit_sliding_window() {
    assert_eq!(Algorithm::DEFAULT, Algorithm::SlidingWindow);
    assert_eq!(Algorithm::default(), Algorithm::DEFAULT);
    let limit = RateLimit::new("t", 10, 1).unwrap();
    assert_eq!(limit.algorithm(), Algorithm::SlidingWindow);
}

#[test]
fn scenario_05_call_limit_key_is_always_call_count() {
    let limit = CallLimit::new(100, 60).unwrap();
    assert_eq!(limit.rate().key(), CALL_COUNT_KEY);
    let renamed = CallLimit::from_rate(token_bucket("mine", 5.0, 1.0));
    assert_eq!(renamed.rate().key(), "call_count");
    assert_eq!(renamed.rate().algorithm(), Algorithm::TokenBucket);
}

#[test]
fn scenario_06_resource_limit_capacity_at_least_one() {
    let limit = ResourceLimit::new("connections", 10).unwrap();
    assert_eq!((limit.key(), limit.capacity()), ("connections", 10));
    let err = ResourceLimit::new("connections", 0)
        .unwrap_err()
        .to_string();
    assert!(err.contains(">= 1"), "{err}");
}

#[test]
fn scenario_07_limits_are_passive_definitions() {
    // A definition holds no state: two sets built from the same definition count separately,
    // and only a set acquires.
    let definition = resource("slots", 1);
    let timer = ManualClock::default();
    let one = set_of(&timer, vec![definition.clone().into()]);
    let two = set_of(&timer, vec![definition.into()]);
    let _held = one.try_acquire(NO_AMOUNTS).unwrap();
    assert!(refused(&one.try_acquire(NO_AMOUNTS)));
    assert!(two.try_acquire(NO_AMOUNTS).is_ok());
}

#[test]
fn scenario_08_params_signature() {
    let limit = rate("t", 300.0, 60.0, Algorithm::Gcra);
    assert_eq!(limit.params_signature(), "c300w60gcr");
    assert_eq!(
        rate("t", 2.5, 0.5, Algorithm::TokenBucket).params_signature(),
        "c2.5w0.5tok"
    );
}

// ------------------------------------------------- B. algorithm rules seen through a set

#[test]
fn scenario_21_fixed_window_rejects_fractional_amounts() {
    let set = set_of(
        &ManualClock::default(),
        vec![rate("t", 10.0, 1.0, Algorithm::FixedWindow).into()],
    );
    let err = set.try_acquire([("t", 0.5)]).unwrap_err();
    assert!(matches!(err, Error::InvalidAmount { .. }), "{err}");
    assert!(set.try_acquire([("t", 1.0)]).is_ok());
}

#[test]
fn scenario_23_counting_algorithms_reject_fractions_token_algorithms_accept() {
    for algorithm in [
        Algorithm::SlidingWindow,
        Algorithm::FixedWindow,
        Algorithm::LeakyBucket,
        Algorithm::TokenBucket,
        Algorithm::Gcra,
    ] {
        let set = set_of(
            &ManualClock::default(),
            vec![rate("t", 10.0, 1.0, algorithm).into()],
        );
        let outcome = set.try_acquire([("t", 0.5)]);
        if algorithm.accepts_fractions() {
            let mut acquisition = outcome.unwrap();
            acquisition.update([("t", 0.5)]).unwrap();
        } else {
            let err = outcome.unwrap_err().to_string();
            assert!(err.contains("integer"), "{algorithm}: {err}");
            assert!(err.contains("TokenBucket") && err.contains("GCRA"), "{err}");
        }
    }
    // integral floats are fine everywhere
    let set = set_of(
        &ManualClock::default(),
        vec![rate("t", 10.0, 1.0, Algorithm::SlidingWindow).into()],
    );
    let mut acquisition = set.try_acquire([("t", 1.0)]).unwrap();
    acquisition.update([("t", 1)]).unwrap();
}

// ------------------------------------------------------------- C. building the request

#[test]
fn scenario_25_duplicate_keys_are_refused() {
    let err = LimitSet::builder()
        .limit(CallLimit::new(10, 1).unwrap())
        .limit(CallLimit::new(20, 60).unwrap())
        .build()
        .unwrap_err();
    match err {
        Error::DuplicateKey { key } => assert_eq!(key, "call_count"),
        other => panic!("{other}"),
    }
}

#[test]
fn scenario_26_empty_request_takes_call_and_resource_limits_once() {
    let set = set_of(
        &ManualClock::default(),
        vec![
            CallLimit::new(10, 1).unwrap().into(),
            resource("c", 3).into(),
        ],
    );
    let acquisition = set.try_acquire(NO_AMOUNTS).unwrap();
    assert_eq!(acquisition.requested("call_count"), Some(1.0));
    assert_eq!(acquisition.requested("c"), Some(1.0));
    assert_eq!(acquisition.held().count(), 2);
}

#[test]
fn scenario_27_empty_request_with_a_rate_limit_needs_amounts() {
    let timer = ManualClock::default();
    let set = three_limits(&timer);
    let err = set.try_acquire(NO_AMOUNTS).unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, Error::AmountRequired { ref key } if key == "tokens"));
    assert!(
        text.contains("tokens") && text.contains("explicit amount"),
        "{text}"
    );
    // before any waiting, for the waiting acquires too
    assert!(matches!(
        blocking::LimitSet::new(set.clone()).acquire(NO_AMOUNTS),
        Err(Error::AmountRequired { .. })
    ));
    assert_eq!(available(&set, "connections"), 5.0);
}

#[test]
fn scenario_28_auto_inclusion() {
    let timer = ManualClock::default();
    let set = three_limits(&timer);
    let mut first = set.try_acquire([("tokens", 100)]).unwrap();
    let held: Vec<_> = first.held().map(|h| (h.key, h.requested)).collect();
    assert_eq!(
        held,
        [("tokens", 100.0), ("call_count", 1.0), ("connections", 1.0)]
    );
    first.update([("tokens", 100)]).unwrap();
    first.release().unwrap();
    let mut second = set.try_acquire([("connections", 2)]).unwrap();
    let held: Vec<_> = second.held().map(|h| (h.key, h.requested)).collect();
    assert_eq!(held, [("connections", 2.0), ("call_count", 1.0)]);
    assert_eq!(second.requested("tokens"), None);
    second.release().unwrap(); // no update needed: tokens not taken
}

#[test]
fn scenario_29_unknown_keys_warn_once_per_key_and_set() {
    let timer = ManualClock::default();
    let set = three_limits(&timer);
    let ((), warnings) = capture_warnings(|| {
        for key in ["typo", "typo", "typo2"] {
            let mut acquisition = set.try_acquire([(key, 1), ("tokens", 1)]).unwrap();
            acquisition.update([("tokens", 1)]).unwrap();
        }
    });
    assert_eq!(warnings.len(), 2, "{warnings:#?}");
    assert!(warnings[0].contains("typo"));
    for key in ["call_count", "tokens", "connections"] {
        assert!(warnings[0].contains(key), "{}", warnings[0]);
    }
    // a new set warns afresh
    let other = three_limits(&timer);
    let (_, warnings) = capture_warnings(|| {
        let mut acquisition = other.try_acquire([("typo", 1), ("tokens", 1)]).unwrap();
        acquisition.update([("tokens", 1)]).unwrap();
    });
    assert_eq!(warnings.len(), 1);
    // auto-inclusion still applies when every key is unknown
    let only_unknown = set.try_acquire([("unknown1", 1), ("unknown2", 1)]).unwrap();
    let held: Vec<_> = only_unknown.held().map(|h| (h.key, h.requested)).collect();
    assert_eq!(held, [("call_count", 1.0), ("connections", 1.0)]);
    // a set of plain rate limits and only unknown keys: success holding nothing
    let rates = set_of(&timer, vec![token_bucket("tokens", 10.0, 1.0).into()]);
    let empty = rates.try_acquire([("nope", 3)]).unwrap();
    assert!(empty.is_empty());
}

#[tokio::test]
async fn scenario_30_capacity_validated_on_final_amounts_before_any_wait() {
    let timer = ManualClock::default();
    let set = three_limits(&timer);
    let err = set.try_acquire([("tokens", 1001)]).unwrap_err();
    let text = err.to_string();
    for part in [
        "1001",
        "1000",
        "tokens",
        "exceeds capacity",
        "never be fulfilled",
    ] {
        assert!(text.contains(part), "{part}: {text}");
    }
    // equal to the capacity is fine
    let mut full = set
        .try_acquire([("tokens", 1000), ("connections", 5)])
        .unwrap();
    full.update([("tokens", 1000)]).unwrap();
    full.release().unwrap();
    // the offending limit is named; auto-included amounts are validated too
    let err = set
        .try_acquire([("tokens", 100), ("connections", 10)])
        .unwrap_err();
    assert!(matches!(err, Error::ExceedsCapacity { ref key, .. } if key == "connections"));
    let tiny = set_of(
        &timer,
        vec![CallLimit::from_rate(token_bucket("x", 0.5, 1.0)).into()],
    );
    assert!(matches!(
        tiny.try_acquire(NO_AMOUNTS),
        Err(Error::ExceedsCapacity { .. })
    ));
    // same check for the waiting acquires, even with a zero timeout
    assert!(matches!(
        blocking::LimitSet::new(set.clone()).acquire_timeout([("tokens", 2000)], Duration::ZERO),
        Err(Error::ExceedsCapacity { .. })
    ));
    assert!(matches!(
        set.acquire([("tokens", 2000)]).await,
        Err(Error::ExceedsCapacity { .. })
    ));
    assert!(matches!(
        set.acquire_timeout([("tokens", 2000)], Duration::ZERO)
            .await,
        Err(Error::ExceedsCapacity { .. })
    ));
}

#[test]
fn scenario_31_negative_and_nan_amounts_are_rejected_zero_is_allowed() {
    let timer = ManualClock::default();
    let set = set_of(
        &timer,
        vec![token_bucket("t", 10.0, 1.0).into(), resource("c", 2).into()],
    );
    for request in [
        [("t", -5.0), ("c", 1.0)],
        [("t", 1.0), ("c", -1.0)],
        [("t", f64::NAN), ("c", 1.0)],
    ] {
        let err = set.try_acquire(request).unwrap_err();
        assert!(matches!(err, Error::InvalidAmount { .. }), "{err}");
    }
    assert_eq!(available(&set, "t"), 10.0);
    assert_eq!(available(&set, "c"), 2.0);
    // zero is allowed and still needs an update for a plain rate limit
    let mut zero = set.try_acquire([("t", 0), ("c", 0)]).unwrap();
    assert!(matches!(zero.release(), Err(Error::MissingUpdate { .. })));
    assert_eq!(available(&set, "c"), 2.0);
}

// --------------------------------------------------- D. acquisition, update, release

/// `t`: token bucket 100 per second; `conn`: one connection.
fn bucket_and_connection(timer: &ManualClock) -> LimitSet {
    set_of(
        timer,
        vec![
            token_bucket("t", 100.0, 1.0).into(),
            resource("conn", 1).into(),
        ],
    )
}

#[test]
fn scenario_32_acquisition_is_atomic() {
    let timer = ManualClock::default();
    let set = bucket_and_connection(&timer);
    let _held = set.try_acquire([("conn", 1)]).unwrap();
    let outcome = set.try_acquire([("t", 50)]);
    assert!(refused(&outcome));
    assert_eq!(available(&set, "t"), 100.0, "nothing consumed");
}

#[test]
fn scenario_33_acquisition_holds_amounts_and_a_copy_of_the_config() {
    let set = LimitSet::builder()
        .limit(token_bucket("t", 100.0, 1.0))
        .config("region", "us-east-1")
        .clock(ManualClock::default())
        .build()
        .unwrap();
    let mut acquisition = set.try_acquire([("t", 10)]).unwrap();
    assert_eq!(acquisition.requested("t"), Some(10.0));
    assert_eq!(acquisition.used("t"), None);
    assert_eq!(acquisition.config()["region"], "us-east-1");
    acquisition
        .config_mut()
        .insert("region".into(), "changed".into());
    assert_eq!(acquisition.config()["region"], "changed");
    assert_eq!(set.config()["region"], "us-east-1");
    acquisition.update([("t", 3)]).unwrap();
    assert_eq!(acquisition.used("t"), Some(3.0));
}

#[test]
fn scenario_34_update_rules() {
    let timer = ManualClock::default();
    let set = set_of(&timer, vec![token_bucket("t", 1000.0, 60.0).into()]);
    // negative usage
    let mut acquisition = set.try_acquire([("t", 100)]).unwrap();
    let err = acquisition.update([("t", -1)]).unwrap_err().to_string();
    assert!(err.contains("cannot be negative"), "{err}");
    // more than requested: a warning naming both numbers, the key and the capacity; no charge
    let (result, warnings) = capture_warnings(|| acquisition.update([("t", 150)]));
    result.unwrap();
    assert_eq!(warnings.len(), 1);
    for part in ["150", "100", "\"t\"", "1000"] {
        assert!(warnings[0].contains(part), "{part}: {}", warnings[0]);
    }
    acquisition.release().unwrap();
    assert_eq!(available(&set, "t"), 900.0);
    // last update wins: used 4 of 5, refund 1
    let mut acquisition = set.try_acquire([("t", 5)]).unwrap();
    acquisition.update([("t", 1)]).unwrap();
    acquisition.update([("t", 4)]).unwrap();
    assert_eq!(acquisition.used("t"), Some(4.0));
    acquisition.release().unwrap();
    assert_eq!(available(&set, "t"), 896.0);
    // unknown keys: skipped with one warning per key and acquisition, known keys applied
    let mut acquisition = set.try_acquire([("t", 5)]).unwrap();
    let (result, warnings) = capture_warnings(|| {
        acquisition.update([("nope", 1), ("t", 2)])?;
        acquisition.update([("nope", 1)])
    });
    result.unwrap();
    assert_eq!(warnings.len(), 1, "{warnings:#?}");
    assert_eq!(acquisition.used("t"), Some(2.0));
    let mut again = set.try_acquire([("t", 1)]).unwrap();
    let (_, warnings) = capture_warnings(|| again.update([("nope", 1), ("t", 1)]));
    assert_eq!(warnings.len(), 1, "a new acquisition warns again");
    // update after release
    acquisition.release().unwrap();
    assert!(matches!(
        acquisition.update([("t", 1)]),
        Err(Error::AlreadyReleased)
    ));
}

#[test]
fn scenario_35_call_limit_implicit_and_explicit() {
    let timer = ManualClock::default();
    let set = set_of(
        &timer,
        vec![calls(10.0, 60.0, Algorithm::TokenBucket).into()],
    );
    // implicit: no update needed; an update must be exactly 1
    let mut implicit = set.try_acquire(NO_AMOUNTS).unwrap();
    for bad in [0, 2] {
        let err = implicit.update([("call_count", bad)]).unwrap_err();
        assert!(err.to_string().contains("implicitly"), "{err}");
    }
    implicit.update([("call_count", 1)]).unwrap();
    implicit.release().unwrap();
    let mut implicit = set.try_acquire([("call_count", 1)]).unwrap();
    implicit.release().unwrap();
    // explicit: the update is mandatory, any usage in [0, 5], refund per algorithm
    let mut explicit = set.try_acquire([("call_count", 5)]).unwrap();
    match explicit.release() {
        Err(Error::MissingUpdate { keys }) => assert_eq!(keys, ["call_count"]),
        other => panic!("{other:?}"),
    }
    assert_eq!(available(&set, "call_count"), 3.0);
    let mut explicit = set.try_acquire([("call_count", 3)]).unwrap();
    explicit.update([("call_count", 0)]).unwrap();
    explicit.release().unwrap();
    assert_eq!(available(&set, "call_count"), 3.0, "token bucket refunds");
    // a counting call limit does not refund
    let counting = set_of(
        &ManualClock::default(),
        vec![calls(10.0, 60.0, Algorithm::FixedWindow).into()],
    );
    let mut explicit = counting.try_acquire([("call_count", 5)]).unwrap();
    explicit.update([("call_count", 2)]).unwrap();
    explicit.release().unwrap();
    assert_eq!(available(&counting, "call_count"), 5.0);
}

#[test]
fn scenario_36_resource_limit_needs_no_update() {
    let set = set_of(&ManualClock::default(), vec![resource("conn", 3).into()]);
    let mut acquisition = set.try_acquire([("conn", 2)]).unwrap();
    acquisition.update([("conn", 99)]).unwrap(); // ignored, not validated
    assert_eq!(acquisition.used("conn"), None);
    assert_eq!(available(&set, "conn"), 1.0);
    acquisition.release().unwrap();
    assert_eq!(available(&set, "conn"), 3.0);
}

#[test]
fn scenario_37_missing_update_lists_keys_sorted() {
    let set = set_of(
        &ManualClock::default(),
        vec![
            token_bucket("out", 500.0, 60.0).into(),
            token_bucket("in", 1000.0, 60.0).into(),
            token_bucket("cache", 1000.0, 60.0).into(),
        ],
    );
    let mut acquisition = set
        .try_acquire([("out", 50), ("in", 100), ("cache", 1)])
        .unwrap();
    acquisition.update([("in", 40)]).unwrap();
    let err = acquisition.release().unwrap_err();
    assert!(
        err.to_string().contains("Missing: [\"cache\", \"out\"]"),
        "{err}"
    );
    match err {
        Error::MissingUpdate { keys } => assert_eq!(keys, ["cache", "out"]),
        other => panic!("{other}"),
    }
}

#[test]
fn scenario_38_release_refunds_and_is_idempotent() {
    let timer = ManualClock::default();
    let set = three_limits(&timer);
    let mut acquisition = set
        .try_acquire([("tokens", 10), ("connections", 2)])
        .unwrap();
    acquisition.update([("tokens", 7)]).unwrap();
    acquisition.release().unwrap();
    assert!(acquisition.is_released());
    acquisition.release().unwrap();
    drop(acquisition);
    assert_eq!(available(&set, "tokens"), 993.0);
    assert_eq!(available(&set, "connections"), 5.0, "given back once");
    assert_eq!(available(&set, "call_count"), 99.0, "the call is spent");
}

#[derive(Debug, PartialEq)]
struct UserError;

fn scope_failing_after_update(set: &LimitSet) -> Result<(), UserError> {
    let mut acquisition = set.try_acquire([("in", 100), ("conn", 1)]).unwrap();
    acquisition.update([("in", 40)]).unwrap();
    Err(UserError)
}

fn in_and_conn() -> LimitSet {
    set_of(
        &ManualClock::default(),
        vec![
            token_bucket("in", 1000.0, 60.0).into(),
            token_bucket("out", 500.0, 60.0).into(),
            resource("conn", 1).into(),
        ],
    )
}

#[test]
fn scenario_39_user_error_in_scope_still_releases() {
    let set = in_and_conn();
    assert_eq!(scope_failing_after_update(&set), Err(UserError));
    assert_eq!(available(&set, "conn"), 1.0);
    assert_eq!(available(&set, "in"), 960.0);
}

#[test]
fn scenario_40_missing_update_never_leaks_nor_masks_the_user_error() {
    let set = in_and_conn();
    // explicit release: everything given back, un-updated limits charged in full
    let mut acquisition = set
        .try_acquire([("in", 100), ("out", 50), ("conn", 1)])
        .unwrap();
    acquisition.update([("in", 40)]).unwrap();
    assert!(matches!(
        acquisition.release(),
        Err(Error::MissingUpdate { .. })
    ));
    assert_eq!(available(&set, "conn"), 1.0, "resource given back");
    assert_eq!(available(&set, "in"), 960.0, "updated limit refunded");
    assert_eq!(available(&set, "out"), 450.0, "missing update: no refund");
    assert!(set.try_acquire([("conn", 1)]).is_ok());
    // drop while a user error propagates: the user's error comes out, a warning is logged
    fn failing(set: &LimitSet) -> Result<(), UserError> {
        let _acquisition = set.try_acquire([("out", 50)]).unwrap();
        Err(UserError)
    }
    let (result, warnings) = capture_warnings(|| failing(&set));
    assert_eq!(result, Err(UserError));
    assert_eq!(warnings.len(), 1);
    assert!(warnings[0].contains("out"), "{}", warnings[0]);
    assert_eq!(available(&set, "conn"), 1.0);
}

#[test]
fn scenario_41_nested_acquisitions_auto_include_again() {
    let set = set_of(
        &ManualClock::default(),
        vec![
            token_bucket("t", 1000.0, 60.0).into(),
            resource("c", 5).into(),
        ],
    );
    let outer = set.try_acquire([("c", 2)]).unwrap();
    let mut inner = set.try_acquire([("t", 100)]).unwrap();
    let held: Vec<_> = inner.held().map(|h| (h.key, h.requested)).collect();
    assert_eq!(held, [("t", 100.0), ("c", 1.0)]);
    match set.limit_stats("c").unwrap() {
        LimitStats::Resource { current_usage, .. } => assert_eq!(current_usage, 3),
        other => panic!("{other:?}"),
    }
    inner.update([("t", 100)]).unwrap();
    drop(inner);
    drop(outer);
    assert_eq!(available(&set, "c"), 5.0);
}

#[tokio::test]
async fn scenario_42_empty_limit_set_always_succeeds() {
    let set = LimitSet::builder()
        .clock(ManualClock::default())
        .build()
        .unwrap();
    assert!(set.is_empty());
    assert!(set.try_acquire([("anything", 5)]).unwrap().is_empty());
    assert!(set.try_acquire(NO_AMOUNTS).unwrap().is_empty());
    assert!(
        blocking::LimitSet::new(set.clone())
            .acquire([("x", 1)])
            .unwrap()
            .is_empty()
    );
    assert!(set.acquire([("x", 1)]).await.unwrap().is_empty());
    assert!(set.stats().is_empty());
}

// --------------------------------------------------------------- E. resource semantics

#[test]
fn scenario_43_multi_unit_resource() {
    let set = set_of(&ManualClock::default(), vec![resource("r", 4).into()]);
    let three = set.try_acquire([("r", 3)]).unwrap();
    assert_eq!(
        set.limit_stats("r").unwrap(),
        LimitStats::Resource {
            key: "r".into(),
            capacity: 4,
            current_usage: 3,
            available: 1,
            utilization: 0.75,
        }
    );
    assert!(refused(&set.try_acquire([("r", 2)])));
    let one = set.try_acquire([("r", 1)]).unwrap();
    drop((three, one));
    assert_eq!(available(&set, "r"), 4.0);
}

#[test]
fn scenario_44_blocking_acquire_woken_by_a_release() {
    let timer = ManualClock::default();
    let set = set_of(&timer, vec![resource("r", 4).into()]);
    let held = set.try_acquire([("r", 4)]).unwrap();
    let waiter = {
        let set = blocking::LimitSet::new(set.clone());
        thread::spawn(move || {
            let acquisition = set.acquire([("r", 2)]).unwrap();
            acquisition.requested("r")
        })
    };
    wait_parked(&timer, 1);
    assert!(!waiter.is_finished());
    drop(held);
    assert_eq!(waiter.join().unwrap(), Some(2.0));
    assert_eq!(
        timer.monotonic(),
        Duration::ZERO,
        "no time passed: woken by the release"
    );
    assert_eq!(available(&set, "r"), 4.0);
}

#[test]
fn scenario_45_concurrent_holders_never_exceed_capacity() {
    let set = set_of(&ManualClock::default(), vec![resource("r", 3).into()]);
    let holders = Arc::new(AtomicUsize::new(0));
    let max = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let (set, holders, max) = (
                blocking::LimitSet::new(set.clone()),
                holders.clone(),
                max.clone(),
            );
            thread::spawn(move || {
                for _ in 0..200 {
                    let acquisition = set.acquire(NO_AMOUNTS).unwrap();
                    let now = holders.fetch_add(1, Ordering::SeqCst) + 1;
                    max.fetch_max(now, Ordering::SeqCst);
                    thread::yield_now();
                    holders.fetch_sub(1, Ordering::SeqCst);
                    drop(acquisition);
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    let max = max.load(Ordering::SeqCst);
    assert!((1..=3).contains(&max), "{max}");
    assert_eq!(available(&set, "r"), 3.0);
}

#[test]
fn scenario_46_failed_try_acquire_holds_nothing() {
    let set = set_of(&ManualClock::default(), vec![resource("conn", 1).into()]);
    let a = set.try_acquire(NO_AMOUNTS).unwrap();
    {
        let outcome = set.try_acquire(NO_AMOUNTS);
        let rejected = outcome.unwrap_err().rejection().cloned().expect("refused");
        assert_eq!(
            rejected.reason(),
            &Reason::Exhausted {
                requested: vec![("conn".to_owned(), 1.0)]
            }
        );
        // the rejection is a value; dropping it gives nothing back
    }
    assert_eq!(available(&set, "conn"), 0.0);
    assert!(refused(&set.try_acquire(NO_AMOUNTS)), "A still holds");
    drop(a);
    assert!(set.try_acquire(NO_AMOUNTS).is_ok());
}

// -------------------------------------------------- F. blocking, timeout, try, async

/// On another thread: waits for `amount` of `key`, uses all of it, and returns when it was granted.
fn spawn_blocking_use(
    set: &LimitSet,
    key: &'static str,
    amount: u32,
) -> thread::JoinHandle<Duration> {
    let set = blocking::LimitSet::new(set.clone());
    thread::spawn(move || {
        let mut acquisition = set.acquire([(key, amount)]).unwrap();
        acquisition.update([(key, amount)]).unwrap();
        set.as_async().now()
    })
}

#[test]
fn scenario_47_waits_until_the_computed_instant_first_come_first_served() {
    let timer = ManualClock::default();
    let set = set_of(&timer, vec![token_bucket("t", 10.0, 1.0).into()]);
    spend(&set, "t", 10);
    // a large request waits; a small one may not overtake it
    let big = spawn_blocking_use(&set, "t", 10);
    wait_parked(&timer, 1);
    timer.advance(ms(500));
    let small = set.try_acquire([("t", 1)]);
    assert!(
        refused(&small),
        "five tokens are there, but the big request came first"
    );
    assert_eq!(small.unwrap_err().rejection().unwrap().retry_after(), None);
    wait_parked(&timer, 1);
    timer.advance(ms(499));
    wait_parked(&timer, 1);
    assert!(!big.is_finished());
    timer.advance(ms(1));
    let granted_at = big.join().unwrap();
    assert_eq!(granted_at, ms(1_000), "woken at the computed instant");
    // the queue is empty again
    timer.advance(ms(100));
    assert!(set.try_acquire([("t", 1)]).is_ok());
}

#[test]
fn scenario_47_blocking_waiters_are_served_in_arrival_order() {
    let timer = ManualClock::default();
    let set = set_of(&timer, vec![resource("r", 2).into()]);
    let held = set.try_acquire([("r", 2)]).unwrap();
    let order = std::sync::Mutex::new(Vec::new());
    let parked = blocking::LimitSet::new(set.clone());
    thread::scope(|scope| {
        let spawn = |name: &'static str, amount: u32| {
            let (set, order) = (&parked, &order);
            scope.spawn(move || {
                let acquisition = set.acquire([("r", amount)]).unwrap();
                order.lock().unwrap().push(name);
                drop(acquisition);
            })
        };
        spawn("big", 2);
        wait_parked(&timer, 1);
        spawn("small", 1);
        wait_parked(&timer, 2);
        drop(held);
    });
    assert_eq!(*order.lock().unwrap(), ["big", "small"]);
    assert_eq!(available(&set, "r"), 2.0);
}

#[test]
fn scenario_48_timeouts() {
    let timer = ManualClock::default();
    let set = set_of(&timer, vec![token_bucket("t", 10.0, 1.0).into()]);
    let parked = blocking::LimitSet::new(set.clone());
    // zero timeout with capacity available succeeds
    let mut first = parked.acquire_timeout([("t", 10)], Duration::ZERO).unwrap();
    first.update([("t", 10)]).unwrap();
    drop(first);
    // zero timeout without capacity: one attempt, no time passes
    let err = parked
        .acquire_timeout([("t", 5)], Duration::ZERO)
        .unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }));
    assert_eq!(timer.monotonic(), Duration::ZERO);
    // 0.1 s timeout for a grant 0.5 s away: the error comes at exactly 0.1 s
    let waiter = {
        let set = parked.clone();
        thread::spawn(move || {
            let err = set.acquire_timeout([("t", 5)], ms(100)).unwrap_err();
            (err.to_string(), set.as_async().now())
        })
    };
    wait_parked(&timer, 1);
    timer.advance(ms(99));
    wait_parked(&timer, 1);
    timer.advance(ms(1));
    let (text, at) = waiter.join().unwrap();
    assert!(text.contains("within 0.1s"), "{text}");
    assert_eq!(at, ms(100));
    // no timeout: waits as long as needed
    let waiter = spawn_blocking_use(&set, "t", 5);
    wait_parked(&timer, 1);
    timer.advance(ms(400));
    assert_eq!(waiter.join().unwrap(), ms(500));
}

#[test]
fn scenario_49_try_acquire_never_waits() {
    let timer = ManualClock::default();
    let set = bucket_and_connection(&timer);
    let held = set.try_acquire([("conn", 1)]).unwrap();
    let rejected = set
        .try_acquire([("t", 50)])
        .unwrap_err()
        .rejection()
        .cloned()
        .expect("refused");
    assert_eq!(
        rejected.reason(),
        &Reason::Exhausted {
            requested: vec![("t".to_owned(), 50.0), ("conn".to_owned(), 1.0)]
        }
    );
    assert_eq!(rejected.retry_after(), None, "waits for a release");
    assert_eq!(available(&set, "t"), 100.0);
    drop(held);
    // a time-based refusal tells how long
    spend(&set, "t", 100);
    let rejected = set
        .try_acquire([("t", 50)])
        .unwrap_err()
        .rejection()
        .cloned()
        .expect("refused");
    let after = rejected.retry_after().unwrap();
    assert!(
        after.abs_diff(ms(500)) < Duration::from_micros(1),
        "{after:?}"
    );
    // request errors are still errors
    assert!(set.try_acquire([("t", 101)]).is_err());
    assert_eq!(timer.monotonic(), Duration::ZERO);
}

#[tokio::test]
async fn scenario_50_async_acquire_waits_cooperatively() {
    let timer = ManualClock::default();
    let set = set_of(
        &timer,
        vec![
            token_bucket("t", 10.0, 1.0).into(),
            resource("conn", 1).into(),
        ],
    );
    // woken by a release
    let held = set.try_acquire([("conn", 1)]).unwrap();
    let task = {
        let set = set.clone();
        tokio::spawn(async move {
            let mut acquisition = set.acquire([("t", 1)]).await.unwrap();
            acquisition.update([("t", 1)]).unwrap();
        })
    };
    for _ in 0..5 {
        tokio::task::yield_now().await;
    }
    assert!(!task.is_finished(), "the event loop is not blocked");
    drop(held);
    task.await.unwrap();
    // woken at the computed instant
    spend(&set, "t", 9);
    let task = {
        let set = set.clone();
        tokio::spawn(async move {
            let mut acquisition = set.acquire([("t", 3)]).await.unwrap();
            acquisition.update([("t", 3)]).unwrap();
            set.now()
        })
    };
    for _ in 0..5 {
        tokio::task::yield_now().await;
    }
    timer.advance(ms(200));
    for _ in 0..5 {
        tokio::task::yield_now().await;
    }
    assert!(!task.is_finished());
    timer.advance(ms(100));
    assert_eq!(task.await.unwrap(), ms(300));
    // the same timeout error
    let task = {
        let set = set.clone();
        tokio::spawn(async move { set.acquire_timeout([("t", 10)], ms(100)).await.map(drop) })
    };
    for _ in 0..5 {
        tokio::task::yield_now().await;
    }
    timer.advance(ms(100));
    let err = task.await.unwrap().unwrap_err();
    assert!(err.to_string().contains("within 0.1s"), "{err}");
}

// ------------------------------------------------------------------------- G. stats

#[test]
fn scenario_51_per_limit_stats() {
    for algorithm in [
        Algorithm::TokenBucket,
        Algorithm::Gcra,
        Algorithm::SlidingWindow,
        Algorithm::FixedWindow,
        Algorithm::LeakyBucket,
    ] {
        let set = set_of(
            &ManualClock::default(),
            vec![rate("t", 10.0, 1.0, algorithm).into()],
        );
        spend(&set, "t", 4);
        let LimitStats::Rate { key, stats, .. } = set.limit_stats("t").unwrap() else {
            panic!("rate stats expected");
        };
        assert_eq!(key, "t");
        assert_eq!(stats.algorithm, algorithm);
        assert_eq!(stats.capacity, 10.0);
        assert_eq!(stats.window, Duration::from_secs(1));
        assert_eq!(stats.rate_per_second, 10.0);
        assert!((stats.available - 6.0).abs() < 1e-9, "{algorithm}");
        assert!((stats.in_use - 4.0).abs() < 1e-9, "{algorithm}");
        assert!((stats.utilization - 0.4).abs() < 1e-9, "{algorithm}");
        assert_eq!(
            stats.emission_interval,
            (algorithm == Algorithm::Gcra).then_some(ms(100))
        );
    }
    let set = set_of(&ManualClock::default(), vec![resource("r", 4).into()]);
    let _one = set.try_acquire(NO_AMOUNTS).unwrap();
    let stats = set.limit_stats("r").unwrap();
    assert_eq!((stats.available(), stats.utilization()), (3.0, 0.25));
}

#[test]
fn scenario_51_stats_refresh_time_based_state() {
    let timer = ManualClock::default();
    let set = set_of(&timer, vec![token_bucket("t", 10.0, 1.0).into()]);
    spend(&set, "t", 10);
    timer.advance(ms(250));
    assert!((available(&set, "t") - 2.5).abs() < 1e-9);
}

#[test]
fn scenario_52_set_stats_in_definition_order_and_lookup() {
    let timer = ManualClock::default();
    let set = three_limits(&timer);
    let keys: Vec<_> = set.stats().iter().map(|s| s.key().to_owned()).collect();
    assert_eq!(keys, ["call_count", "tokens", "connections"]);
    assert_eq!(set.limit("tokens").unwrap().capacity(), 1000.0);
    let err = set.limit("nope").unwrap_err();
    assert!(matches!(err, Error::UnknownLimit { ref key } if key == "nope"));
    assert!(err.to_string().contains("nope"));
    assert!(set.limit_stats("nope").is_err());
}

#[test]
fn long_keys_sharing_a_prefix_are_told_apart() {
    let timer = ManualClock::default();
    let set = set_of(
        &timer,
        vec![
            resource("connections_primary", 1).into(),
            resource("connections_replica", 2).into(),
            resource("conn", 3).into(),
        ],
    );
    let acquisition = set
        .try_acquire([
            ("connections_replica", 2),
            ("conn", 3),
            ("connections_primary", 1),
        ])
        .unwrap();
    assert_eq!(acquisition.requested("connections_replica"), Some(2.0));
    assert_eq!(acquisition.requested("connections_primary"), Some(1.0));
    assert_eq!(acquisition.requested("conn"), Some(3.0));
    assert_eq!(acquisition.requested("connections_other"), None);
    assert_eq!(set.limit("connections_replica").unwrap().capacity(), 2.0);
}

#[test]
fn scenario_13_eight_threads_get_the_burst_plus_the_refill() {
    let timer = ManualClock::default();
    let set = set_of(&timer, vec![token_bucket("t", 100.0, 1.0).into()]);
    let hammer = || {
        let granted = AtomicUsize::new(0);
        thread::scope(|scope| {
            for _ in 0..8 {
                scope.spawn(|| {
                    while let Some(mut acquisition) = admitted(set.try_acquire([("t", 1)])) {
                        acquisition.update([("t", 1)]).unwrap();
                        granted.fetch_add(1, Ordering::SeqCst);
                    }
                });
            }
        });
        granted.into_inner()
    };
    let burst = hammer();
    timer.advance(Duration::from_secs(1));
    let refilled = hammer();
    assert_eq!((burst, refilled), (100, 100));
}

#[test]
fn scenario_b_blocking_acquire_after_draining_waits_exactly_the_algorithm_time() {
    for (algorithm, wait) in [
        (Algorithm::TokenBucket, ms(100)),
        (Algorithm::Gcra, ms(100)),
        (Algorithm::SlidingWindow, ms(1_000)),
        (Algorithm::FixedWindow, ms(1_000)),
        (Algorithm::LeakyBucket, ms(100)),
    ] {
        let timer = ManualClock::default();
        let set = set_of(&timer, vec![rate("t", 10.0, 1.0, algorithm).into()]);
        spend(&set, "t", 10);
        let parked = blocking::LimitSet::new(set.clone());
        let granted_at = thread::scope(|scope| {
            let waiter = scope.spawn(|| {
                let mut acquisition = parked.acquire([("t", 1)]).unwrap();
                acquisition.update([("t", 1)]).unwrap();
                set.now()
            });
            wait_parked(&timer, 1);
            timer.advance(wait - ms(1));
            wait_parked(&timer, 1);
            assert!(!waiter.is_finished(), "{algorithm}");
            timer.advance(ms(1));
            waiter.join().unwrap()
        });
        assert_eq!(granted_at, wait, "{algorithm}");
    }
}

#[test]
fn scenario_22_leaky_bucket_blocking_acquire_succeeds_after_one_drain_interval() {
    let timer = ManualClock::default();
    let set = set_of(
        &timer,
        vec![rate("t", 10.0, 1.0, Algorithm::LeakyBucket).into()],
    );
    spend(&set, "t", 10);
    // frequent polls do not stop the drain: 20 grants over 2 s of 50 ms polls
    let mut grants = 0;
    for _ in 0..40 {
        timer.advance(ms(50));
        if let Some(mut acquisition) = admitted(set.try_acquire([("t", 1)])) {
            acquisition.update([("t", 1)]).unwrap();
            grants += 1;
        }
    }
    assert_eq!(grants, 20);
    let parked = blocking::LimitSet::new(set.clone());
    let granted_at = thread::scope(|scope| {
        let waiter = scope.spawn(|| {
            let mut acquisition = parked
                .acquire_timeout([("t", 1)], Duration::from_secs(3))
                .unwrap();
            acquisition.update([("t", 1)]).unwrap();
            set.now()
        });
        wait_parked(&timer, 1);
        timer.advance(ms(100));
        waiter.join().unwrap()
    });
    assert_eq!(granted_at, ms(2_100));
}
