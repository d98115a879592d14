//! Schedules against zae-limiter 0.17 itself: `tests/data/schedule-cases.json` holds what its
//! `zae_limiter.schedule` module computes for cron parsing, the compact encoding and the
//! evaluation of schedules at chosen instants (`scripts/schedule-cases` writes it). Every
//! case must come out the same here, to the millisecond.

use dynalimit_core::schedule::{
    Cron, Entry, Modifier, Params, ResetSchedule, Schedule, Zone, next_boundary, retry_after_ms,
};
use dynalimit_format::schedule::{decode, decode_reset, encode, encode_reset, to_cron};
use serde_json::Value;

fn cases() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/schedule-cases.json"
    );
    serde_json::from_str(&std::fs::read_to_string(path).expect("the case table")).expect("JSON")
}

fn section<'a>(cases: &'a Value, name: &str) -> &'a [Value] {
    let list = cases[name].as_array().expect("a list of cases");
    assert!(
        list.len() >= 10,
        "section {name} has only {} cases",
        list.len()
    );
    list
}

fn ints(v: &Value) -> Vec<u8> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_u64().unwrap() as u8)
        .collect()
}

fn opt_i64(v: &Value) -> Option<i64> {
    v.as_i64()
}

/// Fails with every mismatch listed (up to 30).
fn report(what: &str, checked: usize, mismatches: Vec<String>) {
    assert!(checked > 0, "no {what} case checked");
    assert!(
        mismatches.is_empty(),
        "{} of {checked} {what} cases differ from zae-limiter:\n{}",
        mismatches.len(),
        mismatches
            .iter()
            .take(30)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[test]
fn cron_patterns_parse_as_zae_limiter_parses_them() {
    let cases = cases();
    let mut bad = Vec::new();
    let list = section(&cases, "parse");
    for case in list {
        let text = case["cron"].as_str().unwrap();
        let ok = case["ok"].as_bool().unwrap();
        match Cron::parse(text) {
            Err(e) if ok => bad.push(format!("{text:?}: refused ({e}), zae-limiter accepts it")),
            Ok(_) if !ok => bad.push(format!("{text:?}: accepted, zae-limiter refuses it")),
            Err(_) => {}
            Ok(cron) => {
                let got = (
                    cron.minutes(),
                    cron.hours(),
                    cron.days(),
                    cron.months(),
                    cron.weekdays(),
                    cron.day_and(),
                    cron.cycle_seconds(),
                );
                let want = (
                    ints(&case["minutes"]),
                    ints(&case["hours"]),
                    ints(&case["days"]),
                    ints(&case["months"]),
                    ints(&case["weekdays"]),
                    case["day_and"].as_bool().unwrap(),
                    case["cycle_seconds"].as_i64().unwrap(),
                );
                if got != want {
                    bad.push(format!("{text:?}: {got:?} != {want:?}"));
                }
                // The stored form of the pattern alone, through a reset schedule.
                let encoded = case["encoded"].as_str().unwrap();
                let reset = encode_reset(&ResetSchedule::new(Zone::utc(), vec![cron]).unwrap());
                match (encoded, reset) {
                    ("", Err(_)) => {}
                    (e, Ok(r)) if r == format!("1{e}") => {}
                    (e, r) => bad.push(format!("{text:?}: encoded {r:?}, zae-limiter {e:?}")),
                }
            }
        }
    }
    report("parse", list.len(), bad);
}

fn entry_of(v: &Value) -> Result<Entry, String> {
    let cron = v["cron"].as_str().unwrap();
    let r = if let Some(scale) = v["scale"].as_f64() {
        if !v["capacity"].is_null()
            || !v["refill_amount"].is_null()
            || !v["refill_period_seconds"].is_null()
        {
            return Err("both a scale and absolute values".into());
        }
        Entry::scaled(cron, scale)
    } else {
        Entry::absolute(
            cron,
            v["capacity"].as_i64(),
            v["refill_amount"].as_i64(),
            v["refill_period_seconds"].as_i64(),
        )
    };
    r.map_err(|e| e.to_string())
}

/// The zone of a case, or an error when its entries name several (one zone per item).
fn zone_of(case: &Value, entries: &[Value], key: &str) -> Result<Zone, String> {
    let tz = case["tz"].as_str().unwrap();
    let mut zones: Vec<&str> = vec![tz];
    if let Some(list) = case.get(key).and_then(Value::as_array) {
        zones = list.iter().map(|z| z.as_str().unwrap()).collect();
    }
    zones.extend(
        entries
            .iter()
            .filter_map(|e| e.get("tz").and_then(Value::as_str)),
    );
    if zones.iter().any(|z| *z != zones[0]) {
        return Err("entries in several zones".into());
    }
    Zone::get(zones[0]).map_err(|e| e.to_string())
}

fn parameter_schedule(case: &Value) -> Result<Schedule, String> {
    let entries = case["entries"].as_array().unwrap();
    let zone = zone_of(case, entries, "entry_tz")?;
    let entries = entries
        .iter()
        .map(entry_of)
        .collect::<Result<Vec<_>, _>>()?;
    Schedule::new(zone, entries).map_err(|e| e.to_string())
}

#[test]
fn parameter_schedules_encode_and_decode_as_zae_limiter_does() {
    let cases = cases();
    let list = section(&cases, "encode");
    let mut bad = Vec::new();
    for case in list {
        let ok = case["ok"].as_bool().unwrap();
        if case["entries"].as_array().unwrap().is_empty() {
            // No entries is no schedule: no attribute on either side (`Option::None` here).
            assert!(
                ok && case["compact"] == "",
                "zae-limiter stores no empty schedule"
            );
            continue;
        }
        let built = parameter_schedule(case);
        let schedule = match (built, ok) {
            (Err(_), false) => continue,
            (Ok(s), false) => {
                bad.push(format!("{case}: built {s:?}, zae-limiter refuses it"));
                continue;
            }
            (Err(e), true) => {
                bad.push(format!("{case}: refused ({e}), zae-limiter accepts it"));
                continue;
            }
            (Ok(s), true) => s,
        };
        let compact = case["compact"].as_str().unwrap();
        let encoded = encode(&schedule);
        if encoded != compact {
            bad.push(format!(
                "{case}: encoded {encoded:?}, zae-limiter {compact:?}"
            ));
            continue;
        }
        let decoded = match decode(compact, schedule.zone()) {
            Ok(d) => d,
            Err(e) => {
                bad.push(format!("{compact:?}: does not decode: {e}"));
                continue;
            }
        };
        let want = case["decoded"].as_array().unwrap();
        for (entry, want) in decoded.entries().iter().zip(want) {
            let (scale, c, a, p) = match entry.modifier() {
                Modifier::Scale { per_mille } => (Some(i64::from(per_mille)), None, None, None),
                Modifier::Absolute {
                    capacity,
                    refill_amount,
                    refill_period_seconds,
                } => (None, capacity, refill_amount, refill_period_seconds),
            };
            let got = (entry.cron().to_string(), scale, c, a, p);
            let expected = (
                want["cron"].as_str().unwrap().to_string(),
                opt_i64(&want["scale_per_mille"]),
                opt_i64(&want["capacity"]),
                opt_i64(&want["refill_amount"]),
                opt_i64(&want["refill_period_seconds"]),
            );
            if got != expected {
                bad.push(format!(
                    "{compact:?}: decoded {got:?}, zae-limiter {expected:?}"
                ));
            }
        }
        if decoded.entries().len() != want.len() {
            bad.push(format!(
                "{compact:?}: {} entries decoded",
                decoded.entries().len()
            ));
        }
        // Decoding then encoding gives the same string: the encoding is canonical.
        if encode(&decoded) != compact {
            bad.push(format!("{compact:?}: re-encoded as {:?}", encode(&decoded)));
        }
        let body = &compact[1..];
        for (part, want) in body.split(';').zip(case["to_cron"].as_array().unwrap()) {
            match to_cron(&format!("1{part}")) {
                Ok(text) if text == want.as_str().unwrap() => {}
                other => bad.push(format!("to_cron(1{part}) = {other:?}, zae-limiter {want}")),
            }
        }
    }
    report("encode", list.len(), bad);
}

#[test]
fn reset_schedules_encode_and_decode_as_zae_limiter_does() {
    let cases = cases();
    let list = section(&cases, "encode_reset");
    let mut bad = Vec::new();
    for case in list {
        let ok = case["ok"].as_bool().unwrap();
        if case["crons"].as_array().unwrap().is_empty() {
            assert!(
                ok && case["compact"] == "",
                "zae-limiter stores no empty reset schedule"
            );
            continue;
        }
        let crons: Vec<Value> = case["crons"].as_array().unwrap().clone();
        let built = zone_of(case, &[], "entry_tz").and_then(|zone| {
            let crons = crons
                .iter()
                .map(|c| Cron::parse(c.as_str().unwrap()).map_err(|e| e.to_string()))
                .collect::<Result<Vec<_>, _>>()?;
            ResetSchedule::new(zone, crons).map_err(|e| e.to_string())
        });
        match (built, ok) {
            (Err(_), false) => {}
            (Ok(r), false) => bad.push(format!("{case}: built {r:?}, zae-limiter refuses it")),
            (Err(e), true) => bad.push(format!("{case}: refused ({e}), zae-limiter accepts it")),
            (Ok(reset), true) => {
                let compact = case["compact"].as_str().unwrap();
                match (encode_reset(&reset), &case["decoded"]) {
                    // zae-limiter writes what it cannot read back (a reset every minute is
                    // the bare marker); dynalimit refuses to write it.
                    (Err(_), Value::Null) => {}
                    (Ok(e), Value::Array(want)) if e == compact => {
                        let decoded = decode_reset(compact, reset.zone()).unwrap();
                        let got: Vec<String> =
                            decoded.crons().iter().map(ToString::to_string).collect();
                        let want: Vec<&str> = want.iter().map(|w| w.as_str().unwrap()).collect();
                        if got != want {
                            bad.push(format!("{compact:?}: decoded {got:?}, want {want:?}"));
                        }
                    }
                    (got, _) => bad.push(format!("{case}: encoded {got:?}")),
                }
            }
        }
    }
    report("encode_reset", list.len(), bad);
}

#[test]
fn stored_schedules_are_read_or_refused_as_zae_limiter_does() {
    let cases = cases();
    let list = section(&cases, "decode");
    let mut bad = Vec::new();
    for case in list {
        let compact = case["compact"].as_str().unwrap();
        let ok = case["ok"].as_bool().unwrap();
        if compact.is_empty() {
            // An empty attribute is no schedule on both sides (the item readers skip it).
            assert!(ok, "zae-limiter reads an empty schedule as none");
            continue;
        }
        let zone = Zone::get(case["tz"].as_str().unwrap()).unwrap();
        let got = if case["reset"].as_bool().unwrap() {
            decode_reset(compact, &zone)
                .map(|_| ())
                .map_err(|e| e.to_string())
        } else {
            decode(compact, &zone)
                .map(|_| ())
                .map_err(|e| e.to_string())
        };
        if got.is_ok() != ok {
            bad.push(format!("{case}: {got:?}"));
        }
    }
    report("decode", list.len(), bad);
}

#[test]
fn schedules_evaluate_as_zae_limiter_evaluates_them() {
    let cases = cases();
    let list = section(&cases, "evaluate");
    let mut bad = Vec::new();
    let mut points = 0;
    for case in list {
        let zone = Zone::get(case["tz"].as_str().unwrap()).unwrap();
        let sched = case["sched"].as_str().unwrap();
        let rsched = case["rsched"].as_str().unwrap();
        let schedule = (!sched.is_empty()).then(|| decode(sched, &zone).unwrap());
        let reset = (!rsched.is_empty()).then(|| decode_reset(rsched, &zone).unwrap());
        let b: Vec<i64> = case["base"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_i64().unwrap())
            .collect();
        let base = Params::new(b[0], b[1], b[2]);
        let label = format!("{sched:?}/{rsched:?} in {}", zone.name());
        for point in case["points"].as_array().unwrap() {
            points += 1;
            let now = point["now_ms"].as_i64().unwrap();
            let mut check = |what: &str, got: Option<i64>, want: Option<i64>| {
                if got != want {
                    bad.push(format!(
                        "{label} at {now}: {what} {got:?}, zae-limiter {want:?}"
                    ));
                }
            };
            let active = schedule.as_ref().and_then(|s| s.active(now));
            check(
                "active",
                active.map(|i| i as i64),
                opt_i64(&point["active"]),
            );
            let eff = schedule.as_ref().map_or(base, |s| s.params(base, now));
            let want: Vec<i64> = point["effective"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_i64().unwrap())
                .collect();
            check("capacity", Some(eff.capacity), Some(want[0]));
            check("refill amount", Some(eff.refill_amount), Some(want[1]));
            check("refill period", Some(eff.refill_period), Some(want[2]));
            check(
                "next boundary",
                next_boundary(schedule.as_ref(), reset.as_ref(), now),
                opt_i64(&point["next_boundary"]),
            );
            check(
                "previous reset edge",
                reset.as_ref().and_then(|r| r.prev_edge(now)),
                opt_i64(&point["prev_reset_edge"]),
            );
            check(
                "next reset edge",
                reset.as_ref().and_then(|r| r.next_edge(now)),
                opt_i64(&point["next_reset_edge"]),
            );
            for r in point["retry_after"].as_array().unwrap() {
                let deficit = r["deficit"].as_i64().unwrap();
                let shards = r["shard_count"].as_u64().unwrap() as u32;
                let got = retry_after_ms(
                    deficit,
                    base,
                    schedule.as_ref(),
                    reset.as_ref(),
                    now,
                    shards,
                );
                check(
                    &format!("retry-after of {deficit} on {shards} shards"),
                    Some(got),
                    r["ms"].as_i64(),
                );
            }
        }
    }
    assert!(points > 1000, "only {points} points");
    report("evaluate", points, bad);
}
