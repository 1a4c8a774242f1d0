//! Organizations and memberships.

use diesel::prelude::*;
use diesel_async::RunQueryDsl;

use crate::db::models::{Membership, Organization, User};
use crate::db::schema::{memberships, organizations, users};
use crate::db::{DbResult, Pool};
use crate::{with_conn, with_tx};

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
    }
}

/// Creates a user together with the organization it owns (signup).
pub async fn create_user_with_org(pool: &Pool, user: User, org: Organization) -> DbResult<()> {
    with_tx!(pool, |conn| {
        diesel::insert_into(users::table).values(&user).execute(conn).await?;
        diesel::insert_into(organizations::table).values(&org).execute(conn).await?;
        let m = Membership {
            org_id: org.id.clone(),
            user_id: user.id.clone(),
            role: "owner".into(),
            created_at: org.created_at,
        };
        diesel::insert_into(memberships::table).values(&m).execute(conn).await?;
        Ok(())
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
