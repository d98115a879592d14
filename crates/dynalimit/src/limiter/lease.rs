//! The lease: what an acquire consumed, its adjustments, commit and rollback (reference §3.9).

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex};

use dynalimit_core::CoreError;
use dynalimit_core::image::LimitStatus;
use dynalimit_core::limit::{MAX_TOKENS, MILLI, delta_to_milli};
use dynalimit_repository::acquire::Entry;

use super::detach::Detach;
use super::inner::{Inner, Pending};
use crate::Error;

#[derive(Debug, Default)]
struct State {
    /// Net millitokens per declared limit recorded by `adjust`.
    adjustments: BTreeMap<String, i64>,
    /// Committed or rolled back: nothing more to write.
    settled: bool,
}

/// What an acquire consumed.
///
/// The initial consumption is already written when the lease is returned. [`Lease::adjust`]
/// checks and records corrections in memory (positive = consume more, negative = give back; the balance
/// may go negative, which gates later callers until refill repays the debt).
/// [`Lease::commit`] writes the corrections; [`Lease::rollback`] gives the initial consumption
/// back and discards them. A lease dropped without either is rolled back in the background
/// (see the [module documentation](super)).
///
/// A *degraded* lease (admitted under `on_unavailable = allow`) wrote nothing and writes
/// nothing.
#[derive(Debug)]
pub struct Lease {
    inner: Option<Arc<Inner>>,
    entries: Vec<Entry>,
    state: Mutex<State>,
    /// The further resources of a multi-resource acquire, each with its own lease.
    also: Vec<(String, Lease)>,
    /// The concurrency slots taken with the debits: the stored concurrency limits of the
    /// entity (and of a cascade parent), and [`Acquire::in_flight`](super::Acquire::in_flight)'s.
    slots: Vec<super::Slot>,
}

impl Lease {
    pub(crate) fn new(inner: Arc<Inner>, entries: Vec<Entry>) -> Self {
        Lease {
            inner: Some(inner),
            entries,
            state: Mutex::new(State::default()),
            also: Vec::new(),
            slots: Vec::new(),
        }
    }

    /// This lease holding `slots` until it is settled.
    pub(crate) fn with_slots(mut self, slots: Vec<super::Slot>) -> Self {
        self.slots = slots;
        self
    }

    /// The concurrency slots this lease holds: one per concurrency limit the acquire took,
    /// given back when the lease is settled or dropped.
    pub fn slots(&self) -> &[super::Slot] {
        &self.slots
    }

