//! Work that finishes even when its caller stops waiting, without a task of its own while the
//! caller waits.
//!
//! An acquire, a commit or a rollback may have a write in flight when the future awaiting it is
//! dropped (a timeout around `acquire(..).await`, a cancelled request handler). The write must
//! not be abandoned half-way: an acquire whose debit landed must end in a rollback, a commit
//! must land or fail. [`Detach`] polls the work in the caller's own task, so the common case
//! costs no spawned task and no wake-up of another worker thread; only when it is dropped
//! after it started and before it finished is the rest handed to the runtime, which drives it
//! to the end (its output, a lease among them, is then dropped there, which rolls the lease
//! back).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// A future polled in place that, dropped half-way, finishes on the current Tokio runtime.
///
/// Dropped before its first poll, nothing of the work has run and it is dropped with it.
/// Dropped outside a runtime after it started, the rest cannot run: `what` is logged at
/// `error` level.
pub(crate) struct Detach<F: Future + Send + 'static>
where
    F::Output: Send + 'static,
{
    work: Option<Pin<Box<F>>>,
    started: bool,
    what: &'static str,
}

impl<F: Future + Send + 'static> Detach<F>
where
    F::Output: Send + 'static,
{
    /// `work`, to be polled by whoever awaits this future; `what` names it in the log.
    pub(crate) fn new(what: &'static str, work: F) -> Self {
        Detach {
            work: Some(Box::pin(work)),
            started: false,
            what,
        }
    }
}

impl<F: Future + Send + 'static> Future for Detach<F>
where
    F::Output: Send + 'static,
{
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = &mut *self;
        let Some(work) = this.work.as_mut() else {
            panic!("`Detach` polled after it completed");
        };
        this.started = true;
        let out = work.as_mut().poll(cx);
        if out.is_ready() {
            this.work = None;
        }
        out
    }
}

impl<F: Future + Send + 'static> Drop for Detach<F>
where
    F::Output: Send + 'static,
{
    fn drop(&mut self) {
        let Some(work) = self.work.take() else {
            return;
        };
        if !self.started {
            return;
        }
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                handle.spawn(async move {
                    drop(work.await);
                });
            }
            Err(_) => tracing::error!(
                work = self.what,
                "dropped outside a Tokio runtime while in flight; it cannot finish, and what it \
                 consumed stays consumed until refill returns it"
            ),
        }
    }
}

impl<F: Future + Send + 'static> std::fmt::Debug for Detach<F>
where
    F::Output: Send + 'static,
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Detach")
            .field("what", &self.what)
            .field("started", &self.started)
            .field("finished", &self.work.is_none())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};
    use tokio::sync::oneshot;

    /// Work that counts its steps: one before the gate opens, one after.
    async fn work(steps: Arc<AtomicU32>, gate: oneshot::Receiver<()>) {
        steps.fetch_add(1, Ordering::SeqCst);
        let _ = gate.await;
        steps.fetch_add(1, Ordering::SeqCst);
    }

    #[tokio::test]
    async fn awaited_work_runs_in_the_caller_s_task() {
        let steps = Arc::new(AtomicU32::new(0));
        let (open, gate) = oneshot::channel();
        open.send(()).unwrap();
        let id = tokio::task::try_id();
        let seen = Detach::new("test", async move {
            let inner = tokio::task::try_id();
            work(steps.clone(), gate).await;
            (inner, steps.load(Ordering::SeqCst))
        })
        .await;
        assert_eq!(seen, (id, 2));
    }

    #[tokio::test]
    async fn work_dropped_half_way_finishes_on_the_runtime() {
        let steps = Arc::new(AtomicU32::new(0));
        let (open, gate) = oneshot::channel();
        let mut d = Box::pin(Detach::new("test", work(steps.clone(), gate)));
        // One poll: the first step runs, then the work waits for the gate.
        assert!(futures::poll!(d.as_mut()).is_pending());
        assert_eq!(steps.load(Ordering::SeqCst), 1);
        drop(d);
        open.send(()).unwrap();
        for _ in 0..100 {
            if steps.load(Ordering::SeqCst) == 2 {
                break;
            }
            tokio::task::yield_now().await;
        }
        assert_eq!(steps.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn work_dropped_before_its_first_poll_never_runs() {
        let steps = Arc::new(AtomicU32::new(0));
        let (open, gate) = oneshot::channel();
        drop(Detach::new("test", work(steps.clone(), gate)));
        // The gate's sender sees its receiver gone: the work was dropped, not spawned.
        assert!(open.send(()).is_err());
        tokio::task::yield_now().await;
        assert_eq!(steps.load(Ordering::SeqCst), 0);
    }
}
