//! Processor objects to revenue items: paid USD invoices add their total without
//! tax, issued credit notes subtract theirs, succeeded refunds subtract theirs, each
//! in the month it happened. Non-USD invoices are skipped and counted per currency.
//!
//! Tax comes out of a refund in the proportion of its invoice (`net / gross`,
//! rounded down) when the refunded charge belongs to a known invoice. A refund that
//! a credit note issued is left out: the credit note already subtracts it.
//! Every item is keyed by its processor object id, so re-syncing rewrites rather than
//! adds; a voided credit note or a failed refund is rewritten to zero.

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::processor::types::{CreditNote, Invoice, Refund};

use super::months::Month;

/// Microdollars per cent.
pub const MICRODOLLARS_PER_CENT: i64 = 10_000;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RevenueItem {
    pub object_id: String,
    /// `invoice`, `credit_note` or `refund`.
    pub kind: &'static str,
    pub customer: String,
    pub period: String,
    /// Signed, tax excluded.
    pub amount_microdollars: i64,
    pub gross_cents: i64,
    pub net_cents: i64,
    pub occurred_at_ms: i64,
}

/// What one sync turned into items, and what it skipped.
#[derive(Debug, Default)]
pub struct Converted {
    pub items: Vec<RevenueItem>,
    pub invoices_skipped: i64,
    pub skipped_currencies: BTreeMap<String, i64>,
}

fn micros(cents: i64) -> i64 {
    cents.saturating_mul(MICRODOLLARS_PER_CENT)
}

fn item(object_id: &str, kind: &'static str, customer: &str, at_secs: i64, micros: i64) -> RevenueItem {
    let at = at_secs.saturating_mul(1000);
    RevenueItem {
        object_id: object_id.to_owned(),
        kind,
        customer: customer.to_owned(),
        period: Month::of_ms(at).label(),
        amount_microdollars: micros,
        gross_cents: 0,
        net_cents: 0,
        occurred_at_ms: at,
    }
}

/// Converts one sync's objects. `known_invoices` maps invoice ids stored earlier to
/// their `(gross, net)` cents, for taking tax out of refunds of older invoices.
pub fn convert(
    invoices: &[Invoice],
    credit_notes: &[CreditNote],
    refunds: &[Refund],
    known_invoices: &HashMap<String, (i64, i64)>,
) -> Converted {
    let mut out = Converted::default();
    let mut ratios = known_invoices.clone();
    for inv in invoices {
        if !inv.currency.eq_ignore_ascii_case("usd") {
            out.invoices_skipped += 1;
            *out.skipped_currencies.entry(inv.currency.to_ascii_lowercase()).or_default() += 1;
            continue;
        }
        let (Some(customer), true) = (&inv.customer, inv.status.as_deref().is_none_or(|s| s == "paid"))
        else {
            out.invoices_skipped += 1;
            continue;
        };
        let mut it = item(&inv.id, "invoice", customer, inv.revenue_at(), micros(inv.net()));
        (it.gross_cents, it.net_cents) = (inv.total, inv.net());
        ratios.insert(inv.id.clone(), (inv.total, inv.net()));
        out.items.push(it);
    }
    let mut credited_refunds = HashSet::new();
    for cn in credit_notes.iter().filter(|c| c.currency.eq_ignore_ascii_case("usd")) {
        if let Some(r) = &cn.refund {
            credited_refunds.insert(r.clone());
        }
        let amount = if cn.status == "void" { 0 } else { -micros(cn.net()) };
        out.items.push(item(&cn.id, "credit_note", &cn.customer, cn.created, amount));
    }
    for rf in refunds.iter().filter(|r| r.currency.eq_ignore_ascii_case("usd")) {
        let Some(charge) = rf.charge() else { continue };
        let Some(customer) = &charge.customer else { continue };
        let counts =
            rf.status.as_deref().is_none_or(|s| s == "succeeded") && !credited_refunds.contains(&rf.id);
        let net = match charge.invoice.as_ref().and_then(|i| ratios.get(i)) {
            Some(&(gross, net)) if gross > 0 => {
                i64::try_from(i128::from(rf.amount) * i128::from(net) / i128::from(gross))
                    .unwrap_or(rf.amount)
            }
            _ => rf.amount,
        };
        let amount = if counts { -micros(net) } else { 0 };
        out.items.push(item(&rf.id, "refund", customer, rf.created, amount));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::processor::types::{Charge, ChargeRef, StatusTransitions};

    fn invoice(id: &str, currency: &str, total: i64, tax: i64, created: i64) -> Invoice {
        Invoice {
            id: id.into(),
            customer: Some("cus_1".into()),
            currency: currency.into(),
            created,
            status: Some("paid".into()),
            total,
            tax: Some(tax),
            total_excluding_tax: Some(total - tax),
            status_transitions: StatusTransitions { paid_at: Some(created) },
        }
    }

    fn refund(id: &str, amount: i64, invoice: Option<&str>, created: i64) -> Refund {
        Refund {
            id: id.into(),
            amount,
            currency: "usd".into(),
            created,
            status: Some("succeeded".into()),
            charge: Some(ChargeRef::Object(Charge {
                id: "ch_1".into(),
                customer: Some("cus_1".into()),
                invoice: invoice.map(Into::into),
            })),
        }
    }

    const JAN: i64 = 1_767_225_600; // 2026-01-01
    const FEB: i64 = 1_769_904_000; // 2026-02-01

    #[test]
    fn invoices_tax_excluded_other_currencies_skipped() {
        let c = convert(
            &[invoice("in_1", "usd", 12_000, 2_000, JAN), invoice("in_2", "eur", 500, 0, JAN)],
            &[],
            &[],
            &HashMap::new(),
        );
        assert_eq!(c.items.len(), 1);
        assert_eq!(c.items[0].amount_microdollars, 100_000_000);
        assert_eq!(c.items[0].period, "2026-01");
        assert_eq!(c.skipped_currencies.get("eur"), Some(&1));
        assert_eq!(c.invoices_skipped, 1);
    }

    #[test]
    fn refunds_leave_tax_and_credit_notes_out() {
        let cn = CreditNote {
            id: "cn_1".into(),
            customer: "cus_1".into(),
            currency: "usd".into(),
            created: FEB,
            status: "issued".into(),
            total: 1_200,
            total_excluding_tax: Some(1_000),
            refund: Some("re_2".into()),
        };
        let c = convert(
            &[invoice("in_1", "usd", 12_000, 2_000, JAN)],
            &[cn],
            &[refund("re_1", 6_000, Some("in_1"), FEB), refund("re_2", 1_200, Some("in_1"), FEB)],
            &HashMap::new(),
        );
        let by_id: HashMap<&str, &RevenueItem> = c.items.iter().map(|i| (i.object_id.as_str(), i)).collect();
        assert_eq!(by_id["cn_1"].amount_microdollars, -10_000_000);
        assert_eq!(by_id["cn_1"].period, "2026-02");
        assert_eq!(by_id["re_1"].amount_microdollars, -50_000_000, "6000 × 10000/12000 cents");
        assert_eq!(by_id["re_2"].amount_microdollars, 0, "the credit note counts it");
    }
}
