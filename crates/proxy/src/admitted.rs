//! A call that passed admission, as the later stages see it: who made it, where it
//! goes, what it asks and at what price, and the room it holds among the unsettled
//! calls until its cost event is committed.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::OwnedSemaphorePermit;

use super::credential::Credential;
use super::denial::Refused;
use super::events::Call;
use super::headers::ProxyHeaders;
use super::upstream::{self, Route};
use spendgate_engine::auth::identity::KeyIdentity;
use spendgate_llm::pricing::{ModelPrice, Provider};
use spendgate_llm::usage::RequestSummary;

/// A call that passed admission.
pub struct Admitted {
    pub key: Arc<KeyIdentity>,
    pub provider: Provider,
    pub route: Route,
    pub headers: ProxyHeaders,
    pub body: Bytes,
    pub summary: RequestSummary,
    pub model: String,
    /// The organization's runtime price of the model, else the pricing table's entry
    /// (dated aliases resolved), if either has one.
    pub price: Option<ModelPrice>,
    pub effective_tags: BTreeMap<String, String>,
    pub customer: Option<String>,
    /// Where the call goes: base URL, the upstream's name (stored credentials are
    /// looked up by `target.name`) and the cost event's provider.
    pub target: upstream::Target,
    /// The call brings a provider credential of its own.
    pub brings_own_credential: bool,
    /// The provider credential the call is forwarded with.
    pub credential: Credential,
    pub trace_id: String,
    pub now: i64,
    /// Room among the unsettled calls (`max_unsettled_calls`), held until the call's
    /// cost event is committed: when the accounting writer falls behind, new calls wait
    /// here instead of piling up records in memory.
    pub _room: OwnedSemaphorePermit,
}

impl Admitted {
    pub fn call(&self) -> Call<'_> {
        call_of(&self.key, self.event_provider(), &self.model, self.now)
    }

    /// The cost event's `provider`: the wire format's provider on the built-in
    /// upstreams, the upstream's name on an operator-defined one.
    pub fn event_provider(&self) -> &str {
        &self.target.provider
    }

    /// Who the call was, for a denial record.
    pub fn refused(&self) -> Refused<'_> {
        Refused {
            key: &self.key,
            provider: self.event_provider(),
            model: &self.model,
            request_id: &self.headers.request_id,
            tags: &self.effective_tags,
            customer: self.customer.as_deref(),
            session: self.headers.session.as_deref(),
            trace_id: Some(&self.trace_id),
            source: "proxy",
            event_type: "llm",
            defer: None,
        }
    }
}

pub(crate) fn call_of<'a>(key: &'a KeyIdentity, provider: &'a str, model: &'a str, now_ms: i64) -> Call<'a> {
    Call { org_id: &key.org_id, api_key_id: &key.key_id, provider, model, now_ms }
}
