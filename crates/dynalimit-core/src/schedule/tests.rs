//! Unit and property tests of schedules. The comparison with zae-limiter itself, case by
//! case, is `crates/dynalimit-format/tests/schedule_cases.rs`.

use proptest::prelude::*;

use super::zone::MINUTE_MS;
use super::*;
use crate::bucket::{self, ShardParams};

/// 2026-07-15 00:00 UTC, a Wednesday.
const JULY_15: i64 = 1_784_073_600_000;
const HOUR: i64 = 3_600_000;
const DAY: i64 = 24 * HOUR;

fn cron(text: &str) -> Cron {
    Cron::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"))
}

#[test]
fn each_difference_from_croner_is_settled_as_the_reference_reads_cron() {
    // A one-value range with a step runs to the end of the field.
    assert_eq!(cron("5-5/20 * * * *").minutes(), vec![5, 25, 45]);
    // A start with a step; a step wider than u16.
    assert_eq!(cron("5/15 * * * *").minutes(), vec![5, 20, 35, 50]);
    assert_eq!(cron("*/99999 * * * *").minutes(), vec![0]);
    // Sunday as 0, 7 and SUN is one ISO weekday, 7.
    for text in ["0 0 * * 0", "0 0 * * 7", "0 0 * * SUN", "0 0 * * sun"] {
        assert_eq!(cron(text).weekdays(), vec![7], "{text}");
    }
    assert_eq!(cron("0 0 * * 5-7").weekdays(), vec![5, 6, 7]);
    assert_eq!(cron("0 0 * * SUN-TUE").weekdays(), vec![1, 2, 7]);
    // Both day fields restricted: OR; either starting with `*`: AND.
    assert!(!cron("0 0 1,15 * MON").day_and());
    assert!(cron("0 0 */2 * MON").day_and());
    assert!(cron("0 0 1 * */1").day_and());
    // A day no listed month has, AND-ed, is refused; OR-ed with weekdays it is not.
    assert!(Cron::parse("0 0 30 2 *").is_err());
    assert!(Cron::parse("0 0 31 2,4 *").is_err());
    assert!(Cron::parse("0 0 30 2 MON").is_ok());
    // Names only where the field has them, three letters, any case.
    assert_eq!(cron("0 0 1 jul *").months(), vec![7]);
    assert_eq!(cron("0 0 * * wed-fri").weekdays(), vec![3, 4, 5]);
    for text in [
        "0 0 * * MONDAY",
        "JAN * * * *",
        "0 0 L * *",
        "0 0 LW * *",
        "0 0 15W * *",
        "0 0 * * 5L",
        "0 0 * * FRI#2",
        "0 0 ? * *",
        "@daily",
        "/15 * * * *",
        "0 0 0 * * *",
        "0 0 * *",
        "5-1 * * * *",
        "0 12 * * SAT-SUN",
        "*/0 * * * *",
        "1,,2 * * * *",
        "60 * * * *",
        "* * * * 8",
    ] {
        assert!(Cron::parse(text).is_err(), "{text} must be refused");
    }
}

#[test]
fn an_error_names_the_field_and_the_rule() {
    let e = Cron::parse("0 25 * * *").unwrap_err().to_string();
    assert!(e.contains("hour") && e.contains("0-23"), "{e}");
    let e = Cron::parse("0 0 L * *").unwrap_err().to_string();
    assert!(
        e.contains("day-of-month") && e.contains("not supported"),
        "{e}"
    );
    let e = Cron::parse("0 0 *").unwrap_err().to_string();
    assert!(e.contains("exactly 5 fields"), "{e}");
}

#[test]
fn zone_names_are_exact_iana_names() {
    assert_eq!(Zone::get("Europe/Berlin").unwrap().name(), "Europe/Berlin");
    assert_eq!(Zone::get("UTC").unwrap(), Zone::utc());
    assert!(Zone::get("europe/berlin").is_err());
    assert!(Zone::get("Mars/Olympus_Mons").is_err());
    assert!(Zone::get("").is_err());
}

