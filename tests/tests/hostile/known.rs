//! Failures explained by work under way on other branches, named so that the list can only
//! shrink: each entry pairs what the stored items hold with what the failure says, and a
//! failure matching no entry fails the case. Remove an entry when its branch lands; the
//! suite then shows whether the failures it explained are gone.

use aws_sdk_dynamodb::types::AttributeValue;
use dynalimit_format::item::Item;
use dynalimit_tests::hostile::T0;

/// One known failure.
struct Entry {
    /// The branch whose work fixes it, and what it is.
    what: &'static str,
    /// Whether the stored items (namespace id `ns`) hold what causes it.
    holds: fn(&[Item], &str) -> bool,
    /// Whether a failure's text is the one it causes.
    says: fn(&str) -> bool,
}

/// The list, the more particular entries first.
const KNOWN: &[Entry] = &[
    Entry {
        what: "bounds: a bypass, soft, vu or pause stamp far past its lifetime is honoured",
        holds: |items, ns| {
            buckets(items, ns).any(|b| {
                b.iter().any(|(name, value)| {
                    is_stamp(name) && number(Some(value)).is_some_and(|t| t > FAR_AHEAD)
                })
            })
        },
        says: |f| f.contains("acquires admitted in"),
    },
    Entry {
        what: "bounds: a limit's fields outside the format's range are read as they are (a \
               capacity beyond 10^15 tokens; a refill period missing, zero or negative reads \
               as 1 ms, the whole capacity back every millisecond)",
        holds: |items, ns| {
            buckets(items, ns).any(|b| {
                b.keys().any(|name| {
                    let Some(limit) = name.strip_prefix("b_").and_then(|n| n.strip_suffix("_tk"))
                    else {
                        return false;
                    };
                    let field = |f: &str| number(b.get(&format!("b_{limit}_{f}")));
                    field("cp").is_some_and(|cp| cp <= 0.0 || cp > 1e18)
                        || field("ra").is_some_and(|ra| ra > 1e18)
                        || field("rp").is_none_or(|rp| rp <= 0.0 || rp > 1e12)
                })
            })
        },
        says: |f| f.contains("acquires admitted in"),
    },
    Entry {
        what: "bounds: the aggregator's sums of consumption counters overflow",
        holds: |items, ns| {
            buckets(items, ns).any(|b| {
                b.iter().any(|(name, value)| {
                    name.ends_with("_tc") && number(Some(value)).is_some_and(|t| t.abs() > 4e18)
                })
            })
        },
        says: |f| f.starts_with("aggregator") && crashed(f),
    },
    Entry {
        what: "bounds: balances and counters beyond ±2 × 10^18 millitokens overflow unchecked \
               arithmetic",
        holds: |items, ns| {
            buckets(items, ns).any(|b| {
                b.iter().any(|(name, value)| {
                    name.starts_with("b_")
                        && ["_tk", "_cp", "_ra", "_tc", "_tu"]
                            .iter()
                            .any(|f| name.ends_with(f))
                        && number(Some(value)).is_some_and(|v| v.abs() > 2e18)
                })
            })
        },
        says: crashed,
    },
    Entry {
        what: "bounds: times read from bucket items (rf, window starts, stamps) overflow \
               unchecked arithmetic",
        holds: |items, ns| {
            buckets(items, ns).any(|b| {
                b.iter().any(|(name, value)| {
                    (is_time(name) || is_stamp(name))
                        && number(Some(value))
                            .is_some_and(|t| !(PLAUSIBLE.0..=PLAUSIBLE.1).contains(&t))
                })
            })
        },
        says: crashed,
    },
    Entry {
        what: "bounds: a shard count above 32 is read as it is",
        holds: |items, ns| {
            buckets(items, ns).any(|b| number(b.get("shard_count")).is_some_and(|n| n > 32.0))
        },
        says: crashed,
    },
    Entry {
        what: "shapes: index results naming this namespace from another one's partition \
               are used",
        holds: |items, ns| items.iter().any(|item| foreign_in_our_index(item, ns)),
        says: |f| f.contains(", the namespace holds"),
    },
];

/// A stamp at or past this instant is beyond any lifetime at the time acquires are counted
/// (an hour after [`T0`]).
const FAR_AHEAD: f64 = (T0 + 2 * 3_600_000) as f64;

/// Instants within ten years of [`T0`].
const PLAUSIBLE: (f64, f64) = (
    (T0 - 10 * 365 * 86_400_000) as f64,
    (T0 + 10 * 365 * 86_400_000) as f64,
);

/// Why the paths that walk a bucket's shards (acquires, pause, reset, top-up, the
/// aggregator) must not run on the stored `items`, if they must not: a shard count in the
/// millions makes them allocate until the machine runs out of memory, which no time bound
/// stops. Removed with the bounds branch, like the entry above.
pub(crate) fn unsafe_to_run(items: &[Item], ns: &str) -> Option<&'static str> {
    buckets(items, ns)
        .any(|b| number(b.get("shard_count")).is_some_and(|n| n > 1024.0))
        .then_some("bounds: a shard count in the millions is walked shard by shard")
}

/// Which entry explains `failure` given the stored `items`, if one does.
pub(crate) fn explain(items: &[Item], ns: &str, failure: &str) -> Option<&'static str> {
    KNOWN
        .iter()
        .find(|e| (e.says)(failure) && (e.holds)(items, ns))
        .map(|e| e.what)
}

fn crashed(failure: &str) -> bool {
    failure.contains("panicked") || failure.contains("no answer") || failure.contains("did not end")
}

/// The bucket items of namespace `ns`.
fn buckets<'a>(items: &'a [Item], ns: &str) -> impl Iterator<Item = &'a Item> {
    let prefix = format!("{ns}/BUCKET#");
    items
        .iter()
        .filter(move |item| text(item, "PK").is_some_and(|pk| pk.starts_with(&prefix)))
}

fn is_stamp(name: &str) -> bool {
    matches!(name, "bypass" | "vu" | "dl_pause_until")
        || (name.starts_with("b_") && name.ends_with("_soft"))
}

fn is_time(name: &str) -> bool {
    matches!(name, "rf" | "ttl" | "pgen")
        || (name.starts_with("b_")
            && ["_ws", "_wa", "_rsa"]
                .iter()
                .any(|suffix| name.ends_with(suffix)))
}

/// Whether an item of another namespace's partition has an index key naming `ns`.
fn foreign_in_our_index(item: &Item, ns: &str) -> bool {
    let ours = |v: &str| v == ns || v.starts_with(&format!("{ns}/"));
    text(item, "PK").is_some_and(|pk| !ours(pk))
        && ["GSI1PK", "GSI2PK", "GSI3PK", "GSI4PK"]
            .iter()
            .any(|index| text(item, index).is_some_and(ours))
}

fn number(value: Option<&AttributeValue>) -> Option<f64> {
    match value {
        Some(AttributeValue::N(n)) => n.trim().parse::<f64>().ok(),
        _ => None,
    }
}

fn text<'a>(item: &'a Item, name: &str) -> Option<&'a str> {
    match item.get(name) {
        Some(AttributeValue::S(s)) => Some(s),
        _ => None,
    }
}
