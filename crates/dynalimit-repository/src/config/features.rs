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
    pub fn may_store_concurrency(&self) -> bool {
        let now = self.shared.clock.epoch_millis();
        self.scope
            .config
            .features(now)
            .is_none_or(|f| f.concurrency)
    }

    /// Whether limiters report their refusals in this namespace: false only when its features
    /// item was read without a refusal alert within the cache's time-to-live (no request is
    /// sent).
    pub fn may_report_refusals(&self) -> bool {
        let now = self.shared.clock.epoch_millis();
        self.scope
            .config
            .features(now)
            .is_none_or(|f| f.refusal_alerts)
    }

    /// Whether some entity of the namespace has a refusal alert, so that limiters report the
    /// minutes they refuse in: the namespace's features item, through the cache.
    ///
    /// # Errors
    /// The classified failure of the read.
    pub async fn reports_refusals(&self) -> Result<bool, RepositoryError> {
        Ok(self.features().await?.refusal_alerts)
    }

    /// The features the namespace uses, through the cache: its features item is read at
    /// most once per configuration cache time-to-live, and at least a second apart.
    pub(crate) async fn features(&self) -> Result<Features, RepositoryError> {
        let now = self.shared.clock.epoch_millis();
        if let Some(known) = self.scope.config.features(now) {
            return Ok(known);
        }
        let key = config::features_key(&self.scope.id);
        let found = get_item(&self.shared.client, &self.shared.table, key, false).await?;
        let features = Features::of(found.as_ref());
        self.scope.config.remember_features(features, now);
        Ok(features)
    }

    /// Marks `feature` in use in the namespace's features item (before what uses it is
    /// stored, so that no reader misses it).
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