#[test]
fn a_scale_is_kept_to_thousandths_rounding_half_to_even() {
    let per_mille = |scale| match Entry::scaled("* * * * *", scale).unwrap().modifier() {
        Modifier::Scale { per_mille } => per_mille,
        m => panic!("{m:?}"),
    };
    assert_eq!(per_mille(0.5), 500);
    assert_eq!(per_mille(2.3), 2300);
    assert_eq!(per_mille(0.0025), 2); // 2.5 thousandths: half to even
    assert_eq!(per_mille(0.0035), 4);
    assert_eq!(per_mille(0.0000001), 1); // at least one thousandth
    for bad in [0.0, -1.0, f64::NAN, f64::INFINITY, 1_000_001.0] {
        assert!(Entry::scaled("* * * * *", bad).is_err(), "{bad}");
    }
}

#[test]
fn entry_parameters_scale_together_and_absolutes_replace() {
    let base = Params::new(100_000, 100_000, 60_000);
    let half = Entry::scaled("* * * * *", 0.5).unwrap();
    assert_eq!(half.params(base), Params::new(50_000, 50_000, 60_000));
    // A quota's zero refill stays zero; a tiny scale floors at one millitoken.
    let tiny = Entry::scaled_per_mille("* * * * *", 1).unwrap();
    assert_eq!(
        tiny.params(Params::new(500, 0, 1000)),
        Params::new(1, 0, 1000)
    );
    let abs = Entry::absolute("* * * * *", Some(2000), None, Some(3600)).unwrap();
    assert_eq!(abs.params(base), Params::new(2_000_000, 100_000, 3_600_000));
    assert!(Entry::absolute("* * * * *", None, None, None).is_err());
    assert!(Entry::absolute("* * * * *", Some(0), None, None).is_err());
    assert!(Entry::absolute("* * * * *", None, None, Some(1_000_000_001)).is_err());
}

#[test]
fn the_first_matching_entry_wins_and_none_leaves_the_base() {
    let s = Schedule::new(
        Zone::utc(),
        vec![
            Entry::scaled("* 9-17 * * *", 0.5).unwrap(),
            Entry::scaled("* 12 * * *", 2.0).unwrap(),
        ],
    )
    .unwrap();
    let base = Params::new(1000, 1000, 1000);
    assert_eq!(s.active(JULY_15 + 12 * HOUR), Some(0));
    assert_eq!(s.params(base, JULY_15 + 12 * HOUR).capacity, 500);
    assert_eq!(s.active(JULY_15 + 20 * HOUR), None);
    assert_eq!(s.params(base, JULY_15 + 20 * HOUR), base);
    assert_eq!(s.next_change(JULY_15 + 12 * HOUR), JULY_15 + 18 * HOUR);
}

#[test]
fn office_hours_follow_local_time_across_daylight_saving() {
    let berlin = Zone::get("Europe/Berlin").unwrap();
    let s = Schedule::new(berlin, vec![Entry::scaled("* 9-17 * * *", 0.5).unwrap()]).unwrap();
    // 2026-03-29, the clocks go from 02:00 to 03:00: office hours start at 07:00 UTC, the
    // day before at 08:00 UTC.
    let march_28 = 1_774_656_000_000; // 00:00 UTC
    assert_eq!(s.next_change(march_28), march_28 + 8 * HOUR);
    assert_eq!(s.next_change(march_28 + DAY), march_28 + DAY + 7 * HOUR);
}

#[test]
fn a_daily_reset_fires_at_local_midnight() {
    let ny = Zone::get("America/New_York").unwrap();
    let r = ResetSchedule::parse("0 0 * * *", ny).unwrap();
    // 2026-07-15 12:00 UTC is 08:00 in New York (UTC-4).
    let now = JULY_15 + 12 * HOUR;
    assert_eq!(r.prev_edge(now), Some(JULY_15 + 4 * HOUR));
    assert_eq!(r.next_edge(now), Some(JULY_15 + 28 * HOUR));
    assert_eq!(
        next_boundary(None, Some(&r), now),
        Some(JULY_15 + 28 * HOUR)
    );
    assert_eq!(r.cycle_seconds(), 86_400);
}

#[test]
fn a_reset_window_longer_than_a_minute_fires_once_at_its_start() {
    let r = ResetSchedule::parse("* 0 * * *", Zone::utc()).unwrap();
    assert_eq!(r.prev_edge(JULY_15 + 30 * MINUTE_MS), Some(JULY_15));
    assert_eq!(r.next_edge(JULY_15 + 30 * MINUTE_MS), Some(JULY_15 + DAY));
}

