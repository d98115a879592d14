//! Property tests of a LimitSet: whatever the sequence of acquisitions, updates, releases and
//! elapsed time, resources are conserved and no limit goes above its capacity.

mod support;

use dynalimit::Error;
use dynalimit::limitset::{LimitSet, LimitStats};
use dynalimit::time::ManualClock;
use proptest::prelude::*;
use support::*;

#[derive(Debug, Clone)]
enum Op {
    Acquire { tokens: u8, conns: u8 },
    Update { slot: usize, used: u8 },
    Release { slot: usize },
    Advance { millis: u16 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u8..=12, 0u8..=3).prop_map(|(tokens, conns)| Op::Acquire { tokens, conns }),
        (0usize..8, 0u8..=15).prop_map(|(slot, used)| Op::Update { slot, used }),
        (0usize..8).prop_map(|slot| Op::Release { slot }),
        (0u16..500).prop_map(|millis| Op::Advance { millis }),
    ]
}

fn usage(set: &LimitSet) -> u64 {
    match set.limit_stats("conns").unwrap() {
        LimitStats::Resource { current_usage, .. } => current_usage,
        other => panic!("{other:?}"),
    }
}

proptest! {
    #[test]
    fn resources_are_conserved_and_limits_stay_within_capacity(
        ops in prop::collection::vec(op(), 1..80),
    ) {
        let timer = ManualClock::default();
        let set = set_of(&timer, vec![token_bucket("tokens", 20.0, 1.0).into(), resource("conns", 3).into()]);
        let mut held = Vec::new();
        for op in ops {
            match op {
                Op::Acquire { tokens, conns } => {
                    match set.try_acquire([("tokens", tokens), ("conns", conns)]) {
                        Ok(acquisition) => held.push(acquisition),
                        Err(Error::Rejected(_)) => {}
                        Err(other) => panic!("{other}"),
                    }
                }
                Op::Update { slot, used } => {
                    if let Some(acquisition) = held.get_mut(slot) {
                        acquisition.update([("tokens", used)]).unwrap();
                    }
                }
                Op::Release { slot } => {
                    if slot < held.len() {
                        let mut acquisition = held.swap_remove(slot);
                        let _missing_update_is_reported = acquisition.release();
                    }
                }
                Op::Advance { millis } => timer.advance(ms(u64::from(millis))),
            }
            let expected: f64 = held.iter().filter_map(|a| a.requested("conns")).sum();
            prop_assert_eq!(usage(&set) as f64, expected);
            prop_assert!(usage(&set) <= 3);
            prop_assert!(available(&set, "tokens") <= 20.0 + 1e-9);
        }
        held.clear();
        prop_assert_eq!(usage(&set), 0);
    }
}
