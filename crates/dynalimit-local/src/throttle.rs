//! A partition's throughput, emulated: a proxy in front of DynamoDB Local that refuses what
//! DynamoDB would refuse beyond one partition key's rate.
//!
//! DynamoDB serves about 1000 write units and 3000 read units per second on one partition key;
//! beyond that it answers `ProvisionedThroughputExceededException`, whatever the table's
//! capacity mode. DynamoDB Local has no such limit, so a hot key never shows there. A
//! [`ThrottleProxy`] forwards every request to the emulator unchanged, except that it first
//! charges the request to the partition keys it touches and answers the refusal itself, with
//! DynamoDB's error shape, when a key's allowance is spent (the refused request never reaches
//! the emulator, as a throttled request applies nothing on DynamoDB).
//!
//! Each partition key value has a write and a read allowance, refilled continuously at
//! [`PartitionLimits::writes_per_second`] and [`PartitionLimits::reads_per_second`] and
//! holding at most [`PartitionLimits::burst`] of them. What a request costs:
//!
//! | operation | charge |
//! |---|---|
//! | `PutItem`, `UpdateItem`, `DeleteItem` | 1 write on its key |
//! | `BatchWriteItem` | 1 write per item, on each item's key |
//! | `TransactWriteItems` | 2 writes per `Put`, `Update` or `Delete`, 2 reads per `ConditionCheck` |
//! | `GetItem` | 1 read |
//! | `BatchGetItem` | 1 read per key |
//! | `TransactGetItems` | 2 reads per item |
//! | anything else (`Query`, `Scan`, control plane) | nothing |
//!
//! A request is admitted when every key it touches has allowance left (a positive balance),
//! and is then charged in full, which may take a key's balance below zero; the refill pays the
//! debt back before the key admits again. DynamoDB must admit this way: an `UpdateItem` costs
//! the larger of the old and new item sizes, known only once the request ran. A request that
//! needs several units is therefore not starved by single-unit requests that keep a balance
//! just above zero. When any key it touches has nothing left, nothing is taken and the whole
//! request is refused. Item sizes are not weighed (every item counts as one unit), nor are
//! eventually consistent reads halved.
//!
//! ```no_run
//! # async fn run() -> Result<(), dynalimit_local::LocalError> {
//! use dynalimit_local::DynamoDbLocal;
//! use dynalimit_local::throttle::{PartitionLimits, ThrottleProxy};
//!
//! let local = DynamoDbLocal::start()?;
//! let proxy = ThrottleProxy::start(local.endpoint(), PartitionLimits::new("PK", 1000)).await?;
//! println!("DynamoDB Local, one partition at most 1000 writes/s: {}", proxy.url());
//! # Ok(()) }
//! ```

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use dynalimit_core::{Clock, SystemClock};
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use serde_json::Value;

use crate::proxy::{self, Served};
use crate::{LocalError, setup_error};

/// The rates one partition key sustains.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionLimits {
    /// The table's partition key attribute.
    pub key_attribute: String,
    /// Write units per second per partition key (DynamoDB: 1000).
    pub writes_per_second: u32,
    /// Read units per second per partition key (DynamoDB: 3000).
    pub reads_per_second: u32,
    /// How much unused allowance a key keeps (one second's worth by default).
    pub burst: Duration,
}

impl PartitionLimits {
    /// `writes_per_second` writes and three times as many reads per second on each value of
    /// `key_attribute`, with one second of burst: DynamoDB's proportions.
    pub fn new(key_attribute: impl Into<String>, writes_per_second: u32) -> Self {
        PartitionLimits {
            key_attribute: key_attribute.into(),
            writes_per_second,
            reads_per_second: writes_per_second.saturating_mul(3),
            burst: Duration::from_secs(1),
        }
    }
}

/// Micro-units: one unit of a request is a million of them, so integer refill loses nothing.
const MICRO: i64 = 1_000_000;

/// One key's allowance of one kind, in micro-units.
#[derive(Debug, Clone, Copy)]
struct Allowance {
    balance: i64,
    at: Duration,
}

