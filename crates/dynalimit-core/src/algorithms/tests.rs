//! Contract scenarios of section B (one rate limit, capacity 10 per 1 s unless noted) and
//! property tests of the algorithms.

use std::time::Duration;

use proptest::prelude::*;

use super::*;

const ALL: [Algorithm; 5] = [
    Algorithm::TokenBucket,
    Algorithm::Gcra,
    Algorithm::SlidingWindow,
    Algorithm::FixedWindow,
    Algorithm::LeakyBucket,
];

fn ms(millis: u64) -> Duration {
    Duration::from_millis(millis)
}

fn ten_per_second(algorithm: Algorithm) -> RateCounter {
    RateCounter::new(algorithm, 10.0, Window::SECOND, Duration::ZERO)
}

/// Takes one unit at a time at `now` until refused; returns how many were granted.
fn drain(counter: &mut RateCounter, now: Duration) -> u32 {
    let mut granted = 0;
    while counter.fits(1.0, now) {
        counter.take(1.0, now);
        granted += 1;
        assert!(granted <= 1_000, "never refuses");
    }
    granted
}

#[test]
fn scenario_grid_burst_then_half_second_then_after_window_then_idle() {
    // (algorithm, t=0, t=0.5, t=1.05, after 3 s idle), as observed on the reference library
    // except LeakyBucket, which drains continuously here.
    let expected = [
        (Algorithm::TokenBucket, [10, 5, 5, 10]),
        (Algorithm::Gcra, [10, 5, 5, 10]),
        (Algorithm::SlidingWindow, [10, 0, 10, 10]),
        (Algorithm::FixedWindow, [10, 0, 10, 10]),
        (Algorithm::LeakyBucket, [10, 5, 5, 10]),
    ];
    for (algorithm, cells) in expected {
        let mut counter = ten_per_second(algorithm);
        let got = [
            drain(&mut counter, ms(0)),
            drain(&mut counter, ms(500)),
            drain(&mut counter, ms(1_050)),
            drain(&mut counter, ms(4_050)),
        ];
        assert_eq!(got, cells, "{algorithm}");
    }
}

#[test]
fn scenario_09_token_bucket_refills_continuously_and_fractionally() {
    let mut bucket = ten_per_second(Algorithm::TokenBucket);
    assert_eq!(bucket.available(ms(0)), 10.0);
    bucket.take(10.0, ms(0));
    assert!((bucket.available(ms(130)) - 1.3).abs() < 1e-9);
    assert_eq!(bucket.available(ms(60_000)), 10.0, "never above capacity");
}

#[test]
fn scenario_10_token_bucket_drained_then_quarter_second_shows_two_and_a_half() {
    let mut bucket = ten_per_second(Algorithm::TokenBucket);
    bucket.take(10.0, ms(0));
    assert!((bucket.stats(ms(250)).available - 2.5).abs() < 1e-9);
}

#[test]
fn scenario_11_token_bucket_fractional_amounts() {
    let mut bucket = RateCounter::new(Algorithm::TokenBucket, 1.0, Window::SECOND, ms(0));
    assert!(bucket.fits(0.7, ms(0)));
    bucket.take(0.7, ms(0));
    assert!(!bucket.fits(0.4, ms(0)));
    assert!(bucket.fits(0.3, ms(0)));
}

#[test]
fn scenario_12_token_bucket_refund_is_capped_at_capacity() {
    let mut bucket = ten_per_second(Algorithm::TokenBucket);
    bucket.take(10.0, ms(0));
    assert!(bucket.refund(10.0));
    assert_eq!(bucket.available(ms(0)), 10.0);
    bucket.take(5.0, ms(0));
    assert!(bucket.refund(5.0));
    assert_eq!(bucket.available(ms(400)), 10.0, "refill + refund capped");
}

#[test]
fn scenario_13_token_bucket_grants_burst_plus_refill_over_one_second() {
    // capacity 100 per 1 s, hammered every 100 µs for one second: 100 burst + 100 refilled.
    let mut bucket = RateCounter::new(Algorithm::TokenBucket, 100.0, Window::SECOND, ms(0));
    let mut granted = 0;
    for step in 0..=10_000u64 {
        let now = Duration::from_micros(step * 100);
        if bucket.fits(1.0, now) {
            bucket.take(1.0, now);
            granted += 1;
        }
    }
    assert_eq!(granted, 200);
}

#[test]
fn scenario_14_gcra_emission_interval_and_tolerance() {
    let mut gcra = ten_per_second(Algorithm::Gcra);
    assert_eq!(
        gcra.stats(ms(0)).emission_interval,
        Some(Duration::from_millis(100))
    );
    let mut slow = RateCounter::new(
        Algorithm::Gcra,
        300.0,
        Window::seconds(60.0).unwrap(),
        ms(0),
    );
    let stats = slow.stats(ms(0));
    assert_eq!(stats.emission_interval, Some(Duration::from_millis(200)));
    assert_eq!(stats.rate_per_second, 5.0);
    // a full burst from idle, then one unit per emission interval
    assert_eq!(drain(&mut gcra, ms(0)), 10);
    assert_eq!(drain(&mut gcra, ms(99)), 0);
    assert_eq!(drain(&mut gcra, ms(100)), 1);
}

