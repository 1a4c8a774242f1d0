//! The processor objects margins read, with only the fields used. Amounts are in
//! the currency's smallest unit (cents for USD), as Stripe sends them.

use serde::Deserialize;

/// One page of a Stripe list: `data` plus whether more follow.
#[derive(Debug, Deserialize)]
pub struct Page<T> {
    pub data: Vec<T>,
    #[serde(default)]
    pub has_more: bool,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Customer {
    pub id: String,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub email: Option<String>,
    #[serde(default)]
    pub metadata: serde_json::Map<String, serde_json::Value>,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct StatusTransitions {
    #[serde(default)]
    pub paid_at: Option<i64>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Invoice {
    pub id: String,
    #[serde(default)]
    pub customer: Option<String>,
    pub currency: String,
    pub created: i64,
    #[serde(default)]
    pub status: Option<String>,
    pub total: i64,
    #[serde(default)]
    pub tax: Option<i64>,
    #[serde(default)]
    pub total_excluding_tax: Option<i64>,
    #[serde(default)]
    pub status_transitions: StatusTransitions,
}

impl Invoice {
    /// The invoice total without tax, in the smallest unit.
    pub fn net(&self) -> i64 {
        self.total_excluding_tax.unwrap_or_else(|| self.total.saturating_sub(self.tax.unwrap_or(0)))
    }

    /// When the invoice counts as revenue: its payment, else its creation (Unix seconds).
    pub fn revenue_at(&self) -> i64 {
        self.status_transitions.paid_at.unwrap_or(self.created)
    }
}

#[derive(Debug, Clone, Deserialize)]
pub struct CreditNote {
    pub id: String,
    pub customer: String,
    pub currency: String,
    pub created: i64,
    /// `issued` or `void`.
    pub status: String,
    pub total: i64,
    #[serde(default)]
    pub total_excluding_tax: Option<i64>,
    /// The refund this credit note created, if it refunded money.
    #[serde(default)]
    pub refund: Option<String>,
}

impl CreditNote {
    pub fn net(&self) -> i64 {
        self.total_excluding_tax.unwrap_or(self.total)
    }
}

/// A refund, listed with `expand[]=data.charge` so its customer and invoice are known.
#[derive(Debug, Clone, Deserialize)]
pub struct Refund {
    pub id: String,
    pub amount: i64,
    pub currency: String,
    pub created: i64,
    /// `pending`, `requires_action`, `succeeded`, `failed` or `canceled`.
    #[serde(default)]
    pub status: Option<String>,
    #[serde(default)]
    pub charge: Option<ChargeRef>,
}

/// A refund's charge: an id, or the object when expanded.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum ChargeRef {
    Object(Charge),
    Id(String),
}

impl Refund {
    /// The expanded charge, when there is one.
    pub fn charge(&self) -> Option<&Charge> {
        match &self.charge {
            Some(ChargeRef::Object(c)) => Some(c),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
pub struct Charge {
    pub id: String,
    #[serde(default)]
    pub customer: Option<String>,
    #[serde(default)]
    pub invoice: Option<String>,
}

/// Stripe's error body: `{ "error": { "type", "message", "code"? } }`.
#[derive(Debug, Deserialize)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Deserialize)]
pub struct ErrorDetail {
    #[serde(default)]
    pub message: Option<String>,
    #[serde(rename = "type", default)]
    pub kind: Option<String>,
}