/// The units a request asks of each key: writes and reads.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Charge {
    pub(crate) writes: Vec<(String, u32)>,
    pub(crate) reads: Vec<(String, u32)>,
}

/// Every partition key's allowances.
#[derive(Debug)]
pub(crate) struct Partitions {
    limits: PartitionLimits,
    clock: Arc<dyn Clock>,
    /// Write and read allowances, under one lock: a request takes both or neither.
    allowances: Mutex<Allowances>,
}

/// Each key's write and read allowances.
#[derive(Debug, Default)]
struct Allowances {
    writes: HashMap<String, Allowance>,
    reads: HashMap<String, Allowance>,
}

impl Partitions {
    pub(crate) fn new(limits: PartitionLimits, clock: Arc<dyn Clock>) -> Self {
        Partitions {
            limits,
            clock,
            allowances: Mutex::default(),
        }
    }

    /// Takes the whole charge when every key it touches has a positive balance, or nothing:
    /// `Err` names the first key with none left.
    pub(crate) fn take(&self, charge: &Charge) -> Result<(), String> {
        let now = self.clock.monotonic();
        let mut guard = self.allowances.lock().unwrap_or_else(|e| e.into_inner());
        let Allowances { writes, reads } = &mut *guard;
        let burst = self.limits.burst;
        let written = plan(
            writes,
            &charge.writes,
            self.limits.writes_per_second,
            burst,
            now,
        )?;
        let read = plan(
            reads,
            &charge.reads,
            self.limits.reads_per_second,
            burst,
            now,
        )?;
        for (key, balance) in written {
            writes.insert(key, Allowance { balance, at: now });
        }
        for (key, balance) in read {
            reads.insert(key, Allowance { balance, at: now });
        }
        Ok(())
    }
}

/// Each asked key's balance after its units are taken at `now` (below zero when the charge
/// exceeded what was left), or the first key with nothing left.
fn plan(
    table: &HashMap<String, Allowance>,
    asked: &[(String, u32)],
    rate: u32,
    burst: Duration,
    now: Duration,
) -> Result<Vec<(String, i64)>, String> {
    let rate = i64::from(rate);
    let capacity = rate.saturating_mul(i64::try_from(burst.as_micros()).unwrap_or(i64::MAX));
    // The same key may appear more than once in one request.
    let mut wanted: Vec<(String, i64)> = Vec::new();
    for (key, units) in asked {
        let cost = i64::from(*units) * MICRO;
        match wanted.iter_mut().find(|(k, _)| k == key) {
            Some((_, total)) => *total += cost,
            None => wanted.push((key.clone(), cost)),
        }
    }
    wanted
        .into_iter()
        .map(|(key, cost)| {
            let current = table.get(&key).copied().unwrap_or(Allowance {
                balance: capacity,
                at: now,
            });
            let elapsed =
                i64::try_from(now.saturating_sub(current.at).as_micros()).unwrap_or(i64::MAX);
            let balance = current
                .balance
                .saturating_add(elapsed.saturating_mul(rate))
                .min(capacity);
            if balance <= 0 {
                Err(key)
            } else {
                Ok((key, balance - cost))
            }
        })
        .collect()
}

/// The partition key value of an item or key (`{"PK": {"S": "…"}}`), as text.
fn key_of(item: &Value, attribute: &str) -> Option<String> {
    let value = item.get(attribute)?.as_object()?;
    let (kind, inner) = value.iter().next()?;
    Some(format!("{kind}:{}", inner.as_str().unwrap_or_default()))
}

