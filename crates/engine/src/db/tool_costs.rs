//! Tool costs: discovery upserts, manual overrides, resets, the organization's list
//! and the lookup behind MCP charging.
//!
//! Discovery is one upsert per tool on `(org_id, server_name, tool_name)`, so
//! concurrent discoveries of one tool cannot collide, and a `manual` cost survives
//! every later discovery (the conflict update keeps it).

use diesel::dsl::sql;
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Text};
use diesel::upsert::excluded;
use diesel_async::RunQueryDsl;

use crate::db::models::ToolCost;
use crate::db::schema::tool_costs;
use crate::db::{DbError, DbResult, Pool};
use crate::{with_conn, with_tx};

pub const DISCOVERED: &str = "discovered";
pub const MANUAL: &str = "manual";

/// Every tool cost of the organization, by server then tool name.
pub async fn list(pool: &Pool, org_id: &str) -> DbResult<Vec<ToolCost>> {
    with_conn!(pool, read, |conn| {
        Ok(tool_costs::table
            .filter(tool_costs::org_id.eq(org_id))
            .order((tool_costs::server_name.asc(), tool_costs::tool_name.asc()))
            .select(ToolCost::as_select())
            .load(conn)
            .await?)
    })
}

/// The configured per-invocation cost of one tool, if it was ever discovered.
pub async fn cost_of(pool: &Pool, org_id: &str, server: &str, tool: &str) -> DbResult<Option<i64>> {
    with_conn!(pool, read, |conn| {
        Ok(tool_costs::table
            .filter(tool_costs::org_id.eq(org_id))
            .filter(tool_costs::server_name.eq(server))
            .filter(tool_costs::tool_name.eq(tool))
            .select(tool_costs::cost_microdollars)
            .first(conn)
            .await
            .optional()?)
    })
}

/// Registers or refreshes `rows` (fresh ids, source `discovered`, one organization)
/// in one transaction. An existing tool keeps its id, creator and creation time; its
/// cost follows the discovery unless it is `manual`. `None`, with nothing written,
/// when the organization would then hold more than `max_tools` tools.
pub async fn discover(pool: &Pool, rows: Vec<ToolCost>, max_tools: i64) -> DbResult<Option<usize>> {
    upsert(
        pool,
        rows,
        max_tools,
        "CASE WHEN tool_costs.source = 'manual' THEN tool_costs.cost_microdollars \
         ELSE excluded.cost_microdollars END",
    )
    .await
}

/// Like [`discover`], for tools an MCP server listed through the gateway: a tool's
/// cost is never changed by being listed (a new tool starts at its row's cost, 0; a
/// known one keeps its own).
pub async fn register_seen(pool: &Pool, rows: Vec<ToolCost>, max_tools: i64) -> DbResult<Option<usize>> {
    upsert(pool, rows, max_tools, "tool_costs.cost_microdollars").await
}

async fn upsert(
    pool: &Pool,
    rows: Vec<ToolCost>,
    max_tools: i64,
    cost: &'static str,
) -> DbResult<Option<usize>> {
    let Some(org_id) = <[ToolCost]>::first(&rows).map(|r| r.org_id.clone()) else {
        return Ok(Some(0));
    };
    let written = with_tx!(pool, |conn| {
        for row in &rows {
            diesel::insert_into(tool_costs::table)
                .values(row)
                .on_conflict((tool_costs::org_id, tool_costs::server_name, tool_costs::tool_name))
                .do_update()
                .set((
                    tool_costs::cost_microdollars.eq(sql::<BigInt>(cost)),
                    tool_costs::source.eq(sql::<Text>(
                        "CASE WHEN tool_costs.source = 'manual' THEN 'manual' ELSE 'discovered' END",
                    )),
                    tool_costs::suggested_cost.eq(excluded(tool_costs::suggested_cost)),
                    tool_costs::description.eq(excluded(tool_costs::description)),
                    tool_costs::annotations.eq(excluded(tool_costs::annotations)),
                    tool_costs::last_seen_at.eq(excluded(tool_costs::last_seen_at)),
                    tool_costs::updated_at.eq(excluded(tool_costs::updated_at)),
                ))
                .execute(conn)
                .await?;
        }
        // Counted after the writes, which took the write lock: concurrent discoveries
        // count in turn. Over the bound, the whole transaction rolls back.
        let held: i64 =
            tool_costs::table.filter(tool_costs::org_id.eq(&org_id)).count().get_result(conn).await?;
        if held > max_tools {
            return Err(DbError::Query(diesel::result::Error::RollbackTransaction));
        }
        Ok(rows.len())
    });
    match written {
        Ok(n) => Ok(Some(n)),
        Err(DbError::Query(diesel::result::Error::RollbackTransaction)) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Sets a manual cost on an existing tool; `None` when the tool was never
/// discovered in the organization.
pub async fn set_manual(
    pool: &Pool,
    org_id: &str,
    server: &str,
    tool: &str,
    cost: i64,
    now: i64,
) -> DbResult<Option<ToolCost>> {
    with_conn!(pool, write, |conn| {
        Ok(diesel::update(
            tool_costs::table
                .filter(tool_costs::org_id.eq(org_id))
                .filter(tool_costs::server_name.eq(server))
                .filter(tool_costs::tool_name.eq(tool)),
        )
        .set((
            tool_costs::cost_microdollars.eq(cost),
            tool_costs::source.eq(MANUAL),
            tool_costs::updated_at.eq(now),
        ))
        .returning(ToolCost::as_returning())
        .get_result(conn)
        .await
        .optional()?)
    })
}

/// Resets a tool to cost 0, source `discovered`; `None` when it is not in the
/// organization.
pub async fn reset(pool: &Pool, org_id: &str, id: &str, now: i64) -> DbResult<Option<ToolCost>> {
    with_conn!(pool, write, |conn| {
        Ok(diesel::update(
            tool_costs::table.filter(tool_costs::org_id.eq(org_id)).filter(tool_costs::id.eq(id)),
        )
        .set((
            tool_costs::cost_microdollars.eq(0_i64),
            tool_costs::source.eq(DISCOVERED),
            tool_costs::updated_at.eq(now),
        ))
        .returning(ToolCost::as_returning())
        .get_result(conn)
        .await
        .optional()?)
    })
}
