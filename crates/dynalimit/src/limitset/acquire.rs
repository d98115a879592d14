//! How a [`LimitSet`] hands out an [`Acquisition`]: at once, after an asynchronous wait, or
//! after parking the thread, always in the order of its wait queue.

use std::time::Duration;

use super::acquisition::Acquisition;
use super::backing::{Backing, Outcome, SyncBacking};
use super::set::{LimitSet, Plan};
use crate::{Error, Rejection};

impl<B: Backing> LimitSet<B> {
    /// Waits for `plan` asynchronously; `timeout` bounds the wait.
    pub(crate) async fn wait_async(
        &self,
        plan: Plan,
        timeout: Option<Duration>,
    ) -> Result<Acquisition<'_, B>, Error> {
        let shared = &*self.shared;
        if plan.is_empty() {
            return Ok(Acquisition::new(self, plan, None));
        }
        let start = shared.clock.monotonic();
        let deadline = Deadline::new(start, timeout);
        if shared.queue.is_empty() {
            if let Outcome::Granted(ticket) = shared.backing.take(&plan, start).await? {
                return Ok(Acquisition::new(self, plan, Some(ticket)));
            }
            deadline.check(start)?;
        }
        let slot = shared.queue.join_async();
        loop {
            let now = shared.clock.monotonic();
            let mut wake_at = deadline.at;
            if slot.is_head() {
                match shared.backing.take(&plan, now).await? {
                    Outcome::Granted(ticket) => {
                        drop(slot);
                        return Ok(Acquisition::new(self, plan, Some(ticket)));
                    }
                    Outcome::Rejected { retry_at } => wake_at = deadline.or_earlier(retry_at),
                }
            }
            deadline.check(now)?;
            if slot.waiter().take_woken() {
                continue;
            }
            match wake_at {
                Some(at) => {
                    tokio::select! {
                        () = slot.waiter().woken() => {}
                        () = shared.clock.sleep_until(at) => {}
                    }
                }
                None => slot.waiter().woken().await,
            }
        }
    }

    /// One attempt at `plan` through the backing's async take, respecting the queue; `None`
    /// when refused.
    pub(crate) async fn attempt(&self, plan: &Plan) -> Result<Option<Acquisition<'_, B>>, Error> {
        let shared = &*self.shared;
        if plan.is_empty() {
            return Ok(Some(Acquisition::new(self, plan.clone(), None)));
        }
        if !shared.queue.is_empty() {
            return Ok(None);
        }
        Ok(
            match shared.backing.take(plan, shared.clock.monotonic()).await? {
                Outcome::Granted(ticket) => {
                    Some(Acquisition::new(self, plan.clone(), Some(ticket)))
                }
                Outcome::Rejected { .. } => None,
            },
        )
    }

    /// Acquires `request`, waiting asynchronously as long as needed.
    ///
    /// # Errors
    /// Request errors (see the type's documentation) before any waiting; backing failures.
    pub async fn acquire<K, A>(
        &self,
        request: impl IntoIterator<Item = (K, A)>,
    ) -> Result<Acquisition<'_, B>, Error>
    where
        K: AsRef<str>,
        A: Into<f64>,
    {
        let plan = self.plan(request)?;
        self.wait_async(plan, None).await
    }

    /// Acquires `request`, waiting asynchronously at most `timeout` (zero: one attempt).
    ///
    /// # Errors
    /// [`Error::Timeout`] when the limits could not be taken in time; request errors before any
    /// waiting.
    pub async fn acquire_timeout<K, A>(
        &self,
        request: impl IntoIterator<Item = (K, A)>,
        timeout: Duration,
    ) -> Result<Acquisition<'_, B>, Error>
    where
        K: AsRef<str>,
        A: Into<f64>,
    {
        let plan = self.plan(request)?;
        self.wait_async(plan, Some(timeout)).await
    }
}