#[test]
fn scenario_15_gcra_refund_never_creates_credit_beyond_idle() {
    let mut gcra = ten_per_second(Algorithm::Gcra);
    gcra.take(3.0, ms(0));
    assert!(gcra.refund(3.0));
    assert!((gcra.available(ms(0)) - 10.0).abs() < 1e-9);
    assert!(gcra.refund(100.0));
    assert!(gcra.available(ms(0)) <= 10.0);
    assert_eq!(drain(&mut gcra, ms(0)), 10);
}

#[test]
fn scenario_16_gcra_fractional_amounts_and_tiny_capacity() {
    let mut gcra = ten_per_second(Algorithm::Gcra);
    gcra.take(5.0, ms(0));
    assert!(gcra.fits(5.0, ms(0)));
    gcra.take(5.0, ms(0));
    assert!(!gcra.fits(1.0, ms(0)));
    let mut tiny = RateCounter::new(Algorithm::Gcra, 0.0001, Window::SECOND, ms(0));
    assert!(tiny.fits(0.0001, ms(0)));
    assert!(!tiny.fits(0.001, ms(0)));
}

#[test]
fn scenario_17_gcra_stats_report_available_and_interval() {
    let mut gcra = ten_per_second(Algorithm::Gcra);
    gcra.take(4.0, ms(0));
    let stats = gcra.stats(ms(0));
    assert!((stats.available - 6.0).abs() < 1e-9);
    assert!((stats.utilization - 0.4).abs() < 1e-9);
    assert!((gcra.stats(ms(200)).available - 8.0).abs() < 1e-9);
}

#[test]
fn scenario_18_sliding_window_rolls() {
    let mut window = ten_per_second(Algorithm::SlidingWindow);
    for _ in 0..5 {
        window.take(1.0, ms(0));
    }
    window.take(5.0, ms(500));
    assert!(!window.fits(1.0, ms(999)));
    assert_eq!(window.available(ms(1_050)), 5.0);
    window.take(5.0, ms(1_050));
    assert_eq!(window.available(ms(1_050)), 0.0);
    assert_eq!(window.available(ms(1_550)), 5.0);
    assert!(!window.refund(5.0), "no refunds");
    assert_eq!(window.ready_at(6.0, ms(1_550)), Some(ms(2_050)));
}

#[test]
fn scenario_19_fixed_window_restarts_at_the_first_check_after_expiry() {
    let mut window = ten_per_second(Algorithm::FixedWindow);
    assert_eq!(drain(&mut window, ms(0)), 10);
    assert_eq!(drain(&mut window, ms(1_700)), 10, "new window [1.7, 2.7)");
    assert_eq!(drain(&mut window, ms(2_050)), 0);
    assert_eq!(window.ready_at(1.0, ms(2_050)), Some(ms(2_700)));
    assert_eq!(drain(&mut window, ms(2_750)), 10);
}

#[test]
fn scenario_20_fixed_window_boundary_burst() {
    let mut window = ten_per_second(Algorithm::FixedWindow);
    assert_eq!(drain(&mut window, ms(900)), 10);
    assert_eq!(
        drain(&mut window, ms(1_020)),
        10,
        "twice the capacity in 120 ms"
    );
}

#[test]
fn scenario_22_leaky_bucket_drains_continuously_under_frequent_polls() {
    let mut bucket = ten_per_second(Algorithm::LeakyBucket);
    assert_eq!(drain(&mut bucket, ms(0)), 10);
    let mut grants = 0;
    for poll in 1..=40u64 {
        let now = ms(poll * 50);
        if bucket.fits(1.0, now) {
            bucket.take(1.0, now);
            grants += 1;
        }
    }
    assert_eq!(grants, 20, "one grant per 100 ms over 2 s of 50 ms polls");
    // capacity 1000 per second: 100 units free up after 100 ms
    let mut fast = RateCounter::new(Algorithm::LeakyBucket, 1_000.0, Window::SECOND, ms(0));
    fast.take(1_000.0, ms(0));
    let ready = fast.ready_at(100.0, ms(0)).unwrap();
    assert!(
        ready.abs_diff(ms(100)) < Duration::from_micros(1),
        "{ready:?}"
    );
    assert!(!fast.fits(100.0, ms(99)));
    assert!(fast.fits(100.0, ms(100)));
}

#[test]
fn scenario_24_refund_support_per_algorithm() {
    // request 10, use 4 on capacity 10 per 60 s, then count what can still be taken
    let expected = [
        (Algorithm::TokenBucket, 6),
        (Algorithm::Gcra, 6),
        (Algorithm::SlidingWindow, 0),
        (Algorithm::FixedWindow, 0),
        (Algorithm::LeakyBucket, 0),
    ];
    for (algorithm, left) in expected {
        let mut counter = RateCounter::new(algorithm, 10.0, Window::seconds(60.0).unwrap(), ms(0));
        counter.take(10.0, ms(0));
        assert_eq!(counter.refund(6.0), algorithm.refunds(), "{algorithm}");
        assert_eq!(drain(&mut counter, ms(0)), left, "{algorithm}");
    }
}

