//! Tools a provider runs itself during a call (the Responses API's web search, file
//! search, code interpreter, ...): billed per call on top of the tokens, so the
//! settlement counts them, prices them from the table's `builtin_tools`, and notes any
//! without a price, which is never treated as free.

use std::collections::{BTreeMap, BTreeSet};

use spendgate_engine::util::validate::MAX_TAG_VALUE;
use spendgate_llm::pricing::{PricingTable, Provider};
use spendgate_llm::usage::BuiltinCall;

/// Code interpreter calls are charged per container, not per call.
const PER_CONTAINER: &str = "code_interpreter_call";

/// The provider-run tools of one call: calls per item type, and what they cost.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct BuiltinCharge {
    pub counts: BTreeMap<String, u64>,
    /// µ$, the priced tools only.
    pub cost: i64,
    /// At least one tool has no price in the table.
    pub unpriced: bool,
}

impl BuiltinCharge {
    /// `file_search_call:1,web_search_call:2`, sorted by type; `None` without tools.
    /// An upstream names the types, so the value stops at the last whole entry that
    /// fits a tag value's bound rather than growing with whatever it reports.
    pub fn tag(&self) -> Option<String> {
        let mut tag = String::new();
        for (kind, n) in &self.counts {
            let entry = format!("{kind}:{n}");
            let sep = usize::from(!tag.is_empty());
            if tag.chars().count() + sep + entry.chars().count() > MAX_TAG_VALUE {
                break;
            }
            if sep == 1 {
                tag.push(',');
            }
            tag.push_str(&entry);
        }
        (!tag.is_empty()).then_some(tag)
    }
}

/// Counts and prices `calls`: each at its per-call price, the code interpreter once per
/// distinct container.
pub fn charge(table: &PricingTable, provider: Provider, calls: &[BuiltinCall]) -> BuiltinCharge {
    let mut out = BuiltinCharge::default();
    let mut containers: BTreeSet<&str> = BTreeSet::new();
    for call in calls {
        *out.counts.entry(call.kind.clone()).or_default() += 1;
        // A call in a container already charged for costs nothing more.
        let new_unit =
            call.kind != PER_CONTAINER || call.container.as_deref().is_none_or(|c| containers.insert(c));
        if !new_unit {
            continue;
        }
        match table.builtin_tool_price(provider, &call.kind) {
            Some(price) => out.cost = out.cost.saturating_add(price),
            None => out.unpriced = true,
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn call(kind: &str, container: Option<&str>) -> BuiltinCall {
        BuiltinCall { kind: kind.into(), id: String::new(), container: container.map(str::to_owned) }
    }

    #[test]
    fn priced_per_call_and_per_container() {
        let table = PricingTable::builtin().unwrap();
        let calls = [
            call("web_search_call", None),
            call("web_search_call", None),
            call("code_interpreter_call", Some("c1")),
            call("code_interpreter_call", Some("c1")),
            call("code_interpreter_call", Some("c2")),
        ];
        let c = charge(&table, Provider::OpenAi, &calls);
        assert_eq!(c.cost, 2 * 10_000 + 2 * 30_000);
        assert!(!c.unpriced);
        assert_eq!(c.tag().as_deref(), Some("code_interpreter_call:3,web_search_call:2"));
    }

    #[test]
    fn an_unknown_tool_is_unpriced_not_free() {
        let table = PricingTable::builtin().unwrap();
        let c = charge(&table, Provider::OpenAi, &[call("image_generation_call", None)]);
        assert_eq!((c.cost, c.unpriced), (0, true));
        assert_eq!(charge(&table, Provider::OpenAi, &[]).tag(), None);
    }

    #[test]
    fn the_tag_holds_whole_entries_within_a_tag_values_bound() {
        let table = PricingTable::builtin().unwrap();
        let kinds: Vec<String> = (0..100).map(|i| format!("tool_{i:03}_{}_call", "x".repeat(20))).collect();
        let calls: Vec<BuiltinCall> = kinds.iter().map(|k| call(k, None)).collect();
        let tag = charge(&table, Provider::OpenAi, &calls).tag().unwrap();
        assert!(tag.chars().count() <= MAX_TAG_VALUE, "{} chars", tag.chars().count());
        assert!(tag.split(',').all(|e| e.ends_with("_call:1")), "only whole entries: {tag}");
        assert!(tag.starts_with("tool_000_"));
    }
}
