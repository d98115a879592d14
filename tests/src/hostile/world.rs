//! A valid world, as dynalimit's own writers store it, for hostile cases to start from.

use std::collections::{BTreeMap, HashMap};

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue;
use dynalimit_core::Limit;
use dynalimit_core::operation::OperationKind;
use dynalimit_core::schedule::{Entry, Schedule, Zone};
use dynalimit_format::audit::{AuditAction, NewAuditEvent, limits_details};
use dynalimit_format::bucket::{BucketKey, Owner, create_item};
use dynalimit_format::config::{Slot, level_item};
use dynalimit_format::entity::NewEntity;
use dynalimit_format::expr::WithExpr;
use dynalimit_format::item::{self, Item};
use dynalimit_format::operation::NewRecord;
use dynalimit_format::usage::{SnapshotDelta, SnapshotWindow, watermark_update};
use dynalimit_format::{attr, namespace, version};
use dynalimit_repository::bucket::decide::{Plan, Stamps, plan_create};

use super::{CHILD, PARENT, RESOURCE};

/// What a limit of the world is, besides its numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// Drips `refill` tokens every `period_s`.
    Drip,
    /// Drips, at half its values on weekdays' office hours (UTC).
    Scheduled,
    /// Drips, soft (debited, never refuses).
    Soft,
    /// A calendar quota of `capacity` a day.
    DailyQuota,
    /// A session quota of `capacity` per `period_s` window.
    Session,
}

/// One limit of the world.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitSpec {
    /// Its name.
    pub name: String,
    /// Capacity, whole tokens.
    pub capacity: i64,
    /// Refill amount, whole tokens.
    pub refill: i64,
    /// Refill period (or session window), seconds.
    pub period_s: i64,
    /// Its shape.
    pub shape: Shape,
}

impl LimitSpec {
    /// The limit.
    pub fn limit(&self) -> Limit {
        let drip = Limit::custom(&self.name, self.capacity, self.refill, self.period_s);
        match self.shape {
            Shape::Drip => drip,
            Shape::Soft => drip.soft(),
            Shape::Scheduled => {
                let entry = Entry::scaled("0 9-17 * * 1-5", 0.5).expect("a valid entry");
                drip.with_schedule(Schedule::new(Zone::utc(), vec![entry]).expect("a schedule"))
            }
            Shape::DailyQuota => Limit::quota_per_day(&self.name, self.capacity, Zone::utc()),
            Shape::Session => Limit::session_quota(&self.name, self.capacity, self.period_s),
        }
    }
}

/// The configuration level holding the world's limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// The child on the resource.
    EntityResource,
    /// The child on every resource (`_default_`).
    EntityDefault,
    /// Every entity on the resource.
    Resource,
    /// The namespace-wide default.
    System,
}

impl Level {
    /// The slot of this level for the world's child and resource.
    pub fn slot(self) -> Slot {
        match self {
            Level::EntityResource => Slot::Entity(CHILD.into(), RESOURCE.into()),
            Level::EntityDefault => Slot::Entity(CHILD.into(), "_default_".into()),
            Level::Resource => Slot::Resource(RESOURCE.into()),
            Level::System => Slot::System,
        }
    }
}

/// A valid world: limits (the first is the one the suite consumes, a plain dripping limit),
/// where they are configured, how many shards the child's bucket has, whether the child
/// cascades to its parent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blueprint {
    /// The limits; the first drips and is the one acquires consume.
    pub limits: Vec<LimitSpec>,
    /// The configuration level.
    pub level: Level,
    /// Shards of the child's bucket (1..=4), each stored.
    pub shards: u32,
    /// Whether the child's acquires also debit its parent.
    pub cascade: bool,
}

impl Blueprint {
    /// The limits, as [`Limit`]s.
    pub fn limits(&self) -> Vec<Limit> {
        self.limits.iter().map(LimitSpec::limit).collect()
    }

    /// The name of the limit acquires consume.
    pub fn consumed(&self) -> &str {
        &self.limits[0].name
    }
}

