//! What a hostile writer changes in the world: one [`Mutation`] at a time.

use aws_sdk_dynamodb::types::AttributeValue;
use dynalimit_format::item::Item;
use proptest::sample::Index;

use super::FOREIGN_NS;
use super::value::{Kind, retype};

/// Attribute names readers look at, by the kind of item that holds them, with `{l}` standing
/// for the name of one of the world's limits.
pub fn named(kind: ItemKind) -> &'static [&'static str] {
    match kind {
        ItemKind::Bucket => &[
            "rf",
            "shard_count",
            "bypass",
            "vu",
            "ttl",
            "disabled",
            "cascade",
            "parent_id",
            "pgen",
            "pinc",
            "sched",
            "rsched",
            "sched_tz",
            "dl_pause_until",
            "entity_id",
            "resource",
            "b_{l}_tk",
            "b_{l}_cp",
            "b_{l}_ra",
            "b_{l}_rp",
            "b_{l}_tc",
            "b_{l}_soft",
            "b_{l}_ws",
            "b_{l}_rsa",
            "b_{l}_wa",
            "b_{l}_wtc",
            "b_{l}_gc",
            "b_{l}_tu",
            "b_{l}_rn",
            "b_{l}_sched",
            "b_{l}_rsched",
            "b_wcu_tk",
            "b_wcu_cp",
            "b_wcu_ra",
            "b_wcu_rp",
            "GSI2PK",
            "GSI3PK",
            "GSI3SK",
            "GSI4PK",
        ],
        ItemKind::Config => &[
            "l_{l}_cp",
            "l_{l}_ra",
            "l_{l}_rp",
            "l_{l}_soft",
            "l_{l}_sched",
            "l_{l}_rsched",
            "w_{l}_cp",
            "w_{l}_ra",
            "w_{l}_rp",
            "w_{l}_rsa",
            "w_{l}_soft",
            "sched_tz",
            "disabled",
            "cascade",
            "on_unavailable",
            "audit_retention_days",
            "config_version",
            "entity_id",
            "resource",
            "GSI3PK",
            "GSI3SK",
        ],
        ItemKind::Meta => &[
            "entity_id",
            "name",
            "parent_id",
            "cascade",
            "pgen",
            "pinc",
            "metadata",
            "created_at",
            "GSI1PK",
            "GSI1SK",
        ],
        ItemKind::Version => &[
            "schema_version",
            "lambda_version",
            "client_min_version",
            "updated_at",
            "updated_by",
            "template_version",
        ],
        ItemKind::Namespace => &[
            "namespace_id",
            "namespace_name",
            "status",
            "created_at",
            "deleted_at",
        ],
        ItemKind::Operation => &[
            "entity_id",
            "resource",
            "operation",
            "writer",
            "ent",
            "shards",
            "amounts",
            "ttl",
        ],
        ItemKind::Audit => &[
            "entity_id",
            "event_id",
            "timestamp",
            "action",
            "principal",
            "resource",
            "details",
            "ttl",
        ],
        ItemKind::Snapshot => &[
            "entity_id",
            "resource",
            "window",
            "window_start",
            "{l}",
            "{l}#od",
            "total_events",
            "ttl",
            "GSI2PK",
            "GSI2SK",
        ],
        ItemKind::Watermark => &["seq", "entity_id", "resource", "shard", "ttl"],
        ItemKind::Registry => &["resources", "hx/model:1", "{l}"],
        ItemKind::Other => &["PK", "SK", "GSI4PK", "GSI4SK", "ttl", "{l}"],
    }
}

/// What an item is, by its sort key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ItemKind {
    /// A bucket shard (`#STATE`).
    Bucket,
    /// A configuration level.
    Config,
    /// An entity's META.
    Meta,
    /// The version record.
    Version,
    /// A namespace registry record.
    Namespace,
    /// An operation record.
    Operation,
    /// An audit event.
    Audit,
    /// A usage snapshot.
    Snapshot,
    /// An aggregator watermark.
    Watermark,
    /// A registry of resources.
    Registry,
    /// Anything else.
    Other,
}