/// What `operation` with request body `body` costs.
pub(crate) fn charge_of(operation: &str, body: &Value, attribute: &str) -> Charge {
    let mut charge = Charge::default();
    let key = |v: Option<&Value>| v.and_then(|item| key_of(item, attribute));
    match operation {
        "PutItem" => charge.writes.extend(key(body.get("Item")).map(|k| (k, 1))),
        "UpdateItem" | "DeleteItem" => charge.writes.extend(key(body.get("Key")).map(|k| (k, 1))),
        "GetItem" => charge.reads.extend(key(body.get("Key")).map(|k| (k, 1))),
        "BatchWriteItem" => {
            for requests in objects(body.get("RequestItems")) {
                for request in requests.as_array().into_iter().flatten() {
                    let item = request
                        .pointer("/PutRequest/Item")
                        .or_else(|| request.pointer("/DeleteRequest/Key"));
                    charge.writes.extend(key(item).map(|k| (k, 1)));
                }
            }
        }
        "BatchGetItem" => {
            for table in objects(body.get("RequestItems")) {
                for k in table
                    .get("Keys")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    charge.reads.extend(key(Some(k)).map(|k| (k, 1)));
                }
            }
        }
        "TransactWriteItems" => {
            for item in transact_items(body) {
                if let Some(check) = item.get("ConditionCheck") {
                    charge.reads.extend(key(check.get("Key")).map(|k| (k, 2)));
                }
                let written = item
                    .pointer("/Put/Item")
                    .or_else(|| item.pointer("/Update/Key"))
                    .or_else(|| item.pointer("/Delete/Key"));
                charge.writes.extend(key(written).map(|k| (k, 2)));
            }
        }
        "TransactGetItems" => {
            for item in transact_items(body) {
                charge
                    .reads
                    .extend(key(item.pointer("/Get/Key")).map(|k| (k, 2)));
            }
        }
        _ => {}
    }
    charge
}

fn objects(value: Option<&Value>) -> impl Iterator<Item = &Value> {
    value
        .and_then(Value::as_object)
        .into_iter()
        .flat_map(|m| m.values())
}

