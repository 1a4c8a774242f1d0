//! Prefixed identifiers (`svc_key_<uuid>`): the prefix lives on the wire only; the
//! database stores the bare UUID so raw-UUID lookups need no translation.

use uuid::Uuid;

pub const ACTION: &str = "svc_act_";
pub const API_KEY: &str = "svc_key_";
pub const PROVIDER_CREDENTIAL: &str = "svc_cred_";
pub const COST_EVENT: &str = "svc_evt_";
pub const BUDGET: &str = "svc_bgt_";
pub const WEBHOOK: &str = "svc_wh_";
pub const DELIVERY: &str = "svc_del_";
pub const USER: &str = "svc_usr_";
pub const TOOL_COST: &str = "svc_tc_";
pub const MCP_SERVER: &str = "svc_mcp_";
pub const ORG: &str = "svc_org_";

/// A fresh bare UUID as stored in the database. Version 7 (time-ordered): new rows
/// land at the right edge of their primary-key index instead of on a random page,
/// which keeps group commits from dirtying (and writing to the WAL) one page per row.
pub fn new_id() -> String {
    Uuid::now_v7().to_string()
}

pub fn prefixed(prefix: &str, raw: &str) -> String {
    let mut s = String::with_capacity(prefix.len() + raw.len());
    s.push_str(prefix);
    s.push_str(raw);
    s
}

/// Strips `prefix` and checks the rest is a UUID; returns the canonical bare form.
pub fn parse_prefixed(prefix: &str, s: &str) -> Option<String> {
    s.strip_prefix(prefix).and_then(parse_uuid)
}

/// Accepts either `prefix<uuid>` or a bare UUID.
pub fn parse_prefixed_or_raw(prefix: &str, s: &str) -> Option<String> {
    parse_uuid(s.strip_prefix(prefix).unwrap_or(s))
}

pub fn parse_uuid(s: &str) -> Option<String> {
    Uuid::parse_str(s).ok().filter(|_| s.len() == 36).map(|u| u.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixed_ids_round_trip() {
        let id = new_id();
        let p = prefixed(API_KEY, &id);
        assert_eq!(parse_prefixed(API_KEY, &p), Some(id.clone()));
        assert_eq!(parse_prefixed(API_KEY, &id), None);
        assert_eq!(parse_prefixed_or_raw(COST_EVENT, &id), Some(id.clone()));
        assert_eq!(parse_prefixed(API_KEY, "svc_key_nope"), None);
        assert_eq!(parse_prefixed(API_KEY, &format!("{API_KEY}{}", id.replace('-', ""))), None);
    }
}