#[test]
fn a_leap_day_reset_is_out_of_reach_most_years() {
    let r = ResetSchedule::parse("0 0 29 2 *", Zone::utc()).unwrap();
    assert_eq!(r.next_edge(JULY_15), None);
    assert_eq!(r.prev_edge(JULY_15), None);
    // The bucket is still materialised once per horizon (a year).
    assert_eq!(r.next_edge_or_horizon(JULY_15), JULY_15 + 366 * DAY);
}

#[test]
fn no_schedule_has_no_boundary() {
    assert_eq!(next_boundary(None, None, JULY_15), None);
}

#[test]
fn a_quota_waits_for_its_reset_and_a_scheduled_drip_walks_its_windows() {
    let quota = Params::new(10_000_000, 0, 1000);
    let monthly = ResetSchedule::parse("0 0 1 * *", Zone::utc()).unwrap();
    let august_1 = JULY_15 + 17 * DAY;
    assert_eq!(
        retry_after_ms(1, quota, None, Some(&monthly), JULY_15, 1),
        august_1 - JULY_15 + 1
    );
    // No rate and no edge: no finite wait.
    assert_eq!(retry_after_ms(1, quota, None, None, JULY_15, 1), 0);
    // 1000 a minute now, 500 a minute from 00:10: 500 tokens needed at 00:00 take the first
    // 10 minutes' worth at the full rate only if they fit, else continue at half rate.
    let base = Params::new(1_000_000, 1_000_000, 60_000);
    let s = Schedule::new(
        Zone::utc(),
        vec![Entry::scaled("10-59 * * * *", 0.5).unwrap()],
    )
    .unwrap();
    let now = JULY_15 + 9 * MINUTE_MS + 50_000; // 10 s before the boundary
    // 10 s at 1000/min gives 166 666 millitokens; 333 334 more at 500/min take 40 000.8 ms.
    assert_eq!(
        retry_after_ms(500_000, base, Some(&s), None, now, 1),
        10_000 + 40_000 + 1
    );
}

proptest! {
    #[test]
    fn without_schedules_the_wait_is_the_bucket_formula(
        deficit in 1i64..1_000_000_000,
        ra in 0i64..10_000_000,
        rp in 1i64..10_000_000,
        shards in 1u32..33,
        now in 0i64..4_000_000_000_000,
    ) {
        let base = Params::new(ra.max(1), ra, rp);
        let got = retry_after_ms(deficit, base, None, None, now, shards);
        let want = bucket::retry_after_ms(deficit, ShardParams::for_shard(ra.max(1), ra, rp, shards));
        if ra > 0 {
            prop_assert_eq!(got, want);
        } else {
            prop_assert_eq!(got, 0);
        }
    }
}

/// Patterns whose match changes within minutes or hours, for the brute-force properties.
fn pattern() -> impl Strategy<Value = String> {
    let minute = prop_oneof![
        Just("*".to_string()),
        (0u8..60).prop_map(|m| m.to_string()),
        (0u8..50, 1u8..10).prop_map(|(a, w)| format!("{a}-{}", a + w)),
        (1u8..31).prop_map(|s| format!("*/{s}")),
    ];
    let hour = prop_oneof![
        Just("*".to_string()),
        (0u8..24).prop_map(|h| h.to_string()),
        (0u8..20, 1u8..4).prop_map(|(a, w)| format!("{a}-{}", a + w)),
    ];
    let dow = prop_oneof![
        Just("*".to_string()),
        Just("1-5".to_string()),
        Just("6,7".to_string())
    ];
    (minute, hour, dow).prop_map(|(m, h, w)| format!("{m} {h} * * {w}"))
}

fn zone() -> impl Strategy<Value = Zone> {
    prop_oneof![
        Just("UTC"),
        Just("Europe/Berlin"),
        Just("Australia/Lord_Howe"),
        Just("Asia/Kathmandu")
    ]
    .prop_map(|z| Zone::get(z).unwrap())
}

/// Instants around 2026's daylight-saving changes in Europe and Australia, and elsewhere.
fn instant() -> impl Strategy<Value = i64> {
    prop_oneof![
        (1_774_656_000_000i64..1_774_656_000_000 + 3 * DAY), // late March
        (1_775_260_800_000i64..1_775_260_800_000 + 3 * DAY), // early April
        (JULY_15..JULY_15 + 30 * DAY),
    ]
}