impl ItemKind {
    /// The kind of `item`.
    pub fn of(item: &Item) -> ItemKind {
        let sk = text(item, "SK").unwrap_or_default();
        let starts = |p: &str| sk.starts_with(p);
        if sk == "#STATE" {
            ItemKind::Bucket
        } else if starts("#CONFIG") {
            ItemKind::Config
        } else if sk == "#META" {
            ItemKind::Meta
        } else if sk == "#VERSION" {
            ItemKind::Version
        } else if starts("#NAMESPACE#") || starts("#NSID#") {
            ItemKind::Namespace
        } else if starts("#OP#") {
            ItemKind::Operation
        } else if starts("#AUDIT#") {
            ItemKind::Audit
        } else if starts("#USAGE#") {
            ItemKind::Snapshot
        } else if starts("#AGGREGATOR#") {
            ItemKind::Watermark
        } else if sk == "#RESOURCES" || sk == "#ENTITY_CONFIG_RESOURCES" {
            ItemKind::Registry
        } else {
            ItemKind::Other
        }
    }
}

/// Named attributes that hold instants (epoch ms, or seconds for `ttl`).
pub const TIMES: &[&str] = &[
    "rf",
    "bypass",
    "vu",
    "ttl",
    "pgen",
    "dl_pause_until",
    "b_{l}_soft",
    "b_{l}_ws",
    "b_{l}_wa",
    "b_{l}_rsa",
];

/// The fields of a limit on a bucket item.
pub const LIMIT_FIELDS: &[&str] = &[
    "tk", "cp", "ra", "rp", "tc", "soft", "ws", "wa", "rsa", "wtc", "gc", "tu", "rn", "sched",
    "rsched",
];