impl<B: SyncBacking> LimitSet<B> {
    /// Takes `plan` now or refuses, respecting the queue. A granted plan moves into the
    /// acquisition (leaving `plan` empty); a refused one stays.
    ///
    /// Taking the plan by reference keeps it where the caller just wrote it until the backing
    /// has answered: copying it at once would read the amounts back before their writes
    /// retired, a costly stall of the processor's store forwarding.
    #[inline]
    pub(crate) fn try_plan(
        &self,
        plan: &mut Plan,
    ) -> Result<Result<Acquisition<'_, B>, Rejection>, Error> {
        if plan.is_empty() {
            return Ok(Ok(Acquisition::new(self, Plan::new(), None)));
        }
        let shared = &*self.shared;
        if !shared.queue.is_empty() {
            return Ok(Err(self.rejected(plan, None)));
        }
        match shared.backing.take_now(plan, self.now_for(plan))? {
            Outcome::Granted(ticket) => Ok(Ok(Acquisition::new(
                self,
                std::mem::take(plan),
                Some(ticket),
            ))),
            Outcome::Rejected { retry_at } => Ok(Err(self.rejected(plan, retry_at))),
        }
    }

    /// Takes `request` now, or returns why not; never waits.
    ///
    /// # Errors
    /// [`Error::Rejected`] when the limits cannot take the request now (nothing is held);
    /// request errors (see the type's documentation).
    #[inline]
    pub fn try_acquire<K, A>(
        &self,
        request: impl IntoIterator<Item = (K, A)>,
    ) -> Result<Acquisition<'_, B>, Error>
    where
        K: AsRef<str>,
        A: Into<f64>,
    {
        let mut plan = Plan::new();
        self.plan_into(request, &mut plan)?;
        Ok(self.try_plan(&mut plan)??)
    }

    /// Waits for `plan` on this thread; `timeout` bounds the wait.
    pub(crate) fn wait_blocking(
        &self,
        plan: Plan,
        timeout: Option<Duration>,
    ) -> Result<Acquisition<'_, B>, Error> {
        let shared = &*self.shared;
        if plan.is_empty() {
            return Ok(Acquisition::new(self, plan, None));
        }
        let start = shared.clock.monotonic();
        let deadline = Deadline::new(start, timeout);
        if shared.queue.is_empty() {
            if let Outcome::Granted(ticket) = shared.backing.take_now(&plan, start)? {
                return Ok(Acquisition::new(self, plan, Some(ticket)));
            }
            deadline.check(start)?;
        }
        let slot = shared.queue.join_blocking();
        loop {
            let now = shared.clock.monotonic();
            let mut wake_at = deadline.at;
            if slot.is_head() {
                match shared.backing.take_now(&plan, now)? {
                    Outcome::Granted(ticket) => {
                        drop(slot);
                        return Ok(Acquisition::new(self, plan, Some(ticket)));
                    }
                    Outcome::Rejected { retry_at } => wake_at = deadline.or_earlier(retry_at),
                }
            }
            deadline.check(now)?;
            if !slot.waiter().take_woken() {
                shared.clock.park(wake_at);
            }
        }
    }

    /// Acquires `request`, parking the thread at most `timeout` (none: as long as needed;
    /// zero: one attempt). The form a service calls is [`crate::blocking::LimitSet`].
    pub(crate) fn acquire_parked<K, A>(
        &self,
        request: impl IntoIterator<Item = (K, A)>,
        timeout: Option<Duration>,
    ) -> Result<Acquisition<'_, B>, Error>
    where
        K: AsRef<str>,
        A: Into<f64>,
    {
        let plan = self.plan(request)?;
        self.wait_blocking(plan, timeout)
    }
}

/// The end of one waiting acquire's timeout, on the set's clock.
#[derive(Debug, Clone, Copy)]
struct Deadline {
    at: Option<Duration>,
    timeout: Option<Duration>,
}

impl Deadline {
    fn new(start: Duration, timeout: Option<Duration>) -> Self {
        Deadline {
            at: timeout.map(|t| start.saturating_add(t)),
            timeout,
        }
    }

    /// [`Error::Timeout`] once `now` has reached the deadline (checked after each attempt, so
    /// a zero timeout still makes one attempt).
    fn check(self, now: Duration) -> Result<(), Error> {
        match (self.at, self.timeout) {
            (Some(at), Some(timeout)) if now >= at => Err(Error::Timeout { timeout }),
            _ => Ok(()),
        }
    }

    /// When a refused head of the queue wakes: at `retry_at`, or at the deadline if sooner.
    fn or_earlier(self, retry_at: Option<Duration>) -> Option<Duration> {
        match (retry_at, self.at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}
