//! Organizations, memberships and invitations.
//!
//! Every change here writes its audit row inside the same transaction (see
//! [`crate::db::audit`]). Functions that depend on a prior read (a role change, a
//! removal, a transfer) re-check that read in their `WHERE` clause and report a
//! miss instead of applying a decision taken on stale data.

use diesel::prelude::*;
use diesel_async::RunQueryDsl;
use serde_json::json;

use crate::db::audit::{self, actions, resources, Entry};
use crate::db::keys::note_key_change;
use crate::db::models::{Invitation, Membership, Organization, User};
use crate::db::schema::{
    api_keys, budget_leases, budget_reservations, budgets, customer_bindings, invitations, key_changes,
    memberships, organizations, sessions, tool_costs, users,
};
use crate::db::{DbError, DbResult, Pool};
use crate::plans::Role;
use crate::util::ids;
use crate::util::pagination::After;
use crate::{record_audit, with_conn, with_tx};

pub fn new_org(id: String, name: String, plan: &str, now: i64) -> Organization {
    Organization {
        id,
        name,
        plan: plan.to_owned(),
        governed_requests: 0,
        usage_period_start: now,
        upgrade_url: None,
        customer_upgrade_url: None,
        created_at: now,
        updated_at: now,
        unpriced_models: crate::db::model_prices::ESTIMATE.to_owned(),
        unpriced_tools: UNPRICED_TOOLS_ALLOW.to_owned(),
    }
}

/// What `set_plan` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlanChange {
    /// The organization (bare id) now has the plan.
    Changed {
        id: String,
        name: String,
    },
    NotFound,
    /// Several organizations have that name; the caller must give the id.
    Ambiguous(usize),
}

/// Sets the tier of the organization `org_ref` (a `svc_org_…` id, a bare id, or its
/// name) and, in the same transaction, records an organization-wide key change:
/// every instance drops the organization's cached keys, which carry the tier.
pub async fn set_plan(pool: &Pool, org_ref: &str, plan: &str) -> DbResult<PlanChange> {
    let by_id = ids::parse_prefixed_or_raw(ids::ORG, org_ref);
    let org_ref = org_ref.to_owned();
    let plan = plan.to_owned();
    with_tx!(pool, |conn| {
        let mut matches: Vec<(String, String)> = match &by_id {
            Some(id) => {
                organizations::table
                    .filter(organizations::id.eq(id))
                    .select((organizations::id, organizations::name))
                    .load(conn)
                    .await?
            }
            None => Vec::new(),
        };
        if matches.is_empty() {
            matches = organizations::table
                .filter(organizations::name.eq(&org_ref))
                .select((organizations::id, organizations::name))
                .load(conn)
                .await?;
        }
        let (id, name) = match matches.len() {
            0 => return Ok(PlanChange::NotFound),
            1 => matches.remove(0),
            n => return Ok(PlanChange::Ambiguous(n)),
        };
        diesel::update(organizations::table.find(&id))
            .set((organizations::plan.eq(&plan), organizations::updated_at.eq(crate::util::time::now_ms())))
            .execute(conn)
            .await?;
        note_key_change!(conn, &id, None);
        Ok(PlanChange::Changed { id, name })
    })
}

/// Creates a user together with the organization it owns (signup).
///
/// With `first_user_only` nothing is written, and `false` returned, when any user
/// exists: the check runs inside the transaction, after PostgreSQL has locked the
/// users table against other writers (SQLite has a single writer connection), so
/// concurrent first signups create exactly one owner.
pub async fn create_user_with_org(
    pool: &Pool,
    user: User,
    org: Organization,
    first_user_only: bool,
) -> DbResult<bool> {
    let lock_users = pool.backend() == crate::db::Backend::Postgres;
    with_tx!(pool, |conn| {
        if first_user_only {
            if lock_users {
                // Conflicts with itself and with every insert, not with readers.
                diesel::sql_query("LOCK TABLE users IN SHARE ROW EXCLUSIVE MODE").execute(conn).await?;
            }
            let users_now: i64 = users::table.count().get_result(conn).await?;
            if users_now > 0 {
                return Ok(false);
            }
        }
        diesel::insert_into(users::table).values(&user).execute(conn).await?;
        diesel::insert_into(organizations::table).values(&org).execute(conn).await?;
        let m = Membership {
            org_id: org.id.clone(),
            user_id: user.id.clone(),
            role: "owner".into(),
            created_at: org.created_at,
        };
        diesel::insert_into(memberships::table).values(&m).execute(conn).await?;
        Ok(true)
    })
}

