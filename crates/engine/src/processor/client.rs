//! A typed client of the four Stripe list endpoints margins need, following
//! `has_more`/`starting_after` pagination to the last page.

use std::time::Duration;

use serde::de::DeserializeOwned;

use super::types::{CreditNote, Customer, ErrorBody, Invoice, Page, Refund};

/// Stripe's largest page.
const PAGE_SIZE: u32 = 100;
/// A guard against a processor that never says `has_more: false`.
const MAX_PAGES: usize = 10_000;
const TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum ProcessorError {
    /// 401 or 403: the key is invalid, revoked or lacks a permission.
    #[error("processor rejected the key: {0}")]
    Rejected(String),
    #[error("processor answered {status}: {message}")]
    Status { status: u16, message: String },
    #[error("processor unreachable: {0}")]
    Transport(String),
    #[error("processor sent an unexpected body: {0}")]
    Body(String),
}

/// Extra filters of one list call (`created[gte]`, `status`, `expand[]`, ...).
pub type ListQuery<'a> = &'a [(&'a str, String)];

/// A client bound to one API base and key.
pub struct ProcessorClient {
    base: String,
    key: String,
    http: awc::Client,
}

impl ProcessorClient {
    pub fn new(base: &str, key: &str) -> Self {
        ProcessorClient {
            base: base.trim_end_matches('/').to_owned(),
            key: key.to_owned(),
            http: build_http(),
        }
    }

    /// The minimal listing call that proves the key works (one customer).
    pub async fn validate(&self) -> Result<(), ProcessorError> {
        self.page::<Customer>("/v1/customers", &[("limit", "1".to_owned())]).await.map(|_| ())
    }

    pub async fn customers(&self) -> Result<Vec<Customer>, ProcessorError> {
        self.list("/v1/customers", &[]).await
    }

    /// Paid invoices created in `[from, to)` (Unix seconds).
    pub async fn paid_invoices(&self, from: i64, to: i64) -> Result<Vec<Invoice>, ProcessorError> {
        let q = [
            ("status", "paid".to_owned()),
            ("created[gte]", from.to_string()),
            ("created[lt]", to.to_string()),
        ];
        self.list("/v1/invoices", &q).await
    }

    pub async fn credit_notes(&self, from: i64, to: i64) -> Result<Vec<CreditNote>, ProcessorError> {
        let q = [("created[gte]", from.to_string()), ("created[lt]", to.to_string())];
        self.list("/v1/credit_notes", &q).await
    }

    /// Refunds with their charge expanded (a refund names no customer itself).
    pub async fn refunds(&self, from: i64, to: i64) -> Result<Vec<Refund>, ProcessorError> {
        let q = [
            ("created[gte]", from.to_string()),
            ("created[lt]", to.to_string()),
            ("expand[]", "data.charge".to_owned()),
        ];
        self.list("/v1/refunds", &q).await
    }

    /// Every object of a list endpoint, page after page.
    async fn list<T: DeserializeOwned + HasId>(
        &self,
        path: &str,
        query: ListQuery<'_>,
    ) -> Result<Vec<T>, ProcessorError> {
        let mut all = Vec::new();
        let mut after: Option<String> = None;
        for _ in 0..MAX_PAGES {
            let mut q: Vec<(&str, String)> = query.to_vec();
            q.push(("limit", PAGE_SIZE.to_string()));
            if let Some(id) = &after {
                q.push(("starting_after", id.clone()));
            }
            let page = self.page::<T>(path, &q).await?;
            after = page.data.last().map(|o| o.id().to_owned());
            all.extend(page.data);
            if !page.has_more || after.is_none() {
                return Ok(all);
            }
        }
        Err(ProcessorError::Body(format!("{path}: more than {MAX_PAGES} pages")))
    }

    async fn page<T: DeserializeOwned>(
        &self,
        path: &str,
        query: ListQuery<'_>,
    ) -> Result<Page<T>, ProcessorError> {
        let url = format!("{}{path}", self.base);
        let mut resp = self
            .http
            .get(url)
            .bearer_auth(&self.key)
            .query(&query)
            .map_err(|e| ProcessorError::Transport(e.to_string()))?
            .send()
            .await
            .map_err(|e| ProcessorError::Transport(e.to_string()))?;
        let status = resp.status().as_u16();
        let body = resp
            .body()
            .limit(64 * 1024 * 1024)
            .await
            .map_err(|e| ProcessorError::Transport(e.to_string()))?;
        if !(200..300).contains(&status) {
            let message = serde_json::from_slice::<ErrorBody>(&body)
                .ok()
                .and_then(|b| b.error.message.or(b.error.kind))
                .unwrap_or_else(|| format!("HTTP {status}"));
            return Err(match status {
                401 | 403 => ProcessorError::Rejected(message),
                _ => ProcessorError::Status { status, message },
            });
        }
        serde_json::from_slice(&body).map_err(|e| ProcessorError::Body(format!("{path}: {e}")))
    }
}

/// Objects that paginate by id.
pub trait HasId {
    fn id(&self) -> &str;
}

macro_rules! has_id {
    ($($t:ty),*) => { $(impl HasId for $t { fn id(&self) -> &str { &self.id } })* };
}
has_id!(Customer, Invoice, CreditNote, Refund);

fn build_http() -> awc::Client {
    let mut options = crate::net::Options::new(TIMEOUT);
    options.timeout = Some(TIMEOUT);
    crate::net::client(&options)
}