    /// The owners other than `entity_id` that this lease debited (a cascade parent), with
    /// the resource of each, across every resource of the acquire.
    pub(crate) fn other_owners(&self, entity_id: &str) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = Vec::new();
        let entries = self
            .entries
            .iter()
            .chain(self.also.iter().flat_map(|(_, l)| l.entries.iter()));
        for e in entries {
            let owner = (e.key().entity_id.clone(), e.key().resource.clone());
            if e.key().entity_id != entity_id && !out.contains(&owner) {
                out.push(owner);
            }
        }
        out
    }

    /// Gives every slot back; the first failure is returned, the other slots are still
    /// given back.
    async fn release_slots(&mut self) -> Result<(), Error> {
        let slots = std::mem::take(&mut self.slots);
        let released = futures::future::join_all(slots.into_iter().map(super::Slot::release)).await;
        released.into_iter().try_for_each(|r| r.map(|_| ()))
    }

    /// This lease with the leases of further resources of the same acquire.
    pub(crate) fn with_also(mut self, also: Vec<(String, Lease)>) -> Self {
        self.also = also;
        self
    }

    /// The lease of one resource of a multi-resource acquire (see
    /// [`Acquire::also`](super::Acquire::also)): this lease for the acquire's own resource,
    /// the lease of a further one by its name; `None` for a resource the acquire did not
    /// debit. Adjusting, committing or rolling back the returned lease acts on that
    /// resource alone; committing or rolling back this lease acts on every resource.
    pub fn resource(&self, name: &str) -> Option<&Lease> {
        if self
            .entries
            .first()
            .is_some_and(|e| e.key().resource == name)
        {
            return Some(self);
        }
        self.also.iter().find(|(r, _)| r == name).map(|(_, l)| l)
    }

    pub(crate) fn degraded() -> Self {
        Lease {
            inner: None,
            entries: Vec::new(),
            state: Mutex::new(State::default()),
            also: Vec::new(),
            slots: Vec::new(),
        }
    }

    /// Whether this lease was admitted without the limiter (`on_unavailable = allow`).
    pub fn is_degraded(&self) -> bool {
        self.inner.is_none()
    }

    /// Whole tokens consumed per limit, including adjustments so far: every consumed limit
    /// that a bucket of the acquire declares (the entity's own, or in a cascade its parent's;
    /// a limit both declare was debited the same amount on both).
    pub fn consumed(&self) -> BTreeMap<String, i64> {
        let state = self.lock();
        let mut consumed = BTreeMap::new();
        for e in &self.entries {
            for (n, c) in e.consumed() {
                if !consumed.contains_key(n) {
                    let adj = state.adjustments.get(n).copied().unwrap_or(0);
                    consumed.insert(n.clone(), (c + adj).div_euclid(1000));
                }
            }
        }
        consumed
    }

    /// Each consumed limit after this acquire and the adjustments recorded so far, on the
    /// bucket that binds it: the entity's own, or in a cascade its parent's for a limit only
    /// the parent declares or where the parent has less left (the smaller
    /// [`LimitStatus::bucket_available`]). A status holds the shard's share of the limit and
    /// the whole tokens left on the shard (negative in debt), the bucket's limit, and the
    /// whole tokens consumed. Empty for a degraded lease. What a service reports to its
    /// callers (the tower layer's `RateLimit` headers).
    pub fn statuses(&self) -> Vec<LimitStatus> {
        let state = self.lock();
        let now = self.inner.as_ref().map_or(0, |i| i.clock.epoch_millis());
        let mut binding: BTreeMap<&str, LimitStatus> = BTreeMap::new();
        for entry in &self.entries {
            for (name, consumed) in entry.consumed() {
                let Some(st) = status_after(entry, name, *consumed, &state, now) else {
                    continue;
                };
                match binding.get(name.as_str()) {
                    Some(held) if held.bucket_available() <= st.bucket_available() => {}
                    _ => {
                        binding.insert(name, st);
                    }
                }
            }
        }
        binding.into_values().collect()
    }

    /// The soft limits (reference §12.4) this acquire debited below zero on the entity's own
    /// bucket: admitted, but over what the limit allows.
    pub fn overdrawn(&self) -> &[String] {
        self.entries.first().map_or(&[], |e| e.overdrawn())
    }

    /// Whether the entity's bucket is bypassed (reference §12.1): the acquire was admitted
    /// without debiting any balance, and only the usage count (`tc`) records it.
    pub fn bypassed(&self) -> bool {
        self.entries.first().is_some_and(|e| e.bypassed())
    }

    /// The entities whose buckets this lease debited (the entity, then its parent).
    pub fn entities(&self) -> Vec<&str> {
        self.entries
            .iter()
            .map(|e| e.key().entity_id.as_str())
            .collect()
    }

    /// Records a correction of `delta` whole tokens for a consumed limit (positive = consume
    /// more, negative = give back). Nothing is written until [`Lease::commit`], which writes
    /// it to every bucket of the acquire that declares the limit: in a cascade the child's,
    /// the parent's, or both. A degraded lease records nothing.
    ///
    /// # Errors
    /// Before recording anything: [`Error::UnknownLimit`] for a limit no bucket of the
    /// acquire debited; [`Error::Invalid`] when `|delta|` exceeds 10^15 tokens or the lease's
    /// net adjustment of the limit would (an adjustment never wraps around).
    pub fn adjust(&self, limit: &str, delta: i64) -> Result<(), Error> {
        if self.entries.is_empty() {
            return Ok(());
        }
        if !self
            .entries
            .iter()
            .any(|e| e.consumed().contains_key(limit))
        {
            return Err(Error::UnknownLimit {
                key: limit.to_owned(),
            });
        }
        let mut state = self.lock();
        let total = state.adjustments.get(limit).copied().unwrap_or(0);
        let total = accumulate(total, delta)?;
        state.adjustments.insert(limit.to_owned(), total);
        Ok(())
    }

    /// Gives `amount` whole tokens of a declared limit back (an adjustment of `-amount`).
    ///
    /// # Errors
    /// As [`Lease::adjust`].
    pub fn give_back(&self, limit: &str, amount: i64) -> Result<(), Error> {
        self.adjust(limit, amount.saturating_neg())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Takes the lease's pending work, marking it settled first (a failure part-way never
    /// triggers a rollback on top of landed writes).
    fn settle(&self) -> Option<BTreeMap<String, i64>> {
        let mut state = self.lock();
        if state.settled {
            return None;
        }
        state.settled = true;
        Some(std::mem::take(&mut state.adjustments))
    }

    /// Writes the adjustments: one `UpdateItem` per debited bucket that declares an adjusted
    /// limit, each conditioned on the item still existing (a swept bucket is skipped, never
    /// resurrected); nothing is sent when nothing was adjusted. Slots the lease holds are
    /// given back after them. The writes run in the awaiting task and finish even if this future
    /// is dropped part-way (the rest then runs on a task of its own).
    ///
    /// # Errors
    /// [`Error::LeaseWrite`] when a write fails; the other buckets are still written and
    /// nothing is rolled back.
    pub async fn commit(mut self) -> Result<(), Error> {
        // The further leases have none of their own: no recursion.
        let mut result = self.commit_own().await;
        for (_, mut lease) in std::mem::take(&mut self.also) {
            result = result.and(lease.commit_own().await);
        }
        result.and(self.release_slots().await)
    }

    async fn commit_own(&mut self) -> Result<(), Error> {
        let span = tracing::debug_span!("dynalimit.lease", kind = "commit");
        let written = tracing::Instrument::instrument(self.commit_unrecorded(), span).await;
        if self.inner.is_some() {
            crate::metrics::record_lease_write("commit", written.is_ok());
        }
        written
    }

    async fn commit_unrecorded(&mut self) -> Result<(), Error> {
        let Some(adjustments) = self.settle() else {
            return Ok(());
        };
        // Nothing adjusted: every debit stands as written, and there is nothing to send.
        if adjustments.values().all(|d| *d == 0) {
            return Ok(());
        }
        let Some(inner) = self.inner.clone() else {
            return Ok(());
        };
        let entries = std::mem::take(&mut self.entries);
        let watch = CutShort::new("the commit of a lease", &entries);
        detached(inner, move |inner| async move {
            let written = write_all(&inner, &entries, |entry| {
                entry
                    .consumed()
                    .keys()
                    .filter_map(|n| Some((n.clone(), *adjustments.get(n)?)))
                    .collect()
            })
            .await;
            watch.finished();
            written
        })
        .await
    }

    /// Gives back the initial consumption and discards the adjustments. The credits run in the
    /// awaiting task and finish even if this future is dropped part-way (the rest then runs on
    /// a task of its own).
    ///
    /// # Errors
    /// [`Error::LeaseWrite`] when a credit fails; the other credits are still written.
    pub async fn rollback(mut self) -> Result<(), Error> {
        let mut result = self.rollback_own().await;
        for (_, mut lease) in std::mem::take(&mut self.also) {
            result = result.and(lease.rollback_own().await);
        }
        result.and(self.release_slots().await)
    }

    async fn rollback_own(&mut self) -> Result<(), Error> {
        let span = tracing::debug_span!("dynalimit.lease", kind = "rollback");
        let written = tracing::Instrument::instrument(self.rollback_unrecorded(), span).await;
        if self.inner.is_some() {
            crate::metrics::record_lease_write("rollback", written.is_ok());
        }
        written
    }

    async fn rollback_unrecorded(&mut self) -> Result<(), Error> {
        if self.settle().is_none() {
            return Ok(());
        }
        let Some(inner) = self.inner.clone() else {
            return Ok(());
        };
        let entries = std::mem::take(&mut self.entries);
        let watch = CutShort::new("the rollback of a lease", &entries);
        detached(inner, move |inner| async move {
            let written = rollback_entries(&inner, &entries).await;
            watch.finished();
            written
        })
        .await
    }

    /// Runs `work` under the lease: commits when it returns `Ok`, rolls back when it returns
    /// `Err` (and when it panics or is cancelled, through the drop rollback).
    ///
    /// # Errors
    /// The work's error, or the commit's converted with `From<Error>`.
    pub async fn run<T, E, F>(self, work: F) -> Result<T, E>
    where
        F: Future<Output = Result<T, E>>,
        E: From<Error>,
    {
        match work.await {
            Ok(value) => {
                self.commit().await?;
                Ok(value)
            }
            Err(e) => {
                if let Err(rollback) = self.rollback().await {
                    tracing::warn!(error = %rollback, "rollback after failed work did not complete");
                }
                Err(e)
            }
        }
    }
}