/// Operator path (`spendgate user create`): creates the user, finds or creates the
/// organization by name, and adds the membership, all in one transaction.
/// Returns the organization id and whether it was created.
pub async fn create_user_in_named_org(
    pool: &Pool,
    user: User,
    org_name: &str,
    role: &str,
    new_org: Organization,
) -> DbResult<(String, bool)> {
    let org_name = org_name.to_owned();
    let role = role.to_owned();
    with_tx!(pool, |conn| {
        diesel::insert_into(users::table).values(&user).execute(conn).await?;
        let existing: Option<String> = organizations::table
            .filter(organizations::name.eq(&org_name))
            .order(organizations::created_at.asc())
            .select(organizations::id)
            .first(conn)
            .await
            .optional()?;
        let (org_id, created) = match existing {
            Some(id) => (id, false),
            None => {
                diesel::insert_into(organizations::table).values(&new_org).execute(conn).await?;
                (new_org.id.clone(), true)
            }
        };
        let m = Membership {
            org_id: org_id.clone(),
            user_id: user.id.clone(),
            role,
            created_at: user.created_at,
        };
        diesel::insert_into(memberships::table).values(&m).execute(conn).await?;
        Ok((org_id, created))
    })
}

pub async fn find(pool: &Pool, id: &str) -> DbResult<Option<Organization>> {
    with_conn!(pool, read, |conn| {
        Ok(organizations::table.find(id).select(Organization::as_select()).first(conn).await.optional()?)
    })
}

pub async fn membership(pool: &Pool, org_id: &str, user_id: &str) -> DbResult<Option<Membership>> {
    with_conn!(pool, read, |conn| {
        Ok(memberships::table
            .filter(memberships::org_id.eq(org_id))
            .filter(memberships::user_id.eq(user_id))
            .select(Membership::as_select())
            .first(conn)
            .await
            .optional()?)
    })
}

/// The organizations a user belongs to with the user's role, oldest first.
pub async fn orgs_for_user(pool: &Pool, user_id: &str) -> DbResult<Vec<(Organization, String)>> {
    with_conn!(pool, read, |conn| {
        Ok(organizations::table
            .inner_join(memberships::table.on(memberships::org_id.eq(organizations::id)))
            .filter(memberships::user_id.eq(user_id))
            .order((organizations::created_at.asc(), organizations::id.asc()))
            .select((Organization::as_select(), memberships::role))
            .load::<(Organization, String)>(conn)
            .await?)
    })
}

/// How many members an organization has.
pub async fn member_count(pool: &Pool, org_id: &str) -> DbResult<i64> {
    with_conn!(pool, read, |conn| {
        Ok(memberships::table.filter(memberships::org_id.eq(org_id)).count().get_result(conn).await?)
    })
}

