//! The budget entities a cost counts against: the API key, the key's user, each
//! `key=value` tag (internal `_svc_` tags excepted) and the customer. One list, in two
//! shapes: [`entity_keys`] for the budget actors (reservations) and [`budget_targets`]
//! for the accounting commit (spend), so the two can never disagree.

use std::collections::BTreeMap;

use actors::budget::EntityType;
use actors::store::EntityKey;

use crate::auth::identity::KeyIdentity;
use crate::db::cost_events::BudgetTarget;
use crate::util::ids;
use crate::util::validate::RESERVED_TAG_PREFIX;

/// The budget entities of a call or event, as budget-actor keys.
pub fn entity_keys(
    key: &KeyIdentity,
    tags: &BTreeMap<String, String>,
    customer: Option<&str>,
) -> Vec<EntityKey> {
    let org = &key.org_id;
    let mut keys = vec![
        EntityKey::new(org.clone(), EntityType::ApiKey, ids::prefixed(ids::API_KEY, &key.key_id)),
        EntityKey::new(org.clone(), EntityType::User, ids::prefixed(ids::USER, &key.user_id)),
    ];
    for (k, v) in tags.iter().filter(|(k, _)| !k.starts_with(RESERVED_TAG_PREFIX)) {
        keys.push(EntityKey::new(org.clone(), EntityType::Tag, format!("{k}={v}")));
    }
    if let Some(c) = customer {
        keys.push(EntityKey::new(org.clone(), EntityType::Customer, c));
    }
    keys
}

/// The same entities, as the accounting commit's spend targets.
pub fn budget_targets(
    key: &KeyIdentity,
    tags: &BTreeMap<String, String>,
    customer: Option<&str>,
) -> Vec<BudgetTarget> {
    entity_keys(key, tags, customer)
        .into_iter()
        .map(|k| BudgetTarget {
            org_id: k.org_id,
            entity_type: k.entity_type.as_str(),
            entity_id: k.entity_id,
        })
        .collect()
}