#[test]
fn infinite_capacity_admits_everything() {
    for algorithm in ALL {
        let mut counter = RateCounter::new(algorithm, f64::INFINITY, Window::SECOND, ms(0));
        assert!(counter.fits(1e300, ms(0)));
        counter.take(1e300, ms(0));
        assert!(counter.fits(1e300, ms(0)), "{algorithm}");
        assert_eq!(counter.ready_at(1e300, ms(0)), Some(ms(0)));
    }
}

#[test]
fn more_than_the_capacity_is_never_ready() {
    for algorithm in ALL {
        let mut counter = ten_per_second(algorithm);
        assert_eq!(counter.ready_at(11.0, ms(0)), None, "{algorithm}");
    }
}

#[test]
fn resource_counter_never_goes_below_zero() {
    let mut resource = ResourceCounter::new(2);
    resource.take(2);
    resource.give_back(5);
    assert_eq!(resource.usage(), 0);
    assert_eq!(resource.available(), 2);
}

fn algorithm() -> impl Strategy<Value = Algorithm> {
    prop::sample::select(ALL.to_vec())
}

proptest! {
    /// Whatever the request pattern, no algorithm grants more than the capacity plus what the
    /// elapsed time allows (capacity per started window for the window algorithms, which may
    /// admit a double burst at a boundary).
    #[test]
    fn never_over_admits(
        algorithm in algorithm(),
        steps in prop::collection::vec((0u64..300, 1u64..4), 1..200),
    ) {
        let capacity = 10.0;
        let mut counter = RateCounter::new(algorithm, capacity, Window::SECOND, ms(0));
        let mut now = ms(0);
        let mut granted = 0.0;
        for (gap, amount) in steps {
            now += ms(gap);
            let amount = amount as f64;
            if counter.fits(amount, now) {
                counter.take(amount, now);
                granted += amount;
            }
        }
        let elapsed = now.as_secs_f64();
        let bound = match algorithm {
            Algorithm::SlidingWindow | Algorithm::FixedWindow => capacity * (elapsed.floor() + 2.0),
            _ => capacity + capacity * elapsed,
        };
        prop_assert!(granted <= bound + 1e-6, "{algorithm}: {granted} > {bound}");
    }

    /// `ready_at` is exact: the amount does not fit a nanosecond before the returned instant
    /// (unless that is now) and fits at it.
    #[test]
    fn ready_at_is_the_earliest_instant(
        algorithm in algorithm(),
        taken in prop::collection::vec((0u64..400, 1u64..5), 1..30),
        amount in 1u64..=10,
    ) {
        let mut counter = RateCounter::new(algorithm, 10.0, Window::SECOND, ms(0));
        let mut now = ms(0);
        for (gap, n) in taken {
            now += ms(gap);
            if counter.fits(n as f64, now) {
                counter.take(n as f64, now);
            }
        }
        let amount = amount as f64;
        let ready = counter.ready_at(amount, now).expect("amount within capacity");
        prop_assert!(ready >= now);
        let mut later = counter.clone();
        prop_assert!(later.fits(amount, ready), "{algorithm} does not fit at {ready:?}");
        if ready > now + Duration::from_micros(1) {
            let mut earlier = counter.clone();
            prop_assert!(
                !earlier.fits(amount, ready - Duration::from_micros(1)),
                "{algorithm} fits before {ready:?}"
            );
        }
    }

    /// A refund needs no time reading: refunding on the state as last refreshed, then
    /// refreshing, ends where refreshing first and then refunding does.
    #[test]
    fn refund_without_a_time_reading_matches_refresh_then_refund(
        gcra in any::<bool>(),
        take in 0u64..=10,
        refund in 0u64..=12,
        gap in 0u64..2_000,
        later in 0u64..2_000,
    ) {
        let algorithm = if gcra { Algorithm::Gcra } else { Algorithm::TokenBucket };
        let mut stale = RateCounter::new(algorithm, 10.0, Window::SECOND, ms(0));
        stale.take(take as f64, ms(0));
        let mut fresh = stale.clone();
        stale.refund(refund as f64);
        fresh.available(ms(gap));
        fresh.refund(refund as f64);
        let at = ms(gap + later);
        prop_assert!((stale.available(at) - fresh.available(at)).abs() < 1e-9);
    }

    /// A refund never lifts a limit above an idle one.
    #[test]
    fn refunds_never_exceed_capacity(
        algorithm in algorithm(),
        take in 0u64..=10,
        refund in 0u64..=30,
        gap in 0u64..2_000,
    ) {
        let mut counter = RateCounter::new(algorithm, 10.0, Window::SECOND, ms(0));
        counter.take(take as f64, ms(0));
        counter.refund(refund as f64);
        prop_assert!(counter.available(ms(gap)) <= 10.0 + 1e-9);
    }
}
