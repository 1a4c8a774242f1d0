//! One delivery attempt: build the body, sign and send it, record the outcome.

use rand::Rng;

use crate::config::WebhookSettings;
use crate::db::models::{OutboxEvent, WebhookDelivery, WebhookEndpoint};
use crate::db::webhooks::AttemptRecord;
use crate::db::{DbError, DbResult, Pool};
use crate::metrics::Metrics;
use crate::webhooks::envelope::{self, Event};
use crate::webhooks::schedule::{backoff, Attempt};
use crate::webhooks::send::{self, Call};

/// What every endpoint actor shares.
pub struct Deps {
    pub pool: Pool,
    pub settings: WebhookSettings,
    pub dev: bool,
    /// Base of the links in thin payloads.
    pub public_url: String,
    pub outbox: crate::outbox::Outbox,
    pub metrics: Metrics,
}

/// The secrets that sign now: the current one, and the previous one during the
/// rotation overlap.
pub fn signing_secrets(endpoint: &WebhookEndpoint, now: i64) -> Vec<&str> {
    let mut secrets = vec![endpoint.signing_secret.as_str()];
    if let (Some(previous), Some(until)) = (&endpoint.previous_secret, endpoint.previous_secret_expires_at) {
        if now < until {
            secrets.push(previous);
        }
    }
    secrets
}

/// The JSON body of `row` for `endpoint` (thin only for `cost_event.created`).
pub async fn body(
    pool: &Pool,
    public_url: &str,
    endpoint: &WebhookEndpoint,
    row: &OutboxEvent,
) -> DbResult<Vec<u8>> {
    let id = envelope::event_id(&row.id);
    let event = Event {
        id: &id,
        kind: &row.event_type,
        api_version: &endpoint.api_version,
        created_at_ms: row.created_at,
    };
    let value = if endpoint.payload_mode == "thin" && row.event_type == envelope::THIN_KIND {
        let payload: serde_json::Value = serde_json::from_str(&row.payload).unwrap_or_default();
        envelope::thin(&event, payload["cost_event_id"].as_str().unwrap_or_default(), public_url)
    } else {
        envelope::full(&event, crate::db::cost_events::outbox_object(pool, row).await?)
    };
    Ok(value.to_string().into_bytes())
}

/// Makes one attempt of `delivery`; returns whether it was delivered.
pub async fn attempt(
    deps: &Deps,
    client: &awc::Client,
    endpoint: &WebhookEndpoint,
    delivery: WebhookDelivery,
    row: Option<OutboxEvent>,
) -> DbResult<bool> {
    let now = crate::util::time::now_ms();
    let body = match &row {
        Some(row) => body(&deps.pool, &deps.public_url, endpoint, row).await,
        None => Err(DbError::NotFound),
    };
    let result = match body {
        Err(e) => unreadable(&e),
        Ok(body) => {
            let call = Call {
                url: &endpoint.url,
                event_id: &envelope::event_id(&delivery.outbox_id),
                body,
                secrets: signing_secrets(endpoint, now),
                timestamp: now.div_euclid(1000),
            };
            send::send(client, deps.dev, call).await.0
        }
    };
    let attempts = delivery.attempts.saturating_add(1);
    let done = crate::util::time::now_ms();
    let (record, delivered) = outcome(&deps.settings, result, attempts, done, rand::rng().random());
    deps.metrics.webhook_attempts.with_label_values(&[label(&record)]).inc();
    crate::db::webhooks::record_attempt(&deps.pool, &endpoint.id, &delivery.id, record, delivered, done)
        .await?;
    Ok(delivered)
}

/// The result of an attempt whose body could not be built.
fn unreadable(e: &DbError) -> Attempt {
    match e {
        // The event (or the cost event it names, past the retention) is gone: nothing
        // can ever be sent.
        DbError::NotFound => Attempt::Permanent(None, "event no longer available".to_owned()),
        // The database could not answer now (a pool timeout under load): a later
        // attempt can, so this one is a retryable failure, not a final one.
        e => Attempt::Retry(None, format!("event could not be read: {e}")),
    }
}

/// The row update for an attempt's result (`jitter` in `[0, 1]`).
pub fn outcome(
    settings: &WebhookSettings,
    result: Attempt,
    attempts: i64,
    now: i64,
    jitter: f64,
) -> (AttemptRecord, bool) {
    let record = |status: &str, response: Option<u16>, next: i64, error: Option<String>| AttemptRecord {
        status: status.to_owned(),
        attempts,
        next_attempt_at: next,
        last_attempt_at: Some(now),
        response_status: response.map(i64::from),
        last_error: error,
    };
    match result {
        Attempt::Delivered(s) => (record("delivered", Some(s), now, None), true),
        Attempt::Retry(s, error) if attempts < i64::from(settings.max_attempts) => {
            let n = u32::try_from(attempts).unwrap_or(u32::MAX);
            let delay = backoff(n, settings.retry_base, settings.retry_max, jitter);
            let next = now.saturating_add(i64::try_from(delay.as_millis()).unwrap_or(i64::MAX));
            (record("pending", s, next, Some(error)), false)
        }
        Attempt::Retry(s, error) | Attempt::Permanent(s, error) => {
            (record("failed", s, now, Some(error)), false)
        }
    }
}

/// The metric label of a record.
pub fn label(record: &AttemptRecord) -> &str {
    match record.status.as_str() {
        "pending" => "retry",
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn settings() -> WebhookSettings {
        WebhookSettings {
            retry_base: Duration::from_secs(1),
            retry_max: Duration::from_secs(8),
            max_attempts: 3,
            timeout: Duration::from_secs(1),
            poll: Duration::from_secs(1),
            lease: Duration::from_secs(1),
            retention: Duration::from_secs(1),
        }
    }

    #[test]
    fn retries_then_fails() {
        let s = settings();
        let (r, ok) = outcome(&s, Attempt::Delivered(200), 1, 10, 0.5);
        assert!(ok && r.status == "delivered" && r.response_status == Some(200));
        let (r, ok) = outcome(&s, Attempt::Retry(Some(503), "HTTP 503".into()), 1, 10, 1.0);
        assert!(!ok && r.status == "pending" && r.next_attempt_at == 1_010);
        let (r, _) = outcome(&s, Attempt::Retry(None, "refused".into()), 2, 10, 1.0);
        assert_eq!((r.status.as_str(), r.next_attempt_at, r.response_status), ("pending", 2_010, None));
        let (r, _) = outcome(&s, Attempt::Retry(Some(500), "HTTP 500".into()), 3, 10, 1.0);
        assert_eq!(r.status, "failed");
        let (r, _) = outcome(&s, Attempt::Permanent(Some(404), "HTTP 404".into()), 1, 10, 1.0);
        assert_eq!((r.status.as_str(), r.attempts), ("failed", 1));
        assert_eq!(label(&outcome(&s, Attempt::Retry(None, String::new()), 1, 0, 0.0).0), "retry");
    }

    #[test]
    fn a_gone_event_fails_for_good_and_an_unreachable_database_is_retried() {
        let s = settings();
        let (r, _) = outcome(&s, unreadable(&DbError::NotFound), 1, 10, 1.0);
        assert_eq!((r.status.as_str(), r.attempts), ("failed", 1));
        let (r, _) = outcome(&s, unreadable(&DbError::Unavailable("pool timed out".into())), 1, 10, 1.0);
        assert_eq!((r.status.as_str(), r.next_attempt_at), ("pending", 1_010));
        assert!(r.last_error.as_deref().is_some_and(|e| e.contains("pool timed out")), "{r:?}");
    }
}