/// Creates `org` with `owner_id` as its owner, recording `org.created`.
pub async fn create_org(pool: &Pool, org: &Organization, owner_id: &str) -> DbResult<()> {
    with_tx!(pool, |conn| {
        diesel::insert_into(organizations::table).values(org).execute(conn).await?;
        let m = Membership {
            org_id: org.id.clone(),
            user_id: owner_id.to_owned(),
            role: Role::Owner.as_str().to_owned(),
            created_at: org.created_at,
        };
        diesel::insert_into(memberships::table).values(&m).execute(conn).await?;
        let entry = Entry {
            org_id: &org.id,
            actor_user_id: Some(owner_id),
            action: actions::ORG_CREATED,
            resource_type: resources::ORGANIZATION,
            resource_id: Some(ids::prefixed(ids::ORG, &org.id)),
            metadata: json!({ "name": org.name }),
        };
        record_audit!(conn, audit::new_event(entry, org.created_at))?;
        Ok(())
    })
}

/// A PATCH of an organization's settings: `None` leaves a field alone; for the
/// URLs `Some(None)` clears.
#[derive(Debug, Clone, Default)]
pub struct OrgChanges {
    pub name: Option<String>,
    pub upgrade_url: Option<Option<String>>,
    pub customer_upgrade_url: Option<Option<String>>,
    /// `estimate` or `block`, checked by the caller.
    pub unpriced_models: Option<&'static str>,
    /// `allow` or `block`, checked by the caller.
    pub unpriced_tools: Option<&'static str>,
}

/// `unpricedTools` values.
pub const UNPRICED_TOOLS_ALLOW: &str = "allow";
pub const UNPRICED_TOOLS_BLOCK: &str = "block";

/// Applies `changes`, recording `org_upgrade_url.updated` and
/// `customer_upgrade_url.updated` for the URLs whose value actually changed.
/// Returns the updated organization, or `None` when it does not exist.
pub async fn update_org(
    pool: &Pool,
    org_id: &str,
    actor_id: &str,
    changes: &OrgChanges,
    now: i64,
) -> DbResult<Option<Organization>> {
    with_tx!(pool, |conn| {
        let Some(current) = organizations::table
            .find(org_id)
            .select(Organization::as_select())
            .first(conn)
            .await
            .optional()?
        else {
            return Ok(None);
        };
        let name = changes.name.clone().unwrap_or_else(|| current.name.clone());
        let upgrade_url = changes.upgrade_url.clone().unwrap_or_else(|| current.upgrade_url.clone());
        let customer_upgrade_url =
            changes.customer_upgrade_url.clone().unwrap_or_else(|| current.customer_upgrade_url.clone());
        let unpriced_models =
            changes.unpriced_models.map_or_else(|| current.unpriced_models.clone(), str::to_owned);
        let unpriced_tools =
            changes.unpriced_tools.map_or_else(|| current.unpriced_tools.clone(), str::to_owned);
        diesel::update(organizations::table.find(org_id))
            .set((
                organizations::name.eq(&name),
                organizations::upgrade_url.eq(&upgrade_url),
                organizations::customer_upgrade_url.eq(&customer_upgrade_url),
                organizations::unpriced_models.eq(&unpriced_models),
                organizations::unpriced_tools.eq(&unpriced_tools),
                organizations::updated_at.eq(now),
            ))
            .execute(conn)
            .await?;
        if unpriced_models != current.unpriced_models {
            let entry = Entry {
                org_id,
                actor_user_id: Some(actor_id),
                action: actions::ORG_UNPRICED_MODELS_UPDATED,
                resource_type: resources::ORGANIZATION,
                resource_id: Some(ids::prefixed(ids::ORG, org_id)),
                metadata: json!({ "unpricedModels": unpriced_models, "previous": current.unpriced_models }),
            };
            record_audit!(conn, audit::new_event(entry, now))?;
            crate::db::model_prices::note_price_change!(conn, org_id, now);
        }
        if unpriced_tools != current.unpriced_tools {
            let entry = Entry {
                org_id,
                actor_user_id: Some(actor_id),
                action: actions::ORG_UNPRICED_TOOLS_UPDATED,
                resource_type: resources::ORGANIZATION,
                resource_id: Some(ids::prefixed(ids::ORG, org_id)),
                metadata: json!({ "unpricedTools": unpriced_tools, "previous": current.unpriced_tools }),
            };
            record_audit!(conn, audit::new_event(entry, now))?;
            crate::db::model_prices::note_price_change!(conn, org_id, now);
        }
        let url_events = [
            (actions::ORG_UPGRADE_URL_UPDATED, "upgradeUrl", &current.upgrade_url, &upgrade_url),
            (
                actions::CUSTOMER_UPGRADE_URL_UPDATED,
                "customerUpgradeUrl",
                &current.customer_upgrade_url,
                &customer_upgrade_url,
            ),
        ];
        for (action, field, before, after) in url_events {
            if before != after {
                let entry = Entry {
                    org_id,
                    actor_user_id: Some(actor_id),
                    action,
                    resource_type: resources::ORGANIZATION,
                    resource_id: Some(ids::prefixed(ids::ORG, org_id)),
                    metadata: json!({ field: after, "previous": before }),
                };
                record_audit!(conn, audit::new_event(entry, now))?;
            }
        }
        Ok(Some(Organization {
            name,
            upgrade_url,
            customer_upgrade_url,
            unpriced_models,
            unpriced_tools,
            updated_at: now,
            ..current
        }))
    })
}