fn transact_items(body: &Value) -> impl Iterator<Item = &Value> {
    body.get("TransactItems")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

#[derive(Debug, Default)]
struct Counts {
    forwarded: AtomicU64,
    throttled: AtomicU64,
}

/// A running throttling proxy; it stops when dropped.
#[derive(Debug)]
pub struct ThrottleProxy {
    served: Served,
    counts: Arc<Counts>,
}

impl ThrottleProxy {
    /// Starts a proxy on a free loopback port forwarding to `upstream` (an `http://` URL)
    /// under `limits`.
    ///
    /// # Errors
    /// [`LocalError::Setup`] when `upstream` is not an `http://host:port` URL, a rate is
    /// zero, or no port can be bound.
    pub async fn start(upstream: &str, limits: PartitionLimits) -> Result<Self, LocalError> {
        Self::start_with_clock(upstream, limits, Arc::new(SystemClock)).await
    }

    /// [`ThrottleProxy::start`] with the clock the allowances refill by.
    ///
    /// # Errors
    /// As [`ThrottleProxy::start`].
    pub async fn start_with_clock(
        upstream: &str,
        limits: PartitionLimits,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, LocalError> {
        let upstream: http::Uri = upstream
            .parse()
            .ok()
            .filter(|u: &http::Uri| u.scheme_str() == Some("http") && u.authority().is_some())
            .ok_or_else(|| {
                setup_error(format!(
                    "throttle proxy: {upstream:?} is not an http:// URL"
                ))
            })?;
        if limits.writes_per_second == 0 || limits.reads_per_second == 0 {
            return Err(setup_error(
                "throttle proxy: a partition rate must be above zero",
            ));
        }
        let counts = Arc::new(Counts::default());
        let shared = Arc::new(Shared {
            partitions: Partitions::new(limits, clock),
            client: proxy::upstream(),
            upstream,
            counts: counts.clone(),
        });
        let served = Served::start(move |request: Request<Body>| {
            let shared = shared.clone();
            async move { shared.serve(request).await }
        })
        .await
        .map_err(|e| setup_error(format!("throttle proxy: cannot bind a port: {e}")))?;
        Ok(ThrottleProxy { served, counts })
    }

    /// The proxy's endpoint URL.
    pub fn url(&self) -> String {
        self.served.url()
    }

    /// Requests forwarded to the emulator so far.
    pub fn forwarded(&self) -> u64 {
        self.counts.forwarded.load(Ordering::Relaxed)
    }

    /// Requests refused as throttled so far.
    pub fn throttled(&self) -> u64 {
        self.counts.throttled.load(Ordering::Relaxed)
    }
}

#[derive(Debug)]
struct Shared {
    partitions: Partitions,
    client: proxy::Upstream,
    upstream: http::Uri,
    counts: Arc<Counts>,
}

impl Shared {
    async fn serve(&self, request: Request<Body>) -> Response<Body> {
        let operation = proxy::operation(request.headers())
            .unwrap_or_default()
            .to_string();
        let (mut parts, body) = request.into_parts();
        let Ok(bytes) = body
            .collect()
            .await
            .map(http_body_util::Collected::to_bytes)
        else {
            return answer(StatusCode::BAD_REQUEST, "request body unreadable".into());
        };
        let parsed: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        let charge = charge_of(&operation, &parsed, &self.partitions.limits.key_attribute);
        if let Err(key) = self.partitions.take(&charge) {
            self.counts.throttled.fetch_add(1, Ordering::Relaxed);
            let message = format!(
                "throughput of partition key {key} exceeds the emulated rate of {} writes and {} reads per second",
                self.partitions.limits.writes_per_second, self.partitions.limits.reads_per_second
            );
            let body = serde_json::json!({
                "__type": "com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException",
                "message": message,
            });
            return answer(StatusCode::BAD_REQUEST, body.to_string());
        }
        self.counts.forwarded.fetch_add(1, Ordering::Relaxed);
        let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        let Ok(uri) = format!("{}{}", self.upstream, path.trim_start_matches('/')).parse() else {
            return answer(StatusCode::BAD_REQUEST, "bad request path".into());
        };
        parts.uri = uri;
        match self
            .client
            .request(Request::from_parts(parts, Full::new(bytes)))
            .await
        {
            Ok(response) => response.map(Body::new),
            Err(e) => answer(StatusCode::BAD_GATEWAY, format!("upstream failed: {e}")),
        }
    }
}

fn answer(status: StatusCode, body: String) -> Response<Body> {
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/x-amz-json-1.0"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use dynalimit_core::ManualClock;
    use serde_json::json;

    fn partitions(writes: u32) -> (Partitions, ManualClock) {
        let clock = ManualClock::new(0);
        let limits = PartitionLimits::new("PK", writes);
        (Partitions::new(limits, Arc::new(clock.clone())), clock)
    }

    fn writes(key: &str, units: u32) -> Charge {
        Charge {
            writes: vec![(key.into(), units)],
            reads: vec![],
        }
    }

    #[test]
    fn a_key_takes_its_burst_then_its_rate() {
        let (p, clock) = partitions(10);
        for _ in 0..10 {
            assert_eq!(p.take(&writes("a", 1)), Ok(()));
        }
        assert_eq!(p.take(&writes("a", 1)), Err("a".into()));
        // Another key has its own allowance.
        assert_eq!(p.take(&writes("b", 1)), Ok(()));
        // Any balance left admits, and the charge is paid back before the next.
        clock.advance(Duration::from_millis(1));
        assert_eq!(p.take(&writes("a", 1)), Ok(()));
        clock.advance(Duration::from_millis(98));
        assert_eq!(p.take(&writes("a", 1)), Err("a".into()));
        clock.advance(Duration::from_millis(2));
        assert_eq!(p.take(&writes("a", 1)), Ok(()));
        assert_eq!(p.take(&writes("a", 1)), Err("a".into()));
        // Never more than the burst, however long the key was idle.
        clock.advance(Duration::from_secs(3600));
        for _ in 0..10 {
            assert_eq!(p.take(&writes("a", 1)), Ok(()));
        }
        assert_eq!(p.take(&writes("a", 1)), Err("a".into()));
    }

    #[test]
    fn a_request_is_charged_all_or_nothing() {
        let (p, _clock) = partitions(4);
        assert_eq!(p.take(&writes("a", 4)), Ok(()));
        let both = Charge {
            writes: vec![("b".into(), 2), ("a".into(), 2)],
            reads: vec![],
        };
        assert_eq!(p.take(&both), Err("a".into()));
        // Nothing was taken from b.
        assert_eq!(p.take(&writes("b", 4)), Ok(()));
        assert_eq!(p.take(&writes("b", 1)), Err("b".into()));
        // A key named twice pays for both.
        let (p, clock) = partitions(4);
        let twice = Charge {
            writes: vec![("a".into(), 2), ("a".into(), 3)],
            reads: vec![],
        };
        assert_eq!(p.take(&twice), Ok(()));
        // 5 of 4 taken: one unit of debt, paid back in 250 ms, then the key admits again.
        clock.advance(Duration::from_millis(250));
        assert_eq!(p.take(&writes("a", 1)), Err("a".into()));
        clock.advance(Duration::from_millis(1));
        assert_eq!(p.take(&writes("a", 1)), Ok(()));
    }

    #[test]
    fn a_request_of_several_units_is_admitted_on_any_balance_and_owes_the_rest() {
        let (p, clock) = partitions(10);
        for _ in 0..9 {
            assert_eq!(p.take(&writes("a", 1)), Ok(()));
        }
        // One unit left: a transaction's two units are admitted, and the key owes one.
        assert_eq!(p.take(&writes("a", 2)), Ok(()));
        assert_eq!(p.take(&writes("a", 1)), Err("a".into()));
        // The debt is paid back first: 100 ms pays it, the next request needs a little more.
        clock.advance(Duration::from_millis(100));
        assert_eq!(p.take(&writes("a", 1)), Err("a".into()));
        clock.advance(Duration::from_millis(1));
        assert_eq!(p.take(&writes("a", 2)), Ok(()));
        // Over time the key serves no more than its rate, whatever the request sizes.
        let mut taken = 0;
        for _ in 0..10_000 {
            clock.advance(Duration::from_millis(1));
            if p.take(&writes("a", 2)).is_ok() {
                taken += 2;
            }
        }
        assert!(
            (100..=102).contains(&taken),
            "{taken} units in 10 s at 10 a second"
        );
    }

    #[test]
    fn reads_have_three_times_the_rate_and_their_own_allowance() {
        let (p, _clock) = partitions(2);
        let read = Charge {
            writes: vec![],
            reads: vec![("a".into(), 6)],
        };
        assert_eq!(p.take(&read), Ok(()));
        assert_eq!(p.take(&writes("a", 2)), Ok(()));
        let one = Charge {
            writes: vec![],
            reads: vec![("a".into(), 1)],
        };
        assert_eq!(p.take(&one), Err("a".into()));
    }

    #[test]
    fn each_operation_is_charged_on_the_keys_it_touches() {
        let k = |v: &str| json!({"PK": {"S": v}, "SK": {"S": "x"}});
        let update = charge_of("UpdateItem", &json!({"Key": k("a")}), "PK");
        assert_eq!(update, writes("S:a", 1));
        let put = charge_of("PutItem", &json!({"Item": k("a")}), "PK");
        assert_eq!(put, writes("S:a", 1));
        let transact = charge_of(
            "TransactWriteItems",
            &json!({"TransactItems": [
                {"Put": {"Item": k("a")}},
                {"Update": {"Key": k("b")}},
                {"ConditionCheck": {"Key": k("c")}},
            ]}),
            "PK",
        );
        assert_eq!(
            transact,
            Charge {
                writes: vec![("S:a".into(), 2), ("S:b".into(), 2)],
                reads: vec![("S:c".into(), 2)],
            }
        );
        let batch = charge_of(
            "BatchGetItem",
            &json!({"RequestItems": {"t": {"Keys": [k("a"), k("b")]}}}),
            "PK",
        );
        assert_eq!(batch.reads, vec![("S:a".into(), 1), ("S:b".into(), 1)]);
        let batch_write = charge_of(
            "BatchWriteItem",
            &json!({"RequestItems": {"t": [
                {"PutRequest": {"Item": k("a")}},
                {"DeleteRequest": {"Key": k("b")}},
            ]}}),
            "PK",
        );
        assert_eq!(
            batch_write.writes,
            vec![("S:a".into(), 1), ("S:b".into(), 1)]
        );
        assert_eq!(charge_of("Query", &json!({}), "PK"), Charge::default());
    }
}