/// Limit `name`'s status on `entry`'s shard after its debit of `consumed` millitokens and the
/// adjustments recorded in `state`.
fn status_after(
    entry: &Entry,
    name: &str,
    consumed: i64,
    state: &State,
    now: i64,
) -> Option<LimitStatus> {
    let adjusted = state.adjustments.get(name).copied().unwrap_or(0);
    entry.status_after(name, consumed, adjusted, now)
}

/// Runs lease writes counted by [`RateLimiter::settle`](super::RateLimiter::settle), in the
/// awaiting task; dropping the awaiting future part-way hands the rest to the runtime, so the
/// writes are not cut short.
async fn detached<F, Fut>(inner: Arc<Inner>, work: F) -> Result<(), Error>
where
    F: FnOnce(Arc<Inner>) -> Fut + Send + 'static,
    Fut: Future<Output = Result<(), Error>> + Send + 'static,
{
    let pending = Pending::new(&inner);
    Detach::new("a lease's writes", async move {
        let result = work(inner).await;
        drop(pending);
        result
    })
    .await
}

/// Reports lease writes that never finished because their task was dropped: a runtime
/// shutting down drops the tasks it has not finished (or not yet started), and with them these
/// writes. The drop logs an `error` event naming the buckets whose tokens stay consumed
/// (refill returns them over time); [`CutShort::finished`] disarms it.
#[derive(Debug)]
struct CutShort {
    what: &'static str,
    owners: String,
    armed: bool,
}