/// Deletes an organization with its memberships, invitations, budgets and margins
/// data (processor key, revenue, mappings), detaches the sessions pointing at it
/// and revokes its API keys, all in one transaction.
/// The `org.deleted` audit row is written first and survives the organization, so
/// an operator can still tell who deleted it. `DbError::NotFound` (and a rollback)
/// when the organization is already gone.
pub async fn delete_org(pool: &Pool, org_id: &str, actor_id: &str, now: i64) -> DbResult<()> {
    with_tx!(pool, |conn| {
        let entry = Entry {
            org_id,
            actor_user_id: Some(actor_id),
            action: actions::ORG_DELETED,
            resource_type: resources::ORGANIZATION,
            resource_id: Some(ids::prefixed(ids::ORG, org_id)),
            metadata: json!({}),
        };
        record_audit!(conn, audit::new_event(entry, now))?;
        diesel::delete(memberships::table.filter(memberships::org_id.eq(org_id))).execute(conn).await?;
        diesel::delete(invitations::table.filter(invitations::org_id.eq(org_id))).execute(conn).await?;
        diesel::update(sessions::table.filter(sessions::org_id.eq(org_id)))
            .set(sessions::org_id.eq(None::<String>))
            .execute(conn)
            .await?;
        diesel::update(
            api_keys::table.filter(api_keys::org_id.eq(org_id)).filter(api_keys::revoked_at.is_null()),
        )
        .set(api_keys::revoked_at.eq(Some(now)))
        .execute(conn)
        .await?;
        // Budgets die with their organization; cost events stay as history.
        let budget_ids = budgets::table.filter(budgets::org_id.eq(org_id)).select(budgets::id);
        diesel::delete(budget_reservations::table.filter(budget_reservations::budget_id.eq_any(budget_ids)))
            .execute(conn)
            .await?;
        diesel::delete(budget_leases::table.filter(budget_leases::budget_id.eq_any(budget_ids)))
            .execute(conn)
            .await?;
        diesel::delete(budgets::table.filter(budgets::org_id.eq(org_id))).execute(conn).await?;
        diesel::delete(tool_costs::table.filter(tool_costs::org_id.eq(org_id))).execute(conn).await?;
        diesel::delete(customer_bindings::table.filter(customer_bindings::org_id.eq(org_id)))
            .execute(conn)
            .await?;
        // The processor key and revenue data go too (margins).
        crate::delete_margins_data!(conn, org_id);
        let deleted = diesel::delete(organizations::table.find(org_id)).execute(conn).await?;
        if deleted == 0 {
            return Err(DbError::NotFound);
        }
        Ok(())
    })
}

