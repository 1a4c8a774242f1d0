//! Budget entities as people name them: an API key by its name (a revoked key's
//! too, its past spend still names it), a user by the email of its membership in
//! the organization. Tags and customers have no other name than their id.

use std::collections::HashMap;

use spendgate_engine::db::{self, models::Budget, DbResult, Pool};
use spendgate_engine::util::ids;

/// The name of each of `rows`' entities, in order: key names in one query, each
/// distinct user once (a user outside the organization stays unnamed).
pub async fn entity_names(pool: &Pool, org_id: &str, rows: &[Budget]) -> DbResult<Vec<Option<String>>> {
    let key_ids: Vec<String> =
        rows.iter().filter_map(|b| ids::parse_prefixed(ids::API_KEY, &b.entity_id)).collect();
    let keys = db::budgets::key_names(pool, org_id, &key_ids).await?;
    let mut emails: HashMap<&str, Option<String>> = HashMap::new();
    for b in rows.iter().filter(|b| b.entity_type == "user") {
        if emails.contains_key(b.entity_id.as_str()) {
            continue;
        }
        let email = match ids::parse_prefixed(ids::USER, &b.entity_id) {
            Some(id) => db::orgs::find_member(pool, org_id, &id).await?.map(|m| m.email),
            None => None,
        };
        emails.insert(&b.entity_id, email);
    }
    Ok(rows
        .iter()
        .map(|b| match b.entity_type.as_str() {
            "api_key" => {
                ids::parse_prefixed(ids::API_KEY, &b.entity_id).and_then(|id| keys.get(&id).cloned())
            }
            "user" => emails.get(b.entity_id.as_str()).cloned().flatten(),
            _ => None,
        })
        .collect())
}