/// What an item of the world is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    /// The table's version record.
    Version,
    /// The namespace registry's forward record.
    NamespaceForward,
    /// The namespace registry's reverse record.
    NamespaceReverse,
    /// The configuration level holding the limits.
    Config,
    /// The system level's `on_unavailable`.
    SystemConfig,
    /// An entity's META.
    Meta(&'static str),
    /// One shard of an entity's bucket on the resource.
    Bucket(&'static str, u32),
    /// A reset's operation record.
    Operation,
    /// An audit event of the child.
    Audit,
    /// The child's hourly usage snapshot.
    Snapshot,
    /// The aggregator's watermark of the child's shard 0.
    Watermark,
    /// The registry of resources with defaults.
    ResourcesRegistry,
    /// The registry of resources with entity configurations.
    EntityConfigRegistry,
    /// An item zae-limiter 0.17 writes, by what it is.
    Zae(&'static str),
}

/// The instant the world was written, a minute before the case starts.
pub const WRITTEN_AT: i64 = super::T0 - 60_000;

/// Stores the world of `bp` in namespace `ns` (its id) of `table`, through the format's
/// writers: puts for items, the writers' update expressions for the snapshot, the watermark
/// and the registries. Returns every item as stored (read back), with the version record and
/// the namespace records the repository wrote when it opened.
///
/// # Panics
/// When the store refuses one of these valid writes.
pub async fn store(client: &Client, table: &str, ns: &str, bp: &Blueprint) -> Vec<(Role, Item)> {
    let limits = bp.limits();
    let mut puts: Vec<(Role, Item)> = Vec::new();
    let slot = bp.level.slot();
    puts.push((Role::Config, level_item(ns, &slot, &limits, None, None)));
    if bp.level != Level::System {
        let system = level_item(
            ns,
            &Slot::System,
            &[],
            None,
            Some(dynalimit_format::config::OnUnavailable::Block),
        );
        puts.push((Role::SystemConfig, system));
    }
    let parent = NewEntity::new(PARENT).name("the parent");
    puts.push((
        Role::Meta(PARENT),
        parent.meta_item(ns, WRITTEN_AT - 1, "00000000000000a1"),
    ));
    let child = NewEntity::new(CHILD)
        .parent(PARENT)
        .cascade(bp.cascade)
        .metadata("tier", "gold");
    puts.push((
        Role::Meta(CHILD),
        child.meta_item(ns, WRITTEN_AT, "00000000000000c1"),
    ));
    let owner = Owner {
        cascade: bp.cascade,
        parent_id: Some(PARENT.into()),
        pgen: Some(WRITTEN_AT),
        pinc: Some("00000000000000c1".into()),
    };
    for shard in 0..bp.shards {
        let key = BucketKey::new(CHILD, RESOURCE, shard);
        puts.push((
            Role::Bucket(CHILD, shard),
            bucket(ns, &key, &limits, bp.shards, &owner),
        ));
    }
    let key = BucketKey::new(PARENT, RESOURCE, 0);
    puts.push((
        Role::Bucket(PARENT, 0),
        bucket(ns, &key, &limits, 1, &Owner::default()),
    ));
    let amounts: BTreeMap<String, i64> = bp
        .limits
        .iter()
        .map(|l| (l.name.clone(), l.capacity))
        .collect();
    let record = NewRecord {
        entity_id: CHILD,
        resource: RESOURCE,
        operation_id: "ticket-1",
        kind: OperationKind::Reset,
        writer: "w-0001",
        incarnation: "00000000000000c1",
        shards: bp.shards,
        amounts: &amounts,
        at: WRITTEN_AT,
    };
    puts.push((Role::Operation, record.into_item(ns)));
    let event = NewAuditEvent {
        entity_id: CHILD,
        event_id: "01HF0000000000000000000000",
        at: WRITTEN_AT,
        action: AuditAction::LimitsSet,
        principal: Some("arn:aws:iam::123456789012:user/ops"),
        resource: Some(RESOURCE),
        details: HashMap::from([(
            dynalimit_format::audit::LIMITS_DETAIL.to_owned(),
            limits_details(&limits),
        )]),
        retention_days: 90,
    };
    puts.push((Role::Audit, event.into_item(ns)));
    for (_, item) in &puts {
        client
            .put_item()
            .table_name(table)
            .set_item(Some(item.clone()))
            .send()
            .await
            .unwrap_or_else(|e| panic!("the world's put of {}: {e:?}", item::describe_key(item)));
    }
    let mut keys: Vec<(Role, Item)> = puts
        .iter()
        .map(|(role, item)| (role.clone(), item::key_map_of(item).expect("a key")))
        .collect();
    keys.extend(updated(client, table, ns, bp).await);
    keys.push((Role::Version, version::record_key()));
    keys.push((
        Role::NamespaceForward,
        namespace::forward_key(super::NAMESPACE),
    ));
    keys.push((Role::NamespaceReverse, namespace::reverse_key(ns)));
    let mut stored = Vec::new();
    for (role, key) in keys {
        let found = client
            .get_item()
            .table_name(table)
            .set_key(Some(key))
            .consistent_read(true)
            .send()
            .await
            .expect("read the world back");
        stored.push((role, found.item.expect("a stored item")));
    }
    stored
}

/// Shard `key.shard` of a bucket of `count` shards holding `limits`, created full (shard 0)
/// or empty (the others), as the slow path creates them.
fn bucket(ns: &str, key: &BucketKey, limits: &[Limit], count: u32, owner: &Owner) -> Item {
    let plan = plan_create(
        limits,
        &BTreeMap::new(),
        count,
        key.shard,
        WRITTEN_AT,
        None,
        &Stamps::default(),
    );
    let Plan::Write(plan) = plan else {
        panic!("a create with no demand is always written: {plan:?}")
    };
    create_item(ns, key, &plan, owner)
}

/// The items the format writes with update expressions: the child's snapshot, the watermark
/// of its shard 0 and the two registries. Returns their keys.
async fn updated(client: &Client, table: &str, ns: &str, bp: &Blueprint) -> Vec<(Role, Item)> {
    let counters: BTreeMap<String, i64> = bp.limits.iter().map(|l| (l.name.clone(), 3)).collect();
    let overdrawn = BTreeMap::new();
    let window_key = SnapshotWindow::Hourly.key(WRITTEN_AT);
    let snapshot = SnapshotDelta {
        namespace_id: ns,
        entity_id: CHILD,
        resource: RESOURCE,
        window: SnapshotWindow::Hourly,
        window_key: &window_key,
        counters: &counters,
        overdrawn: &overdrawn,
        total_events: 3,
        ttl_epoch_s: WRITTEN_AT / 1000 + 90 * 86_400,
    };
    let watermark = watermark_update(
        ns,
        CHILD,
        RESOURCE,
        0,
        "49600000000000000000000000000000000000000000000001",
        None,
        WRITTEN_AT / 1000 + 90 * 86_400,
    );
    let watermark_key = dynalimit_format::usage::watermark_key(ns, CHILD, RESOURCE, 0);
    let mut resources = dynalimit_format::expr::Expr::default();
    resources.add_value(attr::RESOURCES, AttributeValue::Ss(vec![RESOURCE.into()]));
    let mut counted = dynalimit_format::expr::Expr::default();
    counted.add(RESOURCE, 1);
    let writes = [
        (Role::Snapshot, snapshot.key(), snapshot.update()),
        (Role::Watermark, watermark_key, watermark),
        (
            Role::ResourcesRegistry,
            dynalimit_format::config::resources_registry_key(ns),
            resources,
        ),
        (
            Role::EntityConfigRegistry,
            dynalimit_format::config::entity_config_registry_key(ns),
            counted,
        ),
    ];
    let mut out = Vec::new();
    for (role, key, e) in writes {
        client
            .update_item()
            .table_name(table)
            .set_key(Some(key.clone()))
            .with_expr(&e)
            .send()
            .await
            .unwrap_or_else(|err| panic!("the world's update of {role:?}: {err:?}"));
        out.push((role, key));
    }
    out
}
