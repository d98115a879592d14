//! A Lambda function that asks the shared limiter before doing its work: the event names the
//! caller (`entity`), the resource and what the call costs; the answer says whether it may go
//! ahead and, when not, how long to wait.
//!
//! It starts with `Repository::connect`, which only reads (the table, the version record, the
//! namespace), so the function runs under the stack's acquire-only policy: reads, and
//! `PutItem`/`UpdateItem` on bucket items (alone or in a transaction) are all its acquires
//! send. The repository and the limiter are built once per execution environment and reused
//! by every invocation.
//!
//! ```sh
//! cargo lambda build --release -p dynalimit --features dynamodb --example lambda_acquire
//! # DYNALIMIT_STACK and DYNALIMIT_NAMESPACE name the table and the namespace.
//! ```
//!
//! An event and its answers:
//!
//! ```json
//! {"entity": "key-1", "resource": "gpt-4", "consume": {"rpm": 1, "tpm": 500}}
//! {"admitted": true}
//! {"admitted": false, "retry_after_ms": 1200, "limit": "tpm"}
//! ```

use dynalimit::{Error as LimitError, RateLimiter, Repository};
use lambda_runtime::{Error, LambdaEvent, service_fn};
use serde_json::{Value, json};

/// What one invocation asks for: the entity, the resource, the amount per limit.
struct Ask {
    entity: String,
    resource: String,
    consume: Vec<(String, i64)>,
}

/// Reads an event.
fn request(event: &Value) -> Result<Ask, Error> {
    let text = |field: &str| {
        event[field]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| Error::from(format!("the event needs a text field {field:?}")))
    };
    let consume = event["consume"]
        .as_object()
        .ok_or("the event needs \"consume\": {limit: amount, …}")?
        .iter()
        .map(|(name, amount)| {
            let amount = amount
                .as_i64()
                .ok_or_else(|| Error::from(format!("{name}: a whole number of tokens")))?;
            Ok((name.clone(), amount))
        })
        .collect::<Result<Vec<_>, Error>>()?;
    Ok(Ask {
        entity: text("entity")?,
        resource: text("resource")?,
        consume,
    })
}

/// One invocation: acquire, and commit at once (the call's cost is known up front).
async fn handle(limiter: &RateLimiter, event: LambdaEvent<Value>) -> Result<Value, Error> {
    let ask = request(&event.payload)?;
    match limiter
        .acquire(&ask.entity, &ask.resource, ask.consume)
        .await
    {
        Ok(lease) => {
            lease.commit().await?;
            Ok(json!({ "admitted": true }))
        }
        Err(LimitError::Rejected(rejection)) => Ok(json!({
            "admitted": false,
            "retry_after_ms": rejection.retry_after().map(|d| d.as_millis()),
            "limit": rejection.violations().next().map(|s| s.limit.name().to_owned()),
        })),
        Err(other) => Err(other.into()),
    }
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let repo = Repository::builder().connect().await?;
    let limiter = RateLimiter::new(repo);
    let limiter = &limiter;
    lambda_runtime::run(service_fn(move |event| handle(limiter, event))).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_names_the_caller_the_resource_and_the_cost() {
        let event = json!({"entity": "key-1", "resource": "gpt-4", "consume": {"tpm": 500}});
        let ask = request(&event).unwrap();
        assert_eq!(
            (ask.entity.as_str(), ask.resource.as_str()),
            ("key-1", "gpt-4")
        );
        assert_eq!(ask.consume, [("tpm".to_owned(), 500)]);
        assert!(request(&json!({"entity": "key-1", "resource": "gpt-4"})).is_err());
        assert!(request(&json!({"entity": 1, "resource": "gpt-4", "consume": {}})).is_err());
        assert!(
            request(&json!({"entity": "k", "resource": "r", "consume": {"tpm": "x"}})).is_err()
        );
    }
}
