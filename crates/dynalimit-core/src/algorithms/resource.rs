//! A counted resource: at most `capacity` units held at once.

/// How many units of a resource are held, out of a fixed capacity (a counting semaphore without
/// the waiting, which the LimitSet provides). No time component.
///
/// ```
/// use dynalimit_core::algorithms::ResourceCounter;
///
/// let mut connections = ResourceCounter::new(4);
/// connections.take(3);
/// assert!(!connections.fits(2));
/// assert!(connections.fits(1));
/// connections.give_back(3);
/// assert_eq!(connections.usage(), 0);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceCounter {
    capacity: u64,
    usage: u64,
}

impl ResourceCounter {
    /// A resource with nothing held. The LimitSet only builds it with `capacity >= 1`.
    #[inline]
    pub fn new(capacity: u64) -> Self {
        ResourceCounter { capacity, usage: 0 }
    }

    /// The capacity.
    #[inline]
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Units held now.
    #[inline]
    pub fn usage(&self) -> u64 {
        self.usage
    }

    /// Units that could be taken now.
    #[inline]
    pub fn available(&self) -> u64 {
        self.capacity.saturating_sub(self.usage)
    }

    /// Whether `amount` more units could be held.
    #[inline]
    pub fn fits(&self, amount: u64) -> bool {
        amount <= self.available()
    }

    /// Holds `amount` more units; call only after [`ResourceCounter::fits`] answered true.
    #[inline]
    pub fn take(&mut self, amount: u64) {
        self.usage += amount;
    }

    /// Returns `amount` held units (never below zero).
    #[inline]
    pub fn give_back(&mut self, amount: u64) {
        self.usage = self.usage.saturating_sub(amount);
    }

    /// `usage / capacity`.
    #[inline]
    pub fn utilization(&self) -> f64 {
        self.usage as f64 / self.capacity as f64
    }
}
