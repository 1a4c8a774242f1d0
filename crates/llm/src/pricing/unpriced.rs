//! Models the price table does not know, as this process sees them: the first call of
//! each (provider, model) pair logs a warning and counts in
//! `spendgate_unpriced_models_total{provider}`, so that an operator learns what to add
//! to the table. Such calls are charged at the provider's conservative fallback price
//! (see `PricingTable::fallback_price` and docs/pricing.md).
//!
//! The list the operator reads (`spendgate pricing check`, `GET /v1/policy`) comes from
//! the database instead (`db::unpriced`), so that it spans every instance and restarts.

use dashmap::{DashMap, DashSet};
use prometheus::IntCounterVec;

/// Distinct pairs remembered per process. Model names come from requests, so the set is
/// bounded: past this many, every call of a pair not remembered counts under its
/// provider again, but is neither remembered nor logged one by one.
pub const MAX_REMEMBERED: usize = 1_000;

/// Longest model name logged; longer ones are cut (at a character boundary).
const MAX_LOGGED_NAME: usize = 200;

/// The per-process record of unknown models seen.
pub struct UnpricedModels {
    /// One set per provider as cost events name it: the wire format's provider on the
    /// built-in upstreams, the upstream's own name on an operator-defined one. Those
    /// names come from the configuration, never from a request, so the outer map stays
    /// small; a lookup borrows both names instead of building a key.
    seen: DashMap<Box<str>, DashSet<Box<str>>>,
    first_seen: IntCounterVec,
}

impl UnpricedModels {
    /// A record counting first sightings in `first_seen` (labelled by provider).
    pub fn new(first_seen: IntCounterVec) -> Self {
        UnpricedModels { seen: DashMap::new(), first_seen }
    }

    /// Notes one call of `model` at `provider` (the cost event's provider), which the
    /// table does not price. Returns whether this is the first call of the pair in this
    /// process. The common case (a pair already seen) takes two shard read locks and
    /// allocates nothing.
    pub fn note(&self, provider: &str, model: &str) -> bool {
        if self.contains(provider, model) {
            return false;
        }
        if self.len() >= MAX_REMEMBERED {
            self.first_seen.with_label_values(&[provider]).inc();
            return false;
        }
        let fresh = self.seen.entry(provider.into()).or_default().insert(model.into());
        if fresh {
            self.first_seen.with_label_values(&[provider]).inc();
            tracing::warn!(
                provider,
                model = truncate(model, MAX_LOGGED_NAME),
                "model not in the price table: charged at the provider's fallback price \
                 (add it with SPENDGATE_PRICING_FILE, or per organization with PUT /api/model-prices/{{provider}}/{{model}}; see docs/pricing.md)"
            );
            if self.len() == MAX_REMEMBERED {
                tracing::warn!(
                    "{MAX_REMEMBERED} unpriced models seen: further new ones are no longer logged one by one"
                );
            }
        }
        fresh
    }

    /// Whether the pair was seen already.
    pub fn contains(&self, provider: &str, model: &str) -> bool {
        self.seen.get(provider).is_some_and(|models| models.contains(model))
    }

    /// How many distinct pairs this process remembers.
    pub fn len(&self) -> usize {
        self.seen.iter().map(|models| models.len()).sum()
    }

    /// Whether no unknown model was seen yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn truncate(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use prometheus::Opts;

    use super::*;

    fn record() -> UnpricedModels {
        UnpricedModels::new(IntCounterVec::new(Opts::new("t", "t"), &["provider"]).unwrap())
    }

    fn counted(r: &UnpricedModels, provider: &str) -> u64 {
        r.first_seen.with_label_values(&[provider]).get()
    }

    #[test]
    fn each_pair_counts_once() {
        let r = record();
        assert!(r.note("openai", "gpt-x"));
        assert!(!r.note("openai", "gpt-x"));
        assert!(r.note("anthropic", "gpt-x"), "pairs are per provider");
        assert!(r.note("openai", "gpt-y"));
        assert!(r.note("openrouter", "gpt-y"), "an operator-defined upstream counts under its own name");
        assert_eq!(
            (counted(&r, "openai"), counted(&r, "anthropic"), counted(&r, "openrouter"), r.len()),
            (2, 1, 1, 4)
        );
        assert!(r.contains("openai", "gpt-y") && !r.contains("google", "gpt-y"));
    }

    #[test]
    fn the_set_is_bounded() {
        let r = record();
        for i in 0..MAX_REMEMBERED {
            assert!(r.note("google", &format!("m{i}")));
        }
        assert!(!r.note("google", "one-more"));
        assert!(!r.note("google", "one-more"));
        assert_eq!(r.len(), MAX_REMEMBERED);
        assert_eq!(counted(&r, "google"), MAX_REMEMBERED as u64 + 2);
        assert_eq!(truncate("héllo", 2), "h");
    }
}
