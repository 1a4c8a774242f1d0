//! The audit log: who changed an organization's membership, ownership or settings.
//!
//! An audit row is written inside the same transaction as the change it records, so
//! the two commit or roll back together. Build the row with [`new_event`] and insert
//! it with [`record_audit!`](crate::record_audit) on the transaction's connection;
//! the macro expands for whichever backend the surrounding `with_tx!` arm binds.
//!
//! Identifiers are stored exactly as the API shows them (`svc_usr_…`, `svc_org_…`,
//! plain UUIDs for invitations): the log is a record of what was said on the wire,
//! read back verbatim, whatever kinds of resource it grows to cover.

use diesel::prelude::*;
use diesel_async::RunQueryDsl;
use serde_json::Value;

use crate::db::models::AuditEvent;
use crate::db::schema::audit_events;
use crate::db::{DbResult, Pool};
use crate::util::ids;
use crate::util::pagination::After;
use crate::with_conn;

/// Emitted `action` values. The set grows; consumers treat `action` as free-form.
pub mod actions {
    pub const ORG_CREATED: &str = "org.created";
    pub const ORG_DELETED: &str = "org.deleted";
    pub const ORG_OWNERSHIP_TRANSFERRED: &str = "org.ownership_transferred";
    pub const ORG_UPGRADE_URL_UPDATED: &str = "org_upgrade_url.updated";
    pub const CUSTOMER_UPGRADE_URL_UPDATED: &str = "customer_upgrade_url.updated";
    pub const INVITATION_CREATED: &str = "invitation.created";
    pub const INVITATION_ACCEPTED: &str = "invitation.accepted";
    pub const INVITATION_REVOKED: &str = "invitation.revoked";
    pub const MEMBER_ROLE_CHANGED: &str = "member.role_changed";
    pub const MEMBER_REMOVED: &str = "member.removed";
    pub const MEMBER_LEFT: &str = "member.left";
    pub const PROVIDER_CREDENTIAL_CREATED: &str = "provider_credential.created";
    pub const PROVIDER_CREDENTIAL_ROTATED: &str = "provider_credential.rotated";
    pub const PROVIDER_CREDENTIAL_DELETED: &str = "provider_credential.deleted";
    pub const MCP_SERVER_CREATED: &str = "mcp_server.created";
    pub const MCP_SERVER_DELETED: &str = "mcp_server.deleted";
    pub const MODEL_PRICE_SET: &str = "model_price.set";
    pub const MODEL_PRICE_DELETED: &str = "model_price.deleted";
    pub const ORG_UNPRICED_MODELS_UPDATED: &str = "org_unpriced_models.updated";
    pub const ORG_UNPRICED_TOOLS_UPDATED: &str = "org_unpriced_tools.updated";
}

/// `resourceType` values.
pub mod resources {
    pub const ORGANIZATION: &str = "organization";
    pub const MEMBER: &str = "member";
    pub const INVITATION: &str = "invitation";
    pub const PROVIDER_CREDENTIAL: &str = "provider_credential";
    pub const MODEL_PRICE: &str = "model_price";
    pub const MCP_SERVER: &str = "mcp_server";
}

/// What happened, to what, and by whom: the caller-supplied part of an audit row.
#[derive(Debug, Clone)]
pub struct Entry<'a> {
    /// The organization the event belongs to (bare id, as stored everywhere else).
    pub org_id: &'a str,
    /// The acting user's bare id; `None` for operator or system changes.
    pub actor_user_id: Option<&'a str>,
    pub action: &'a str,
    pub resource_type: &'a str,
    /// The resource's id in its wire form.
    pub resource_id: Option<String>,
    pub metadata: Value,
}

/// Builds the row for `entry` at `now`, with a fresh id.
pub fn new_event(entry: Entry<'_>, now: i64) -> AuditEvent {
    AuditEvent {
        id: ids::new_id(),
        org_id: entry.org_id.to_owned(),
        actor_id: entry.actor_user_id.map(|u| ids::prefixed(ids::USER, u)),
        action: entry.action.to_owned(),
        resource_type: entry.resource_type.to_owned(),
        resource_id: entry.resource_id,
        metadata: entry.metadata.to_string(),
        created_at: now,
    }
}

/// Inserts an [`AuditEvent`] on `$conn`, which may be either backend's connection
/// (normally the one of an enclosing `with_tx!`). Evaluates to
/// `Result<usize, diesel::result::Error>`.
#[macro_export]
macro_rules! record_audit {
    ($conn:expr, $event:expr) => {{
        use diesel_async::RunQueryDsl as _;
        diesel::insert_into($crate::db::schema::audit_events::table).values(&$event).execute($conn).await
    }};
}

/// One page of an organization's audit log, newest first, optionally only one
/// `action`. Fetches `limit + 1` rows so the caller can tell whether a next page
/// exists.
pub async fn list(
    pool: &Pool,
    org_id: &str,
    action: Option<&str>,
    limit: i64,
    after: Option<&After>,
) -> DbResult<Vec<AuditEvent>> {
    with_conn!(pool, read, |conn| {
        let mut query = audit_events::table
            .filter(audit_events::org_id.eq(org_id))
            .select(AuditEvent::as_select())
            .order((audit_events::created_at.desc(), audit_events::id.desc()))
            .limit(limit.saturating_add(1))
            .into_boxed();
        if let Some(action) = action {
            query = query.filter(audit_events::action.eq(action.to_owned()));
        }
        if let Some(after) = after {
            query = query.filter(audit_events::created_at.lt(after.created_at).or(
                audit_events::created_at.eq(after.created_at).and(audit_events::id.lt(after.id.clone())),
            ));
        }
        Ok(query.load(conn).await?)
    })
}
