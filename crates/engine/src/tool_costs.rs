//! Tool costs: what one invocation of a tool-protocol (MCP) tool costs, per
//! organization, server and tool. Both surfaces use it: the control plane manages
//! the table (`/api/tool-costs`), the proxy charges MCP tool events that carry no
//! explicit cost.
//!
//! Lookups go through a small cache (entries live [`CACHE_TTL`]); this process's own
//! writes invalidate their entries at once, another instance's take effect within
//! the TTL.

use std::sync::Arc;
use std::time::Duration;

use moka::sync::Cache;
use serde_json::Value;

use crate::db::{self, DbResult, Pool};
use crate::error::Issues;

/// Largest per-invocation cost: one million dollars, as for MCP tool events.
pub const MAX_COST_MICRODOLLARS: i64 = 1_000_000_000_000;
pub const MAX_NAME_CHARS: usize = 200;
pub const MAX_DESCRIPTION_CHARS: usize = 2_000;
pub const MAX_ANNOTATION_DEPTH: usize = 10;
pub const MAX_ANNOTATION_BYTES: usize = 16_384;
pub const MAX_TOOLS_PER_DISCOVERY: usize = 500;
pub const CACHE_TTL: Duration = Duration::from_secs(5);
const CACHE_ENTRIES: u64 = 100_000;

/// `(organization, server, tool)`.
type ToolKey = (Arc<str>, Arc<str>, Arc<str>);

/// Configured costs by tool; `None` caches "never discovered".
#[derive(Clone)]
pub struct ToolCostCache(Cache<ToolKey, Option<i64>>);

impl Default for ToolCostCache {
    fn default() -> Self {
        Self(Cache::builder().max_capacity(CACHE_ENTRIES).time_to_live(CACHE_TTL).build())
    }
}

impl ToolCostCache {
    /// The tool's configured cost, `None` when it was never discovered.
    pub async fn cost_of(
        &self,
        pool: &Pool,
        org_id: &str,
        server: &str,
        tool: &str,
    ) -> DbResult<Option<i64>> {
        let key: ToolKey = (org_id.into(), server.into(), tool.into());
        if let Some(cost) = self.0.get(&key) {
            return Ok(cost);
        }
        let cost = db::tool_costs::cost_of(pool, org_id, server, tool).await?;
        self.0.insert(key, cost);
        Ok(cost)
    }

    pub fn invalidate(&self, org_id: &str, server: &str, tool: &str) {
        self.0.invalidate(&(org_id.into(), server.into(), tool.into()));
    }
}

/// A server name: 1-200 characters, no `/`, no control characters.
pub fn check_server_name(name: &str, path: &[&str], issues: &mut Issues) {
    issues.check(
        is_name(name) && !name.contains('/'),
        path,
        "must be 1 to 200 characters without '/' or control characters",
    );
}

/// A tool name: 1-200 characters, no control characters.
pub fn check_tool_name(name: &str, path: &[&str], issues: &mut Issues) {
    issues.check(is_name(name), path, "must be 1 to 200 characters without control characters");
}

fn is_name(s: &str) -> bool {
    let n = s.chars().count();
    (1..=MAX_NAME_CHARS).contains(&n) && !s.chars().any(char::is_control)
}

pub fn check_cost(cost: i64, path: &[&str], issues: &mut Issues) {
    issues.check(
        (0..=MAX_COST_MICRODOLLARS).contains(&cost),
        path,
        "must be an integer from 0 to 1,000,000,000,000 (one million dollars)",
    );
}

/// Annotations: an object, at most 10 nesting levels and 16 KB serialized.
pub fn check_annotations(value: &Value, path: &[&str], issues: &mut Issues) {
    if !value.is_object() {
        issues.push(path, "must be an object");
    } else if crate::util::validate::json_depth(value) > MAX_ANNOTATION_DEPTH {
        issues.push(path, "must nest at most 10 levels");
    } else if value.to_string().len() > MAX_ANNOTATION_BYTES {
        issues.push(path, "must be at most 16384 bytes serialized");
    }
}