/// A key of the wrong shape, made from the item's own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyShape {
    /// The text after the partition key's last `#` (a bucket's shard) replaced.
    PkLast(&'static str),
    /// Text appended to the partition key.
    PkAppend(&'static str),
    /// The partition key's last characters cut.
    PkCut(usize),
    /// Text appended to the sort key.
    SkAppend(&'static str),
    /// The sort key replaced.
    SkReplace(&'static str),
}

/// Replacements of a bucket key's shard, and other partition and sort key texts.
pub const PK_LASTS: &[&str] = &[
    "x",
    "-1",
    "01",
    "+1",
    "1.0",
    "4294967295",
    "4294967296",
    "99999999999999999999",
    "",
    "0#0",
    " 0",
];
/// Texts appended to keys.
pub const KEY_APPENDS: &[&str] = &["#", "#0", "#extra", "/", " ", "\u{0}", "#STATE"];
/// Sort keys.
pub const SKS: &[&str] = &[
    "#STATE",
    "#state",
    "#STATE ",
    "#META",
    "#CONFIG",
    "#CONFIG#_default_",
    "#OP#x",
    "#USAGE#",
    "#AUDIT#",
    "#AGGREGATOR#x#0",
    "#VERSION",
    "#RESOURCES",
    "#NAMESPACE#hostile",
    "#NSID#",
];

/// One change a writer with access to the table's items makes.
#[derive(Debug, Clone)]
pub enum Mutation {
    /// Removes one of the item's attributes (keys aside, DynamoDB refuses that).
    Drop {
        /// Which item.
        item: Index,
        /// Which attribute, among the item's in name order.
        attr: Index,
    },
    /// Stores one of the item's attributes as another type.
    Retype {
        /// Which item.
        item: Index,
        /// Which attribute.
        attr: Index,
        /// The new type.
        to: Kind,
    },
    /// Replaces one of the item's attributes with a hostile value.
    Set {
        /// Which item.
        item: Index,
        /// Which attribute.
        attr: Index,
        /// The value.
        value: AttributeValue,
    },
    /// Sets an attribute readers look at ([`named`]) to a hostile value.
    SetNamed {
        /// Which item.
        item: Index,
        /// Which name.
        name: Index,
        /// Which of the world's limits `{l}` names.
        limit: Index,
        /// The value.
        value: AttributeValue,
    },
    /// Sets an attribute readers look at of a bucket shard to a hostile value.
    OnBucket {
        /// Which bucket item.
        item: Index,
        /// Which name, among a bucket's ([`named`]).
        name: Index,
        /// Which of the world's limits `{l}` names.
        limit: Index,
        /// The value.
        value: AttributeValue,
    },
    /// Sets a field of the consumed limit (the world's first) on a bucket shard.
    OnConsumed {
        /// Which bucket item.
        item: Index,
        /// The field (`tk`, `cp`, …): the attribute is `b_{limit}_{field}`.
        field: &'static str,
        /// The value.
        value: AttributeValue,
    },
    /// Sets a time attribute ([`TIMES`]) of a bucket shard to an instant.
    Stamp {
        /// Which bucket item.
        item: Index,
        /// Which name.
        name: Index,
        /// Which of the world's limits `{l}` names.
        limit: Index,
        /// The instant.
        at: i64,
    },
    /// Stores a copy of the item under a key of the wrong shape.
    Rekey {
        /// Which item.
        item: Index,
        /// How the key is wrong.
        shape: KeyShape,
    },
    /// Stores a copy of the item in another namespace's partition, its attributes and index
    /// keys unchanged (so they name this namespace): what the other namespace's principal can
    /// write.
    Transplant {
        /// Which item.
        item: Index,
    },
    /// Points the item's index keys at another namespace.
    ForeignIndex {
        /// Which item.
        item: Index,
    },
    /// Sets `attr` of the item whose key is `{ns}/{pk}` and `sk` (`None`: removes it): the
    /// one change of a named case.
    At {
        /// The partition key after the namespace id and its `/`.
        pk: String,
        /// The sort key.
        sk: String,
        /// The attribute.
        attr: String,
        /// Its new value.
        value: Option<AttributeValue>,
    },
}

impl Mutation {
    /// Applies the change to `items`, whose names `{l}` may stand for are `limits`: changes
    /// an item in place, or adds the copy it makes. `ns` is the world's namespace id.
    pub fn apply(&self, items: &mut Vec<Item>, limits: &[String], ns: &str) {
        if items.is_empty() {
            return;
        }
        let name_of = |template: &str, limit: &Index| -> String {
            let l: &String = limit.get(limits);
            template.replace("{l}", l)
        };
        match self {
            Mutation::Drop { item, attr } => {
                let it = item.get_mut(items);
                if let Some(name) = pick(it, attr).filter(|n| !is_key(n)) {
                    it.remove(&name);
                }
            }
            Mutation::Retype { item, attr, to } => {
                let it = item.get_mut(items);
                if let Some(name) = pick(it, attr) {
                    let value = retype(&it[&name], *to);
                    it.insert(name, value);
                }
            }
            Mutation::Set { item, attr, value } => {
                let it = item.get_mut(items);
                if let Some(name) = pick(it, attr) {
                    it.insert(name, value.clone());
                }
            }
            Mutation::SetNamed {
                item,
                name,
                limit,
                value,
            } => {
                let it = item.get_mut(items);
                let template: &&str = name.get(named(ItemKind::of(it)));
                it.insert(name_of(template, limit), value.clone());
            }
            Mutation::OnBucket {
                item,
                name,
                limit,
                value,
            } => {
                let template: &&str = name.get(named(ItemKind::Bucket));
                if let Some(it) = bucket(items, item) {
                    it.insert(name_of(template, limit), value.clone());
                }
            }
            Mutation::OnConsumed { item, field, value } => {
                let name = format!("b_{}_{field}", limits[0]);
                if let Some(it) = bucket(items, item) {
                    it.insert(name, value.clone());
                }
            }
            Mutation::Stamp {
                item,
                name,
                limit,
                at,
            } => {
                let template: &&str = name.get(TIMES);
                if let Some(it) = bucket(items, item) {
                    it.insert(name_of(template, limit), AttributeValue::N(at.to_string()));
                }
            }
            Mutation::Rekey { item, shape } => {
                let mut copy = item.get(items).clone();
                let (Some(pk), Some(sk)) = (text(&copy, "PK"), text(&copy, "SK")) else {
                    return;
                };
                let (pk, sk) = match shape {
                    KeyShape::PkLast(last) => match pk.rsplit_once('#') {
                        Some((head, _)) => (format!("{head}#{last}"), sk),
                        None => (format!("{pk}#{last}"), sk),
                    },
                    KeyShape::PkAppend(tail) => (format!("{pk}{tail}"), sk),
                    KeyShape::PkCut(n) => {
                        let keep = pk.chars().count().saturating_sub(*n).max(1);
                        (pk.chars().take(keep).collect(), sk)
                    }
                    KeyShape::SkAppend(tail) => (pk, format!("{sk}{tail}")),
                    KeyShape::SkReplace(new) => (pk, (*new).to_owned()),
                };
                copy.insert("PK".into(), AttributeValue::S(pk));
                copy.insert("SK".into(), AttributeValue::S(sk));
                items.push(copy);
            }
            Mutation::Transplant { item } => {
                let mut copy = item.get(items).clone();
                let Some(pk) = text(&copy, "PK") else { return };
                let moved = match pk.strip_prefix(&format!("{ns}/")) {
                    Some(rest) => format!("{FOREIGN_NS}/{rest}"),
                    None => format!("{FOREIGN_NS}/{pk}"),
                };
                copy.insert("PK".into(), AttributeValue::S(moved));
                items.push(copy);
            }
            Mutation::At {
                pk,
                sk,
                attr,
                value,
            } => {
                let pk = format!("{ns}/{pk}");
                let found = items.iter_mut().find(|it| {
                    text(it, "PK").as_deref() == Some(pk.as_str())
                        && text(it, "SK").as_deref() == Some(sk.as_str())
                });
                if let Some(it) = found {
                    match value {
                        Some(v) => it.insert(attr.clone(), v.clone()),
                        None => it.remove(attr),
                    };
                }
            }
            Mutation::ForeignIndex { item } => {
                let it = item.get_mut(items);
                for index in ["GSI1PK", "GSI2PK", "GSI3PK", "GSI4PK"] {
                    if let Some(pk) = text(it, index) {
                        let moved = if pk == ns {
                            FOREIGN_NS.to_owned()
                        } else {
                            pk.replacen(ns, FOREIGN_NS, 1)
                        };
                        it.insert(index.into(), AttributeValue::S(moved));
                    }
                }
            }
        }
    }
}

/// The bucket item at `index` among the bucket items of `items`.
fn bucket<'a>(items: &'a mut [Item], index: &Index) -> Option<&'a mut Item> {
    let buckets: Vec<usize> = (0..items.len())
        .filter(|i| ItemKind::of(&items[*i]) == ItemKind::Bucket)
        .collect();
    if buckets.is_empty() {
        return None;
    }
    let at = *index.get(&buckets);
    Some(&mut items[at])
}

/// The name of the item's attribute at `index` in name order.
fn pick(item: &Item, index: &Index) -> Option<String> {
    let mut names: Vec<&String> = item.keys().collect();
    if names.is_empty() {
        return None;
    }
    names.sort();
    Some(index.get(&names).to_string())
}

fn is_key(name: &str) -> bool {
    name == "PK" || name == "SK"
}

fn text(item: &Item, name: &str) -> Option<String> {
    match item.get(name) {
        Some(AttributeValue::S(s)) => Some(s.clone()),
        _ => None,
    }
}