/// A member of an organization with the user's details.
#[derive(Debug, Clone, Queryable)]
pub struct Member {
    pub user_id: String,
    pub email: String,
    pub name: Option<String>,
    pub role: String,
    pub joined_at: i64,
}

/// One page of an organization's members, newest first (`limit + 1` rows; the
/// cursor id is the bare user id).
pub async fn list_members(
    pool: &Pool,
    org_id: &str,
    limit: i64,
    after: Option<&After>,
) -> DbResult<Vec<Member>> {
    with_conn!(pool, read, |conn| {
        let mut query = memberships::table
            .inner_join(users::table.on(users::id.eq(memberships::user_id)))
            .filter(memberships::org_id.eq(org_id))
            .select((
                memberships::user_id,
                users::email,
                users::name,
                memberships::role,
                memberships::created_at,
            ))
            .order((memberships::created_at.desc(), memberships::user_id.desc()))
            .limit(limit.saturating_add(1))
            .into_boxed();
        if let Some(after) = after {
            query = query.filter(memberships::created_at.lt(after.created_at).or(
                memberships::created_at.eq(after.created_at).and(memberships::user_id.lt(after.id.clone())),
            ));
        }
        Ok(query.load::<Member>(conn).await?)
    })
}

/// One member of an organization, if the user belongs to it.
pub async fn find_member(pool: &Pool, org_id: &str, user_id: &str) -> DbResult<Option<Member>> {
    with_conn!(pool, read, |conn| {
        Ok(memberships::table
            .inner_join(users::table.on(users::id.eq(memberships::user_id)))
            .filter(memberships::org_id.eq(org_id))
            .filter(memberships::user_id.eq(user_id))
            .select((
                memberships::user_id,
                users::email,
                users::name,
                memberships::role,
                memberships::created_at,
            ))
            .first::<Member>(conn)
            .await
            .optional()?)
    })
}

/// Changes a member's role from `from` to `to`, recording `member.role_changed`.
/// Returns false (and changes nothing) when the member no longer holds `from`, so a
/// decision taken on a stale read is never applied.
pub async fn set_member_role(
    pool: &Pool,
    org_id: &str,
    actor_id: &str,
    user_id: &str,
    from: Role,
    to: Role,
    now: i64,
) -> DbResult<bool> {
    with_tx!(pool, |conn| {
        let changed = diesel::update(
            memberships::table
                .filter(memberships::org_id.eq(org_id))
                .filter(memberships::user_id.eq(user_id))
                .filter(memberships::role.eq(from.as_str())),
        )
        .set(memberships::role.eq(to.as_str()))
        .execute(conn)
        .await?;
        if changed == 0 {
            return Ok(false);
        }
        let entry = Entry {
            org_id,
            actor_user_id: Some(actor_id),
            action: actions::MEMBER_ROLE_CHANGED,
            resource_type: resources::MEMBER,
            resource_id: Some(ids::prefixed(ids::USER, user_id)),
            metadata: json!({ "newRole": to.as_str(), "previousRole": from.as_str() }),
        };
        record_audit!(conn, audit::new_event(entry, now))?;
        Ok(true)
    })
}

/// Why a member leaves an organization; decides the audit action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Departure {
    /// An admin removed the member (`member.removed`).
    Removed,
    /// The member left on their own (`member.left`).
    Left,
}