impl CutShort {
    fn new(what: &'static str, entries: &[Entry]) -> Self {
        CutShort {
            what,
            owners: owners(entries),
            armed: true,
        }
    }

    fn finished(mut self) {
        self.armed = false;
    }
}

impl Drop for CutShort {
    fn drop(&mut self) {
        if self.armed {
            tracing::error!(
                owners = %self.owners,
                "{} was cut short (the runtime shut down); its tokens stay consumed until refill",
                self.what
            );
        }
    }
}

/// `entity/resource: name=millitokens, …; …` for log lines.
fn owners(entries: &[Entry]) -> String {
    entries
        .iter()
        .map(|e| {
            let consumed: Vec<String> = e
                .consumed()
                .iter()
                .map(|(n, c)| format!("{n}={c}"))
                .collect();
            format!(
                "{}/{}: {}",
                e.key().entity_id,
                e.key().resource,
                consumed.join(", ")
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

async fn write_all(
    inner: &Inner,
    entries: &[Entry],
    net_of: impl Fn(&Entry) -> BTreeMap<String, i64>,
) -> Result<(), Error> {
    let mut first_error = None;
    for entry in entries {
        let net = net_of(entry);
        if net.values().all(|d| *d == 0) {
            continue;
        }
        if let Err(e) = inner.engine.credit(entry, &net).await {
            tracing::warn!(
                entity_id = %entry.key().entity_id, resource = %entry.key().resource, error = %e,
                "lease write failed"
            );
            first_error.get_or_insert(e);
        }
    }
    first_error.map_or(Ok(()), |e| Err(Error::LeaseWrite(e)))
}

/// A lease's net adjustment of one limit (millitokens) after one more `delta` whole tokens:
/// each step and the sum stay within ±10^15 tokens, so the credit and debit arithmetic of the
/// commit (consumption plus adjustment, ceiling minus credit) cannot overflow.
fn accumulate(total: i64, delta: i64) -> Result<i64, Error> {
    let milli = delta_to_milli("delta", delta)?;
    total
        .checked_add(milli)
        .filter(|sum| sum.unsigned_abs() <= MAX_TOKENS.unsigned_abs() * MILLI.unsigned_abs())
        .ok_or_else(|| {
            CoreError::invalid_value(
                "delta",
                delta,
                format!("the lease's net adjustment must stay within ±{MAX_TOKENS} tokens"),
            )
            .into()
        })
}

async fn rollback_entries(inner: &Inner, entries: &[Entry]) -> Result<(), Error> {
    write_all(inner, entries, |entry| {
        entry
            .consumed()
            .iter()
            .map(|(n, c)| (n.clone(), -c))
            .collect()
    })
    .await
}

impl Drop for Lease {
    fn drop(&mut self) {
        if self.settle().is_none() {
            return;
        }
        let Some(inner) = self.inner.clone() else {
            return;
        };
        let entries = std::mem::take(&mut self.entries);
        if entries
            .iter()
            .all(|e| e.consumed().values().all(|c| *c == 0))
        {
            return;
        }
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                let pending = Pending::new(&inner);
                let watch = CutShort::new("the rollback of a dropped lease", &entries);
                handle.spawn(async move {
                    if let Err(e) = rollback_entries(&inner, &entries).await {
                        tracing::warn!(error = %e, "rollback of a dropped lease failed");
                    }
                    watch.finished();
                    drop(pending);
                });
            }
            Err(_) => tracing::error!(
                owners = %owners(&entries),
                "lease dropped outside a Tokio runtime; its consumption cannot be given back"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adjustments_accumulate_within_the_token_bound_and_never_wrap() {
        let max = MAX_TOKENS * MILLI;
        assert_eq!(accumulate(0, 5).unwrap(), 5000);
        assert_eq!(accumulate(5000, -7).unwrap(), -2000);
        assert_eq!(accumulate(0, MAX_TOKENS).unwrap(), max);
        assert_eq!(accumulate(0, -MAX_TOKENS).unwrap(), -max);
        // One step beyond the bound, a delta of i64::MIN, and sums past the bound either way.
        for (total, delta) in [
            (0, MAX_TOKENS + 1),
            (0, i64::MIN),
            (0, i64::MAX),
            (max, 1),
            (-max, -1),
            (-max, -MAX_TOKENS),
            (i64::MIN, -1),
        ] {
            let err = accumulate(total, delta).unwrap_err();
            assert!(matches!(err, Error::Invalid(_)), "{total} + {delta}: {err}");
        }
    }
}
