//! MCP servers of an organization, on the gateway's hot path (`{proxy}/mcp/{name}`):
//! the rules of a server's name and headers, and an in-memory cache of each
//! organization's servers with their headers decrypted, so a forwarded MCP message
//! decrypts nothing and reads no table.
//!
//! A create or delete drops its entry at once on the instance that made it, and on
//! every other instance through the change feed (`crate::changes`).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use moka::sync::Cache;

use crate::credentials::CredentialError;
use crate::db::{self, Pool};

/// Most headers one server may carry.
pub const MAX_HEADERS: usize = 20;
/// Longest header value.
pub const MAX_HEADER_VALUE_CHARS: usize = 4096;

const CACHE_CAPACITY: u64 = 10_000;
/// A safety net only: changes arrive through the feed within about a second.
const CACHE_TTL: Duration = Duration::from_secs(600);

/// Headers the gateway sets itself, or that would confuse the transport: a server's
/// stored headers may not name them.
const RESERVED_HEADERS: &[&str] = &[
    "host",
    "content-length",
    "content-type",
    "accept",
    "connection",
    "transfer-encoding",
    "te",
    "upgrade",
    "keep-alive",
    "proxy-authorization",
    "mcp-session-id",
    "mcp-protocol-version",
    "last-event-id",
    "x-service-key",
];

/// Whether `name` is a valid server name: `^[a-z0-9][a-z0-9_-]{0,63}$`.
pub fn is_server_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    let allowed = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'_' || *b == b'-';
    matches!(bytes.first(), Some(b) if b.is_ascii_lowercase() || b.is_ascii_digit())
        && bytes.len() <= 64
        && bytes.iter().all(allowed)
}

/// Most entries of a key's `allowedTools`.
pub const MAX_ALLOWED_TOOLS: usize = 100;

/// Whether `entry` is an `allowedTools` entry: `server/tool` or `server/*`, the
/// server a valid server name, the tool 1-200 characters without control characters.
pub fn is_tool_rule(entry: &str) -> bool {
    let Some((server, tool)) = entry.split_once('/') else { return false };
    let tool_ok = (1..=200).contains(&tool.chars().count()) && !tool.chars().any(char::is_control);
    is_server_name(server) && tool_ok
}

/// Whether `allowed` (a key's `allowedTools`; `None` = all) lets the key use `tool` of
/// `server`.
pub fn tool_allowed(allowed: Option<&[String]>, server: &str, tool: &str) -> bool {
    let Some(allowed) = allowed else { return true };
    allowed
        .iter()
        .any(|entry| entry.split_once('/').is_some_and(|(s, t)| s == server && (t == "*" || t == tool)))
}

/// Why a header cannot be stored, if it cannot.
pub fn header_problem(name: &str, value: &str) -> Option<&'static str> {
    if name.is_empty() || name.len() > 100 || !name.bytes().all(is_token_byte) {
        return Some("must be an HTTP header name of at most 100 characters");
    }
    if RESERVED_HEADERS.contains(&name.to_ascii_lowercase().as_str()) {
        return Some("is set by the gateway and cannot be stored");
    }
    let visible = value.bytes().all(|b| b == b' ' || b == b'\t' || b.is_ascii_graphic());
    if value.is_empty() || value.len() > MAX_HEADER_VALUE_CHARS || !visible {
        return Some("value must be 1 to 4096 visible ASCII characters");
    }
    None
}

fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// A server as the gateway forwards to it.
#[derive(Debug)]
pub struct Server {
    /// Bare id.
    pub id: String,
    pub name: String,
    pub url: String,
    /// Decrypted, sent on every request to the server.
    pub headers: Vec<(String, String)>,
}

/// Decrypted servers per (organization, name); `None` caches "has none".
pub struct ServerCache {
    entries: Cache<(String, String), Option<Arc<Server>>>,
    /// Bumped by every invalidation (see `crate::credentials::CredentialCache`).
    epoch: AtomicU64,
}

impl Default for ServerCache {
    fn default() -> Self {
        Self {
            entries: Cache::builder().max_capacity(CACHE_CAPACITY).time_to_live(CACHE_TTL).build(),
            epoch: AtomicU64::new(0),
        }
    }
}

impl ServerCache {
    /// The organization's server called `name`, with its headers decrypted.
    pub async fn server(
        &self,
        pool: &Pool,
        secret_key: Option<&str>,
        org_id: &str,
        name: &str,
    ) -> Result<Option<Arc<Server>>, CredentialError> {
        let key = (org_id.to_owned(), name.to_owned());
        if let Some(hit) = self.entries.get(&key) {
            return Ok(hit);
        }
        let epoch = self.epoch.load(Ordering::Acquire);
        let Some(row) = db::mcp_servers::find(pool, org_id, name).await? else {
            self.keep(epoch, key, None);
            return Ok(None);
        };
        let headers = match &row.encrypted_headers {
            None => Vec::new(),
            Some(sealed) => {
                let secret_key = secret_key.ok_or(CredentialError::NoSecretKey)?;
                let undecryptable = || CredentialError::Undecryptable(format!("MCP server {name}"));
                let plain =
                    crate::crypto::decrypt(secret_key, org_id, sealed).map_err(|_| undecryptable())?;
                let map: BTreeMap<String, String> =
                    serde_json::from_str(&plain).map_err(|_| undecryptable())?;
                map.into_iter().collect()
            }
        };
        let server = Arc::new(Server { id: row.id, name: row.name, url: row.url, headers });
        self.keep(epoch, key, Some(Arc::clone(&server)));
        Ok(Some(server))
    }

    fn keep(&self, epoch: u64, key: (String, String), value: Option<Arc<Server>>) {
        self.entries.insert(key.clone(), value);
        if self.epoch.load(Ordering::Acquire) != epoch {
            self.entries.invalidate(&key);
        }
    }

    /// Drops the cached entry of `(org_id, name)`.
    pub fn invalidate(&self, org_id: &str, name: &str) {
        self.epoch.fetch_add(1, Ordering::AcqRel);
        self.entries.invalidate(&(org_id.to_owned(), name.to_owned()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_names() {
        assert!(is_server_name("search"));
        assert!(is_server_name("0-a_b"));
        assert!(is_server_name(&"a".repeat(64)));
        assert!(!is_server_name(&"a".repeat(65)));
        assert!(!is_server_name(""));
        assert!(!is_server_name("_x"));
        assert!(!is_server_name("Search"));
        assert!(!is_server_name("a/b"));
    }

    #[test]
    fn tool_rules() {
        assert!(is_tool_rule("search/web_search") && is_tool_rule("search/*"));
        assert!(!is_tool_rule("search") && !is_tool_rule("Search/x") && !is_tool_rule("search/"));
        let allowed = vec!["search/web".to_owned(), "mail/*".to_owned()];
        assert!(tool_allowed(None, "any", "thing"));
        assert!(tool_allowed(Some(&allowed), "search", "web"));
        assert!(!tool_allowed(Some(&allowed), "search", "fetch"));
        assert!(tool_allowed(Some(&allowed), "mail", "send"));
        assert!(!tool_allowed(Some(&[]), "search", "web"));
    }

    #[test]
    fn header_rules() {
        assert_eq!(header_problem("Authorization", "Bearer abc"), None);
        assert!(header_problem("Mcp-Session-Id", "x").is_some());
        assert!(header_problem("bad name", "x").is_some());
        assert!(header_problem("X-Token", "").is_some());
        assert!(header_problem("X-Token", "a\nb").is_some());
    }
}