/// Ends a membership that still holds `role`, detaches the user's sessions from the
/// organization and records the departure. Returns false (and changes nothing) when
/// no such membership exists any more.
pub async fn remove_member(
    pool: &Pool,
    org_id: &str,
    actor_id: &str,
    user_id: &str,
    role: Role,
    departure: Departure,
    now: i64,
) -> DbResult<bool> {
    with_tx!(pool, |conn| {
        let removed = diesel::delete(
            memberships::table
                .filter(memberships::org_id.eq(org_id))
                .filter(memberships::user_id.eq(user_id))
                .filter(memberships::role.eq(role.as_str())),
        )
        .execute(conn)
        .await?;
        if removed == 0 {
            return Ok(false);
        }
        // A member who leaves takes no access along: their keys in this
        // organization stop working.
        diesel::update(
            api_keys::table
                .filter(api_keys::org_id.eq(org_id))
                .filter(api_keys::user_id.eq(user_id))
                .filter(api_keys::revoked_at.is_null()),
        )
        .set(api_keys::revoked_at.eq(Some(now)))
        .execute(conn)
        .await?;
        diesel::update(
            sessions::table.filter(sessions::user_id.eq(user_id)).filter(sessions::org_id.eq(org_id)),
        )
        .set(sessions::org_id.eq(None::<String>))
        .execute(conn)
        .await?;
        let action = match departure {
            Departure::Removed => actions::MEMBER_REMOVED,
            Departure::Left => actions::MEMBER_LEFT,
        };
        let entry = Entry {
            org_id,
            actor_user_id: Some(actor_id),
            action,
            resource_type: resources::MEMBER,
            resource_id: Some(ids::prefixed(ids::USER, user_id)),
            metadata: json!({ "role": role.as_str() }),
        };
        record_audit!(conn, audit::new_event(entry, now))?;
        Ok(true)
    })
}

/// Moves ownership from `from` to `to`: the target becomes owner, the previous owner
/// becomes admin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransferOutcome {
    Transferred,
    /// `from` is not (or no longer) the owner.
    NotOwner,
    /// `to` is not a member of the organization.
    TargetNotMember,
}

/// Transfers ownership in one transaction, recording `org.ownership_transferred`.
pub async fn transfer_ownership(
    pool: &Pool,
    org_id: &str,
    from: &str,
    to: &str,
    now: i64,
) -> DbResult<TransferOutcome> {
    with_tx!(pool, |conn| {
        let target_exists: i64 = memberships::table
            .filter(memberships::org_id.eq(org_id))
            .filter(memberships::user_id.eq(to))
            .count()
            .get_result(conn)
            .await?;
        if target_exists == 0 {
            return Ok(TransferOutcome::TargetNotMember);
        }
        let demoted = diesel::update(
            memberships::table
                .filter(memberships::org_id.eq(org_id))
                .filter(memberships::user_id.eq(from))
                .filter(memberships::role.eq(Role::Owner.as_str())),
        )
        .set(memberships::role.eq(Role::Admin.as_str()))
        .execute(conn)
        .await?;
        if demoted == 0 {
            return Ok(TransferOutcome::NotOwner);
        }
        let promoted = diesel::update(
            memberships::table.filter(memberships::org_id.eq(org_id)).filter(memberships::user_id.eq(to)),
        )
        .set(memberships::role.eq(Role::Owner.as_str()))
        .execute(conn)
        .await?;
        if promoted == 0 {
            // The target left between the check and the update: undo the demotion.
            return Err(DbError::NotFound);
        }
        let entry = Entry {
            org_id,
            actor_user_id: Some(from),
            action: actions::ORG_OWNERSHIP_TRANSFERRED,
            resource_type: resources::ORGANIZATION,
            resource_id: Some(ids::prefixed(ids::ORG, org_id)),
            metadata: json!({
                "newOwnerUserId": ids::prefixed(ids::USER, to),
                "previousOwnerUserId": ids::prefixed(ids::USER, from),
            }),
        };
        record_audit!(conn, audit::new_event(entry, now))?;
        Ok(TransferOutcome::Transferred)
    })
}

/// The result of inviting an email address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InviteOutcome {
    Created,
    /// A user with that email already belongs to the organization.
    AlreadyMember,
    /// A pending, unexpired invitation for that email exists.
    AlreadyInvited,
}

