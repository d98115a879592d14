//! Proactive refill and sharding (reference §7.3).

use std::collections::BTreeMap;

use crate::processor::{BucketActivity, BucketRef};
use crate::sink::Aggregator;

/// What the proactive passes did.
#[derive(Debug, Default)]
pub(crate) struct ProactiveReport {
    pub(crate) refills: usize,
    pub(crate) shards_stamped: usize,
    pub(crate) errors: Vec<String>,
}

pub(crate) async fn run(
    _aggregator: &Aggregator,
    _activity: &BTreeMap<BucketRef, BucketActivity>,
) -> ProactiveReport {
    ProactiveReport::default()
}
