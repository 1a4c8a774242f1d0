//! Auto-matching: which processor customer a `customer` tag value seen in cost
//! events names. A tag value matches a processor customer when it equals, in order
//! of confidence:
//!
//! | what | confidence |
//! |---|---|
//! | the processor customer id (`cus_…`) | 1.0 |
//! | a metadata value of the customer (e.g. `metadata[customer]`) | 0.95 |
//! | the email, ignoring case | 0.9 |
//! | the name, ignoring case | 0.8 |
//! | the name as a slug (lower case, runs of other characters as one `-`) | 0.7 |
//!
//! Only unambiguous matches are made: a tag value that matches two processor
//! customers equally well is left for a person. A processor customer gets at most
//! one auto mapping, to its best match; customers and tag values that are already
//! mapped are left alone.

use std::collections::{BTreeMap, BTreeSet};

use crate::processor::types::Customer;

#[derive(Debug, Clone, PartialEq)]
pub struct AutoMatch {
    pub processor_customer_id: String,
    pub tag_value: String,
    pub confidence: f64,
}

fn slug(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        if c.is_alphanumeric() {
            out.extend(c.to_lowercase());
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    out.trim_matches('-').to_owned()
}

/// How well `value` names `customer`, if at all.
pub fn confidence(customer: &Customer, value: &str) -> Option<f64> {
    if value == customer.id {
        return Some(1.0);
    }
    if customer.metadata.values().any(|v| v.as_str() == Some(value)) {
        return Some(0.95);
    }
    if customer.email.as_deref().is_some_and(|e| e.eq_ignore_ascii_case(value)) {
        return Some(0.9);
    }
    let name = customer.name.as_deref().unwrap_or_default();
    if !name.is_empty() && name.to_lowercase() == value.to_lowercase() {
        return Some(0.8);
    }
    (!name.is_empty() && !slug(name).is_empty() && slug(name) == value).then_some(0.7)
}

/// The auto mappings to create among the unmapped customers and tag values.
pub fn auto_matches(customers: &[Customer], tag_values: &BTreeSet<String>) -> Vec<AutoMatch> {
    // Best candidate per customer, and how many customers each value matches at each level.
    let mut best: BTreeMap<&str, (f64, &str)> = BTreeMap::new();
    let mut per_value: BTreeMap<(&str, u64), usize> = BTreeMap::new();
    for c in customers {
        for v in tag_values {
            let Some(conf) = confidence(c, v) else { continue };
            *per_value.entry((v.as_str(), conf.to_bits())).or_default() += 1;
            if best.get(c.id.as_str()).is_none_or(|(b, _)| conf > *b) {
                best.insert(&c.id, (conf, v));
            }
        }
    }
    let mut taken = BTreeSet::new();
    let mut out = Vec::new();
    let mut ordered: Vec<(&str, (f64, &str))> = best.into_iter().collect();
    ordered.sort_by(|a, b| b.1 .0.total_cmp(&a.1 .0).then(a.0.cmp(b.0)));
    for (customer, (conf, value)) in ordered {
        let unambiguous = per_value.get(&(value, conf.to_bits())) == Some(&1);
        if unambiguous && taken.insert(value) {
            out.push(AutoMatch {
                processor_customer_id: customer.to_owned(),
                tag_value: value.to_owned(),
                confidence: conf,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cus(id: &str, name: &str, email: &str, meta: &[(&str, &str)]) -> Customer {
        Customer {
            id: id.into(),
            name: Some(name.into()),
            email: Some(email.into()),
            metadata: meta.iter().map(|(k, v)| ((*k).to_owned(), serde_json::json!(v))).collect(),
        }
    }

    #[test]
    fn matches_by_rule_and_skips_ambiguity() {
        let customers = [
            cus("cus_1", "Acme Corp", "billing@acme.com", &[("customer", "acme-tenant")]),
            cus("cus_2", "Globex", "ops@globex.com", &[]),
            cus("cus_3", "Twin", "a@twin.com", &[]),
            cus("cus_4", "twin", "b@twin.com", &[]),
        ];
        let values: BTreeSet<String> = ["acme-tenant", "acme-corp", "OPS@globex.com", "twin", "cus_9"]
            .into_iter()
            .map(String::from)
            .collect();
        let got = auto_matches(&customers, &values);
        let pairs: Vec<(&str, &str, f64)> = got
            .iter()
            .map(|m| (m.processor_customer_id.as_str(), m.tag_value.as_str(), m.confidence))
            .collect();
        assert_eq!(pairs, [("cus_1", "acme-tenant", 0.95), ("cus_2", "OPS@globex.com", 0.9)]);
        assert_eq!(confidence(&customers[0], "acme-corp"), Some(0.7));
        assert_eq!(confidence(&customers[1], "cus_2"), Some(1.0));
    }
}