/// Stores a new invitation (its email already normalized) and records
/// `invitation.created`, unless the email is a member or already invited.
pub async fn create_invitation(pool: &Pool, invitation: &Invitation) -> DbResult<InviteOutcome> {
    with_tx!(pool, |conn| {
        let members: i64 = memberships::table
            .inner_join(users::table.on(users::id.eq(memberships::user_id)))
            .filter(memberships::org_id.eq(&invitation.org_id))
            .filter(users::email.eq(&invitation.email))
            .count()
            .get_result(conn)
            .await?;
        if members > 0 {
            return Ok(InviteOutcome::AlreadyMember);
        }
        let pending: i64 = invitations::table
            .filter(invitations::org_id.eq(&invitation.org_id))
            .filter(invitations::email.eq(&invitation.email))
            .filter(invitations::accepted_at.is_null())
            .filter(invitations::revoked_at.is_null())
            .filter(invitations::expires_at.gt(invitation.created_at))
            .count()
            .get_result(conn)
            .await?;
        if pending > 0 {
            return Ok(InviteOutcome::AlreadyInvited);
        }
        diesel::insert_into(invitations::table).values(invitation).execute(conn).await?;
        let entry = Entry {
            org_id: &invitation.org_id,
            actor_user_id: Some(&invitation.invited_by),
            action: actions::INVITATION_CREATED,
            resource_type: resources::INVITATION,
            resource_id: Some(invitation.id.clone()),
            metadata: json!({ "email": invitation.email, "role": invitation.role }),
        };
        record_audit!(conn, audit::new_event(entry, invitation.created_at))?;
        Ok(InviteOutcome::Created)
    })
}

/// One page of an organization's pending (not accepted, not revoked, unexpired)
/// invitations, newest first (`limit + 1` rows).
pub async fn pending_invitations(
    pool: &Pool,
    org_id: &str,
    now: i64,
    limit: i64,
    after: Option<&After>,
) -> DbResult<Vec<Invitation>> {
    with_conn!(pool, read, |conn| {
        let mut query = invitations::table
            .filter(invitations::org_id.eq(org_id))
            .filter(invitations::accepted_at.is_null())
            .filter(invitations::revoked_at.is_null())
            .filter(invitations::expires_at.gt(now))
            .select(Invitation::as_select())
            .order((invitations::created_at.desc(), invitations::id.desc()))
            .limit(limit.saturating_add(1))
            .into_boxed();
        if let Some(after) = after {
            query =
                query.filter(invitations::created_at.lt(after.created_at).or(
                    invitations::created_at.eq(after.created_at).and(invitations::id.lt(after.id.clone())),
                ));
        }
        Ok(query.load(conn).await?)
    })
}

/// Revokes a pending, unexpired invitation of `org_id`, recording
/// `invitation.revoked`. Returns the revoked invitation, or `None` when there is no
/// such pending invitation.
pub async fn revoke_invitation(
    pool: &Pool,
    org_id: &str,
    invitation_id: &str,
    actor_id: &str,
    now: i64,
) -> DbResult<Option<Invitation>> {
    with_tx!(pool, |conn| {
        let revoked = diesel::update(
            invitations::table
                .filter(invitations::id.eq(invitation_id))
                .filter(invitations::org_id.eq(org_id))
                .filter(invitations::accepted_at.is_null())
                .filter(invitations::revoked_at.is_null())
                .filter(invitations::expires_at.gt(now)),
        )
        .set(invitations::revoked_at.eq(Some(now)))
        .execute(conn)
        .await?;
        if revoked == 0 {
            return Ok(None);
        }
        let invitation =
            invitations::table.find(invitation_id).select(Invitation::as_select()).first(conn).await?;
        let entry = Entry {
            org_id,
            actor_user_id: Some(actor_id),
            action: actions::INVITATION_REVOKED,
            resource_type: resources::INVITATION,
            resource_id: Some(invitation.id.clone()),
            metadata: json!({ "email": invitation.email, "role": invitation.role }),
        };
        record_audit!(conn, audit::new_event(entry, now))?;
        Ok(Some(invitation))
    })
}

