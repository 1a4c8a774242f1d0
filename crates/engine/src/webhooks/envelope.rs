//! The body of a webhook call: the full or thin envelope around an event's object.

use serde_json::{json, Value};

/// The 20 event kinds an endpoint may subscribe to (spec: Events).
pub const EVENT_TYPES: [&str; 20] = [
    "cost_event.created",
    "budget.threshold.warning",
    "budget.threshold.critical",
    "budget.exceeded",
    "budget.increased",
    "budget.reset",
    "request.blocked",
    "velocity.exceeded",
    "velocity.recovered",
    "session.limit_exceeded",
    "tag_budget.exceeded",
    "customer_budget.exceeded",
    "loop.detected",
    "plan_limit.exceeded",
    "margin.threshold_crossed",
    "action.created",
    "action.approved",
    "action.rejected",
    "action.expired",
    "test.ping",
];

/// The only kind that may be sent thin.
pub const THIN_KIND: &str = "cost_event.created";

/// `evt_<uuid>` of an outbox row: the same for every endpoint, so receivers can
/// deduplicate on it.
pub fn event_id(outbox_id: &str) -> String {
    format!("evt_{outbox_id}")
}

/// What one envelope is built from.
pub struct Event<'a> {
    pub id: &'a str,
    pub kind: &'a str,
    pub api_version: &'a str,
    pub created_at_ms: i64,
}

/// `{ id, type, api_version, created_at (Unix seconds), data: { object } }`.
pub fn full(event: &Event<'_>, object: Value) -> Value {
    json!({
        "id": event.id,
        "type": event.kind,
        "api_version": event.api_version,
        "created_at": event.created_at_ms.div_euclid(1000),
        "data": { "object": object },
    })
}

/// `{ id, type, api_version, created_at, related_object: { id, type: cost_event, url } }`.
pub fn thin(event: &Event<'_>, cost_event_id: &str, base_url: &str) -> Value {
    let id = crate::util::ids::prefixed(crate::util::ids::COST_EVENT, cost_event_id);
    json!({
        "id": event.id,
        "type": event.kind,
        "api_version": event.api_version,
        "created_at": event.created_at_ms.div_euclid(1000),
        "related_object": {
            "id": id,
            "type": "cost_event",
            "url": format!("{}/api/cost-events/{id}", base_url.trim_end_matches('/')),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes() {
        let e = Event {
            id: "evt_1",
            kind: "cost_event.created",
            api_version: "2026-04-01",
            created_at_ms: 1_999,
        };
        let f = full(&e, json!({ "a": 1 }));
        assert_eq!(f["created_at"], 1);
        assert_eq!(f["data"]["object"]["a"], 1);
        let t = thin(&e, "u", "https://sg.example/");
        assert_eq!(
            t["related_object"],
            json!({
                "id": "svc_evt_u", "type": "cost_event", "url": "https://sg.example/api/cost-events/svc_evt_u"
            })
        );
        assert!(t.get("data").is_none());
        assert_eq!(EVENT_TYPES.iter().collect::<std::collections::HashSet<_>>().len(), 20);
    }
}
