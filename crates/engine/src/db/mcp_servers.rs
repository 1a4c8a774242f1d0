//! MCP servers of an organization: created (already encrypted by the caller), listed,
//! found by name for the gateway, and deleted. Every change writes an audit row and an
//! `mcp_server_changes` row in its own transaction, so each instance's server cache
//! drops the old entry.

use diesel::prelude::*;
use diesel_async::RunQueryDsl;

use crate::db::audit::{self, actions, resources, Entry};
use crate::db::change_feed::change_feed;
use crate::db::models::McpServer;
use crate::db::schema::{mcp_server_changes, mcp_servers};
use crate::db::{DbResult, Pool};
use crate::util::{ids, time};
use crate::{record_audit, with_conn, with_tx};

/// Records in the caller's transaction that `(org_id, name)` changed.
macro_rules! note_server_change {
    ($conn:ident, $org_id:expr, $name:expr, $now:expr) => {{
        diesel::insert_into(mcp_server_changes::table)
            .values((
                mcp_server_changes::id.eq(ids::new_id()),
                mcp_server_changes::org_id.eq($org_id),
                mcp_server_changes::name.eq($name),
                mcp_server_changes::changed_at.eq($now),
            ))
            .execute($conn)
            .await?;
    }};
}

fn audit_entry<'a>(row: &'a McpServer, actor: &'a str, action: &'a str) -> Entry<'a> {
    let header_names: serde_json::Value = serde_json::from_str(&row.header_names).unwrap_or_default();
    Entry {
        org_id: &row.org_id,
        actor_user_id: Some(actor),
        action,
        resource_type: resources::MCP_SERVER,
        resource_id: Some(ids::prefixed(ids::MCP_SERVER, &row.id)),
        metadata: serde_json::json!({ "name": row.name, "url": row.url, "headerNames": header_names }),
    }
}

/// Creates `new`; a unique violation (a server of that name exists in the
/// organization) comes back as the database error, told by `is_unique_violation`.
pub async fn create(pool: &Pool, new: McpServer, actor: &str) -> DbResult<McpServer> {
    with_tx!(pool, |conn| {
        let row: McpServer = diesel::insert_into(mcp_servers::table)
            .values(&new)
            .returning(McpServer::as_returning())
            .get_result(conn)
            .await?;
        let entry = audit_entry(&row, actor, actions::MCP_SERVER_CREATED);
        record_audit!(conn, audit::new_event(entry, row.created_at))?;
        note_server_change!(conn, &row.org_id, &row.name, row.created_at);
        Ok(row)
    })
}

/// The organization's servers, by name.
pub async fn list(pool: &Pool, org_id: &str) -> DbResult<Vec<McpServer>> {
    with_conn!(pool, read, |conn| {
        Ok(mcp_servers::table
            .filter(mcp_servers::org_id.eq(org_id))
            .order(mcp_servers::name.asc())
            .select(McpServer::as_select())
            .load(conn)
            .await?)
    })
}

/// The organization's server called `name`, if it has one.
pub async fn find(pool: &Pool, org_id: &str, name: &str) -> DbResult<Option<McpServer>> {
    with_conn!(pool, read, |conn| {
        Ok(mcp_servers::table
            .filter(mcp_servers::org_id.eq(org_id))
            .filter(mcp_servers::name.eq(name))
            .select(McpServer::as_select())
            .first(conn)
            .await
            .optional()?)
    })
}

/// Deletes one of the organization's servers; `None` when it holds no such id.
pub async fn delete(pool: &Pool, org_id: &str, id: &str, actor: &str) -> DbResult<Option<McpServer>> {
    with_tx!(pool, |conn| {
        let row: Option<McpServer> = diesel::delete(
            mcp_servers::table.filter(mcp_servers::id.eq(id)).filter(mcp_servers::org_id.eq(org_id)),
        )
        .returning(McpServer::as_returning())
        .get_result(conn)
        .await
        .optional()?;
        if let Some(row) = &row {
            let now = time::now_ms();
            let entry = audit_entry(row, actor, actions::MCP_SERVER_DELETED);
            record_audit!(conn, audit::new_event(entry, now))?;
            note_server_change!(conn, &row.org_id, &row.name, now);
        }
        Ok(row)
    })
}

/// A server change: (change id, organization, name, when).
pub type ServerChange = (String, String, String, i64);

change_feed!(mcp_server_changes, ServerChange, (id, org_id, name, changed_at));