fn rising(cron: &Cron, zone: &Zone, m: i64) -> bool {
    scan::matches(cron, zone, m) && !scan::matches(cron, zone, m - MINUTE_MS)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// The boundary is the first minute at which the entry in force changes.
    #[test]
    fn the_next_change_is_the_first_minute_the_active_entry_changes(
        patterns in prop::collection::vec(pattern(), 1..3),
        zone in zone(),
        now in instant(),
    ) {
        let entries = patterns.iter().map(|p| Entry::scaled(p, 0.5).unwrap()).collect();
        let s = Schedule::new(zone, entries).unwrap();
        let change = s.next_change(now);
        let current = s.active(now);
        let mut m = zone::floor_minute(now) + MINUTE_MS;
        while m < change {
            prop_assert_eq!(s.active(m), current, "changed at {} before {}", m, change);
            m += MINUTE_MS;
        }
        let (_, cap) = scan::granularity(s.entries().iter().map(Entry::cron));
        if change < now + cap {
            prop_assert_ne!(s.active(change), current);
        }
    }

    /// The previous edge is a rising edge, and none lies between it and now; the next edge
    /// likewise after now.
    #[test]
    fn reset_edges_are_the_nearest_rising_edges(
        p in pattern(),
        zone in zone(),
        now in instant(),
    ) {
        let c = cron(&p);
        let r = ResetSchedule::new(zone.clone(), vec![c.clone()]).unwrap();
        if let Some(prev) = r.prev_edge(now) {
            prop_assert!(prev <= now);
            prop_assert!(rising(&c, &zone, prev));
            let mut m = prev + MINUTE_MS;
            while m <= now {
                prop_assert!(!rising(&c, &zone, m), "edge at {} after {}", m, prev);
                m += MINUTE_MS;
            }
        }
        if let Some(next) = r.next_edge(now) {
            prop_assert!(next > now);
            prop_assert!(rising(&c, &zone, next));
            let mut m = zone::floor_minute(now) + MINUTE_MS;
            while m < next {
                prop_assert!(!rising(&c, &zone, m), "edge at {} before {}", m, next);
                m += MINUTE_MS;
            }
        }
    }
}

/// Any instant at all: the ends of the `i64` range, the ends of the calendar, the edges of
/// the range a scan starts from, and the times an item may hold.
fn any_instant() -> impl Strategy<Value = i64> {
    prop_oneof![
        Just(i64::MIN),
        Just(i64::MAX),
        Just(i64::MAX - 1),
        Just(scan::SCAN_LIMIT_MS),
        Just(scan::SCAN_LIMIT_MS + 1),
        Just(-scan::SCAN_LIMIT_MS),
        Just(-scan::SCAN_LIMIT_MS - 1),
        Just(crate::bounds::LATEST_TIME_MS),
        Just(0),
        any::<i64>(),
        -scan::SCAN_LIMIT_MS..=scan::SCAN_LIMIT_MS,
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Every scan returns from any instant (a time read from an item, say `rf` near
    /// `i64::MAX`), and its answer lies on the right side of it.
    #[test]
    fn scans_from_any_instant_return_on_the_right_side_of_it(
        patterns in prop::collection::vec(pattern(), 1..3),
        zone in zone(),
        now in any_instant(),
        deficit in prop_oneof![Just(i64::MAX), 1i64..=i64::MAX],
    ) {
        let entries = patterns.iter().map(|p| Entry::scaled(p, MAX_SCALE).unwrap()).collect();
        let s = Schedule::new(zone.clone(), entries).unwrap();
        let _ = s.params(Params::new(i64::MAX, i64::MAX, 1), now);
        prop_assert!(s.next_change(now) >= now);
        let crons = patterns.iter().map(|p| cron(p)).collect();
        let r = ResetSchedule::new(zone, crons).unwrap();
        if let Some(prev) = r.prev_edge(now) {
            prop_assert!(prev <= now);
        }
        if let Some(next) = r.next_edge(now) {
            prop_assert!(next > now);
        }
        prop_assert!(r.next_edge_or_horizon(now) >= now);
        for (schedule, reset) in [(Some(&s), None), (None, Some(&r)), (Some(&s), Some(&r))] {
            let base = Params::new(1_000_000, 1, 1_000_000_000_000);
            prop_assert!(retry_after_ms(deficit, base, schedule, reset, now, 32) >= 0);
        }
    }
}
