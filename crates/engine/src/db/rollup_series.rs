//! Daily spend series: an organization's cost per UTC day under each value of one
//! dimension (model, API key, the value of one tag key, or each of a list of
//! customers), or under each model or key of one API key's or one customer's spend.
//! Read from the same day and hour rollup rows as the summary and attribution reads
//! (see [`super::rollups`]), each by its index prefix: a 90-day window adds up at
//! most 90 day rows per value, never raw events. Customers come as a list because
//! their rows are kept per customer: reading every customer's rows at once would
//! walk all of them for all time.

use std::collections::BTreeMap;

use crate::db::rollups::{self, Spec, Sums, WindowRow};
use crate::db::{DbResult, Pool};

/// What the series are of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeriesBy<'a> {
    Model,
    ApiKey,
    /// These customers, one series each.
    Customers(&'a [String]),
    /// The values of this tag key.
    Tag(&'a str),
}

/// Whose spend is split: the whole organization's, or one entity's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeriesScope<'a> {
    Org,
    /// Bare UUID of the key.
    ApiKey(&'a str),
    Customer(&'a str),
}

/// Sums per UTC day (days since the epoch).
pub type Days = BTreeMap<i64, Sums>;

/// The value a rollup row counts under.
type LabelOf = fn(&WindowRow) -> Option<String>;

/// The window's total per day, and per value (`""`: events without one, for keys)
/// its sums per day. Values of a tag or a customer leave out the events without one:
/// the total minus every value is theirs.
#[derive(Debug, Default)]
pub struct DailySeries {
    pub total: Days,
    pub values: BTreeMap<String, Days>,
}

/// The series of `scope`'s events created at or after `since` split `by`, or `None`
/// when a scope cannot be split that way (an entity's spend is kept by API key and
/// model only).
pub async fn daily_series(
    pool: &Pool,
    org_id: &str,
    (since, exclude_estimated): (i64, bool),
    scope: SeriesScope<'_>,
    by: SeriesBy<'_>,
) -> DbResult<Option<DailySeries>> {
    let total = Spec { dim: rollups::TOTAL, name: Some(""), label1: None };
    let (specs, label): (Vec<Spec<'_>>, LabelOf) = match (scope, by) {
        (SeriesScope::Org, SeriesBy::Model) => {
            (vec![total, Spec { dim: rollups::MODEL, name: Some(""), label1: None }], |r| {
                Some(r.label2.clone())
            })
        }
        (SeriesScope::Org, SeriesBy::ApiKey) => {
            (vec![total, Spec { dim: rollups::KEY_MODEL, name: Some(""), label1: None }], |r| {
                Some(r.label1.clone())
            })
        }
        (SeriesScope::Org, SeriesBy::Customers(ids)) => {
            let customers =
                ids.iter().map(|id| Spec { dim: rollups::SPEND_CUSTOMER, name: Some(id), label1: Some("") });
            (std::iter::once(total).chain(customers).collect(), |r| Some(r.name.clone()))
        }
        (SeriesScope::Org, SeriesBy::Tag(key)) => {
            (vec![total, Spec { dim: rollups::TAG_MODEL, name: Some(key), label1: None }], |r| {
                Some(r.label1.clone())
            })
        }
        (SeriesScope::ApiKey(id), SeriesBy::Model) => {
            (vec![Spec { dim: rollups::SPEND_KEY, name: Some(id), label1: Some("") }], source_model)
        }
        (SeriesScope::Customer(id), SeriesBy::Model) => {
            (vec![Spec { dim: rollups::SPEND_CUSTOMER, name: Some(id), label1: Some("") }], source_model)
        }
        (SeriesScope::Customer(id), SeriesBy::ApiKey) => {
            (vec![Spec { dim: rollups::SPEND_CUSTOMER, name: Some(id), label1: Some("") }], source_key)
        }
        _ => return Ok(None),
    };
    let rows = rollups::window(pool, org_id, since, exclude_estimated, &specs).await?;
    let scoped = scope != SeriesScope::Org;
    let mut out = DailySeries::default();
    for r in &rows {
        if r.dim == rollups::TOTAL {
            out.total.entry(r.day).or_default().add(&r.sums);
            continue;
        }
        let Some(value) = label(r) else { continue };
        out.values.entry(value).or_default().entry(r.day).or_default().add(&r.sums);
        if scoped {
            out.total.entry(r.day).or_default().add(&r.sums);
        }
    }
    Ok(Some(out))
}

/// The model of a spend-source row.
fn source_model(r: &WindowRow) -> Option<String> {
    rollups::parse_source_label(&r.label2).map(|(_, _, model)| model)
}

/// The API key (bare UUID, `""` for none) of a spend-source row.
fn source_key(r: &WindowRow) -> Option<String> {
    rollups::parse_source_label(&r.label2).map(|(key, _, _)| key.unwrap_or_default())
}
