//! Events that count under the same rollup keys, told apart cheaply.
//!
//! Every rollup key of an event but the trace's is a function of a few of its fields
//! (organization, provider, model, key, user, customer, source, type, tool, whether
//! estimated or refused, its tags) and its hour. Events of one commit or fold page
//! mostly share all of them: an agent's calls differ in their trace and their sums.
//! So aggregation first adds up the sums per [`Shape`] (one hash of borrowed fields
//! per event, no allocation but the tag list), and builds the ~25 keys of each shape
//! once, instead of once per event (a profile of the proxy at saturation had the
//! per-event keys and their merge at a ninth of the process's CPU, issue #25).

use crate::db::models::CostEvent;

/// The fields an event's rollup keys (trace aside) are made of, borrowed from it.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct Shape<'a> {
    org_id: &'a str,
    provider: &'a str,
    model: &'a str,
    api_key_id: Option<&'a str>,
    user_id: Option<&'a str>,
    customer_id: Option<&'a str>,
    source: &'a str,
    event_type: &'a str,
    tool_name: Option<&'a str>,
    budget_status: &'a str,
    estimated: bool,
    /// The hour since the epoch: the day and all-time buckets follow from it.
    hour: i64,
    tags: Vec<(&'a str, &'a str)>,
}

impl<'a> Shape<'a> {
    pub fn of(e: &'a CostEvent, tags: impl Iterator<Item = (&'a str, &'a str)>) -> Self {
        Shape {
            org_id: &e.org_id,
            provider: &e.provider,
            model: &e.model,
            api_key_id: e.api_key_id.as_deref(),
            user_id: e.user_id.as_deref(),
            customer_id: e.customer_id.as_deref(),
            source: &e.source,
            event_type: &e.event_type,
            tool_name: e.tool_name.as_deref(),
            budget_status: &e.budget_status,
            estimated: e.estimated,
            hour: e.created_at.div_euclid(super::rollups::HOUR_MS),
            tags: tags.collect(),
        }
    }

    /// The shape's tags, as the event carries them.
    pub fn tags(&self) -> impl Iterator<Item = (&'a str, &'a str)> + '_ {
        self.tags.iter().copied()
    }
}
