//! Who an API key speaks for: the raw key format and the [`KeyIdentity`] a valid key
//! resolves to, with the settings enforcement needs. Plain data, read by every layer
//! that acts for a key (accounting, policy, the proxy); validation and its caches are
//! in `auth::keys`.

use std::collections::BTreeMap;

use crate::db::models::ApiKey;
use crate::plans::Plan;

/// Every raw key starts with this.
pub const RAW_KEY_PREFIX: &str = "svc_live_sk_";
/// Hex characters after the prefix (16 random bytes).
const RAW_KEY_HEX_LEN: usize = 32;
/// `svc_live_sk_` + 32 hex = 44 characters. (The spec says 43: its total was
/// counted for the original product's shorter prefix; the prefix and the 32 hex
/// characters are what it specifies, so they win.)
pub const RAW_KEY_LEN: usize = RAW_KEY_PREFIX.len() + RAW_KEY_HEX_LEN;
/// How many leading characters of the raw key are kept, in clear, as `keyPrefix`.
pub const KEY_PREFIX_LEN: usize = 16;
/// The request header carrying the raw key.
pub const KEY_HEADER: &str = "x-service-key";

/// A fresh raw key from the operating system's CSPRNG.
pub fn generate_raw_key() -> String {
    format!("{RAW_KEY_PREFIX}{}", crate::auth::random_hex(RAW_KEY_HEX_LEN / 2))
}

/// Whether `raw` has the raw key shape: the prefix and 32 lowercase hex characters.
pub fn is_raw_key(raw: &str) -> bool {
    raw.len() == RAW_KEY_LEN
        && raw
            .strip_prefix(RAW_KEY_PREFIX)
            .is_some_and(|hex| hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
}

/// The part of a raw key shown in lists (`keyPrefix`).
pub fn key_prefix(raw: &str) -> String {
    raw.chars().take(KEY_PREFIX_LEN).collect()
}

/// Who a valid key speaks for, with the settings enforcement needs. IDs are the bare
/// UUIDs the database stores.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyIdentity {
    pub key_id: String,
    pub org_id: String,
    pub user_id: String,
    pub name: String,
    pub key_hash: String,
    pub plan: Plan,
    pub default_tags: BTreeMap<String, String>,
    /// `None` = unrestricted; an empty list allows nothing.
    pub allowed_models: Option<Vec<String>>,
    pub allowed_providers: Option<Vec<String>>,
    pub allowed_customers: Option<Vec<String>>,
    /// MCP tools (`server/tool`, `server/*`); `None` = every tool.
    pub allowed_tools: Option<Vec<String>>,
    pub require_customer_id: bool,
    /// A call must not bring its own provider credential.
    pub require_stored_credentials: bool,
    /// The key-level API version setting, if any.
    pub api_version: Option<String>,
}

impl KeyIdentity {
    /// Builds the identity from a key row and its organization's plan. Stored JSON
    /// that does not parse is treated as empty (tags) or as "allow nothing" (lists):
    /// a corrupt restriction must never widen into no restriction.
    pub fn from_row(row: ApiKey, plan: &str) -> Self {
        KeyIdentity {
            plan: plan.parse().unwrap_or(Plan::Free),
            default_tags: stored_tags(&row.default_tags),
            allowed_models: stored_list(row.allowed_models.as_deref()),
            allowed_providers: stored_list(row.allowed_providers.as_deref()),
            allowed_customers: stored_list(row.allowed_customers.as_deref()),
            allowed_tools: stored_list(row.allowed_tools.as_deref()),
            require_customer_id: row.require_customer_id,
            require_stored_credentials: row.require_stored_credentials,
            api_version: row.api_version,
            key_id: row.id,
            org_id: row.org_id,
            user_id: row.user_id,
            name: row.name,
            key_hash: row.key_hash,
        }
    }
}

/// Decodes the stored `default_tags` JSON object; unreadable text reads as no tags.
pub fn stored_tags(json: &str) -> BTreeMap<String, String> {
    serde_json::from_str(json).unwrap_or_default()
}

/// Decodes a stored allow-list: NULL is "unrestricted", unreadable text is "allow
/// nothing".
pub fn stored_list(json: Option<&str>) -> Option<Vec<String>> {
    json.map(|s| serde_json::from_str(s).unwrap_or_default())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn generated_keys_have_the_spec_format() {
        let a = generate_raw_key();
        let b = generate_raw_key();
        assert_eq!(a.len(), 44);
        assert!(a.starts_with("svc_live_sk_"));
        assert!(is_raw_key(&a), "{a}");
        assert_ne!(a, b);
        assert_eq!(key_prefix(&a).len(), 16);
        assert!(a.starts_with(&key_prefix(&a)));
    }

    #[test]
    fn malformed_keys_are_refused() {
        let good = format!("svc_live_sk_{}", "0123456789abcdef".repeat(2));
        assert!(is_raw_key(&good));
        assert!(!is_raw_key(""));
        assert!(!is_raw_key(&good.to_uppercase()));
        assert!(!is_raw_key(&good.replace("svc_live_sk_", "svc_test_sk_")));
        assert!(!is_raw_key(&format!("{good}0")));
        assert!(!is_raw_key(&good[..43]));
        assert!(!is_raw_key(&good.replace('a', "A")));
        assert!(!is_raw_key(&good.replace('f', "g")));
        // Multi-byte characters of the right byte length do not slip through.
        assert!(!is_raw_key(&format!("svc_live_sk_{}é", "a".repeat(30))));
    }

    pub(crate) fn identity_row() -> ApiKey {
        ApiKey {
            id: "k".into(),
            org_id: "o".into(),
            user_id: "u".into(),
            name: "n".into(),
            key_prefix: "svc_live_sk_abcd".into(),
            key_hash: "h".into(),
            default_tags: r#"{"team":"core"}"#.into(),
            allowed_models: Some(r#"["gpt-4o"]"#.into()),
            allowed_providers: None,
            allowed_customers: Some("not json".into()),
            require_customer_id: true,
            api_version: None,
            last_used_at: None,
            created_at: 0,
            revoked_at: None,
            require_stored_credentials: false,
            allowed_tools: None,
        }
    }

    pub(crate) fn identity() -> KeyIdentity {
        KeyIdentity::from_row(identity_row(), "pro")
    }

    #[test]
    fn identity_decodes_stored_settings() {
        let id = identity();
        assert_eq!(id.plan, Plan::Pro);
        assert_eq!(id.default_tags.get("team").map(String::as_str), Some("core"));
        assert_eq!(id.allowed_models, Some(vec!["gpt-4o".to_owned()]));
        assert_eq!(id.allowed_providers, None);
        // Corrupt restrictions fail closed.
        assert_eq!(id.allowed_customers, Some(vec![]));
    }
}
