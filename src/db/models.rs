//! Row and insert structs, one per table.

use diesel::prelude::*;

use crate::db::schema::*;

#[derive(Debug, Clone, Queryable, Selectable, Insertable)]
#[diesel(table_name = users)]
pub struct User {
    pub id: String,
    pub email: String,
    pub name: Option<String>,
    pub password_hash: String,
    pub created_at: i64,
}

#[derive(Debug, Clone, Queryable, Selectable, Insertable)]
#[diesel(table_name = organizations)]
pub struct Organization {
    pub id: String,
    pub name: String,
    pub plan: String,
    pub governed_requests: i64,
    pub usage_period_start: i64,
    pub upgrade_url: Option<String>,
    pub customer_upgrade_url: Option<String>,
    pub created_at: i64,
    pub updated_at: i64,
}

#[derive(Debug, Clone, Queryable, Selectable, Insertable)]
#[diesel(table_name = memberships)]
pub struct Membership {
    pub org_id: String,
    pub user_id: String,
    pub role: String,
    pub created_at: i64,
}

#[derive(Debug, Clone, Queryable, Selectable, Insertable)]
#[diesel(table_name = sessions)]
pub struct Session {
    pub id: String,
    pub user_id: String,
    pub org_id: Option<String>,
    pub created_at: i64,
    pub expires_at: i64,
}

#[derive(Debug, Clone, Queryable, Selectable, Insertable)]
#[diesel(table_name = invitations)]
pub struct Invitation {
    pub id: String,
    pub org_id: String,
    pub email: String,
    pub role: String,
    pub token_hash: String,
    pub invited_by: String,
    pub created_at: i64,
    pub expires_at: i64,
    pub accepted_at: Option<i64>,
    pub revoked_at: Option<i64>,
}

#[derive(Debug, Clone, Queryable, Selectable, Insertable)]
#[diesel(table_name = api_keys)]
pub struct ApiKey {
    pub id: String,
    pub org_id: String,
    pub user_id: String,
    pub name: String,
    pub key_prefix: String,
    pub key_hash: String,
    pub default_tags: String,
    pub allowed_models: Option<String>,
    pub allowed_providers: Option<String>,
    pub allowed_customers: Option<String>,
    pub require_customer_id: bool,
    pub api_version: Option<String>,
    pub last_used_at: Option<i64>,
    pub created_at: i64,
    pub revoked_at: Option<i64>,
}

#[derive(Debug, Clone, Queryable, Selectable, Insertable)]
#[diesel(table_name = audit_events)]
pub struct AuditEvent {
    pub id: String,
    pub org_id: String,
    pub actor_id: Option<String>,
    pub action: String,
    pub resource_type: String,
    pub resource_id: Option<String>,
    pub metadata: String,
    pub created_at: i64,
}