/// The invitation whose token hashes to `token_hash`, in any state.
pub async fn find_invitation_by_token_hash(pool: &Pool, token_hash: &str) -> DbResult<Option<Invitation>> {
    with_conn!(pool, read, |conn| {
        Ok(invitations::table
            .filter(invitations::token_hash.eq(token_hash))
            .select(Invitation::as_select())
            .first(conn)
            .await
            .optional()?)
    })
}

/// The result of accepting an invitation.
#[derive(Debug, Clone)]
pub enum AcceptOutcome {
    /// The user joined this organization.
    Accepted(Organization),
    /// The invitation was accepted or revoked meanwhile.
    Gone,
    /// The user already belongs to the organization.
    AlreadyMember,
}

/// Accepts a pending invitation for `user_id`: marks it accepted, adds the
/// membership with the invited role, points the session at the organization and
/// records `invitation.accepted`, in one transaction. The caller has checked expiry
/// and the email match.
pub async fn accept_invitation(
    pool: &Pool,
    invitation: &Invitation,
    user_id: &str,
    session_id: &str,
    now: i64,
) -> DbResult<AcceptOutcome> {
    with_tx!(pool, |conn| {
        let already: i64 = memberships::table
            .filter(memberships::org_id.eq(&invitation.org_id))
            .filter(memberships::user_id.eq(user_id))
            .count()
            .get_result(conn)
            .await?;
        if already > 0 {
            return Ok(AcceptOutcome::AlreadyMember);
        }
        let marked = diesel::update(
            invitations::table
                .filter(invitations::id.eq(&invitation.id))
                .filter(invitations::accepted_at.is_null())
                .filter(invitations::revoked_at.is_null()),
        )
        .set(invitations::accepted_at.eq(Some(now)))
        .execute(conn)
        .await?;
        if marked == 0 {
            return Ok(AcceptOutcome::Gone);
        }
        // Organizations take their invitations with them when deleted, so this
        // only fails on a concurrent delete; NotFound rolls the acceptance back.
        let org = organizations::table
            .find(&invitation.org_id)
            .select(Organization::as_select())
            .first(conn)
            .await?;
        let m = Membership {
            org_id: org.id.clone(),
            user_id: user_id.to_owned(),
            role: invitation.role.clone(),
            created_at: now,
        };
        diesel::insert_into(memberships::table).values(&m).execute(conn).await?;
        diesel::update(sessions::table.find(session_id))
            .set(sessions::org_id.eq(Some(&org.id)))
            .execute(conn)
            .await?;
        let entry = Entry {
            org_id: &org.id,
            actor_user_id: Some(user_id),
            action: actions::INVITATION_ACCEPTED,
            resource_type: resources::INVITATION,
            resource_id: Some(invitation.id.clone()),
            metadata: json!({ "email": invitation.email, "role": invitation.role }),
        };
        record_audit!(conn, audit::new_event(entry, now))?;
        Ok(AcceptOutcome::Accepted(org))
    })
}

/// What an organization has that counts against its plan limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UsageCounts {
    /// Active (non-revoked) API keys.
    pub api_keys: i64,
    pub members: i64,
    pub budgets: i64,
}

/// Counts API keys, members and budgets of an organization.
pub async fn usage_counts(pool: &Pool, org_id: &str) -> DbResult<UsageCounts> {
    with_conn!(pool, read, |conn| {
        let api_keys: i64 = api_keys::table
            .filter(api_keys::org_id.eq(org_id))
            .filter(api_keys::revoked_at.is_null())
            .count()
            .get_result(conn)
            .await?;
        let members: i64 =
            memberships::table.filter(memberships::org_id.eq(org_id)).count().get_result(conn).await?;
        let budgets: i64 = budgets::table.filter(budgets::org_id.eq(org_id)).count().get_result(conn).await?;
        Ok(UsageCounts { api_keys, members, budgets })
    })
}
