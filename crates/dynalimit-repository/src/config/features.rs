//! The namespace's features item (`#FEATURES`): which of dynalimit's own features that cost
//! every process requests are in use, read once per configuration cache time-to-live, so that
//! a namespace that never used one pays nothing for it.

use dynalimit_format::config::{self, Feature, Features};
use dynalimit_format::expr::WithExpr;

use crate::batch::get_item;
use crate::error::classify;
use crate::{Repository, RepositoryError};

impl Repository {
    /// Whether the namespace may store concurrency limits: false only when its features item
    /// was read without them within the cache's time-to-live (no request is sent).
    #[doc(hidden)] // for dynalimit's limiter, benchmarks and tests: not part of the API
    pub fn may_store_concurrency(&self) -> bool {
        self.known_features().is_none_or(|f| f.concurrency)
    }

    /// Whether limiters report their refusals in this namespace: false only when its features
    /// item was read without a refusal alert within the cache's time-to-live (no request is
    /// sent).
    #[doc(hidden)] // for dynalimit's limiter, benchmarks and tests: not part of the API
    pub fn may_report_refusals(&self) -> bool {
        self.known_features().is_none_or(|f| f.refusal_alerts)
    }

    /// The features item as read within the cache's time-to-live, if it was.
    fn known_features(&self) -> Option<Features> {
        self.scope.config.features(self.shared.clock.epoch_millis())
    }

    /// Whether some entity of the namespace has a refusal alert, so that limiters report the
    /// minutes they refuse in: the namespace's features item, through the cache.
    ///
    /// # Errors
    /// The classified failure of the read.
    #[doc(hidden)] // for dynalimit's limiter, benchmarks and tests: not part of the API
    pub async fn reports_refusals(&self) -> Result<bool, RepositoryError> {
        Ok(self.features().await?.refusal_alerts)
    }

    /// The features the namespace uses, through the cache: its features item is read at
    /// most once per configuration cache time-to-live, and at least a second apart.
    pub(crate) async fn features(&self) -> Result<Features, RepositoryError> {
        if let Some(known) = self.known_features() {
            return Ok(known);
        }
        let now = self.shared.clock.epoch_millis();
        let key = config::features_key(&self.scope.id);
        let found = get_item(&self.shared.client, &self.shared.table, key, false).await?;
        let features = Features::of(found.as_ref());
        self.scope.config.remember_features(features, now);
        Ok(features)
    }

    /// Marks `feature` in use in the namespace's features item (before what uses it is
    /// stored, so that no reader misses it). Every value it sets is set only where absent, so
    /// the SDK sends it again after a lost answer and a second landing changes nothing (test
    /// `suite::concurrency::a_lost_answer_to_a_level_write_is_sent_again_and_leaves_the_same_item`).
    pub(crate) async fn mark_feature(&self, feature: Feature) -> Result<(), RepositoryError> {
        let now = self.shared.clock.epoch_millis();
        let e = config::feature_write(&self.scope.id, feature, now);
        self.shared
            .client
            .update_item()
            .table_name(&self.shared.table)
            .set_key(Some(config::features_key(&self.scope.id)))
            .with_expr(&e)
            .send()
            .await
            .map_err(|err| classify("UpdateItem", err))?;
        // What else is in use is known only if it was read.
        match self.scope.config.features(now) {
            Some(known) => self
                .scope
                .config
                .remember_features(known.with(feature), now),
            None => self.scope.config.forget_features(),
        }
        Ok(())
    }
}
