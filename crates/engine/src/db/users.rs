//! Users and dashboard sessions.

use diesel::prelude::*;
use diesel_async::RunQueryDsl;

use crate::db::models::{Session, User};
use crate::db::schema::{sessions, users};
use crate::db::{DbResult, Pool};
use crate::{with_conn, with_tx};

pub async fn count_users(pool: &Pool) -> DbResult<i64> {
    with_conn!(pool, read, |conn| Ok(users::table.count().get_result::<i64>(conn).await?))
}

pub async fn find_by_email(pool: &Pool, email: &str) -> DbResult<Option<User>> {
    let email = email.to_lowercase();
    with_conn!(pool, read, |conn| {
        Ok(users::table
            .filter(users::email.eq(&email))
            .select(User::as_select())
            .first(conn)
            .await
            .optional()?)
    })
}

pub async fn find(pool: &Pool, id: &str) -> DbResult<Option<User>> {
    with_conn!(pool, read, |conn| {
        Ok(users::table.find(id).select(User::as_select()).first(conn).await.optional()?)
    })
}

pub async fn insert_session(pool: &Pool, session: Session) -> DbResult<()> {
    with_tx!(pool, |conn| {
        diesel::insert_into(sessions::table).values(&session).execute(conn).await?;
        Ok(())
    })
}

pub async fn find_session(pool: &Pool, id: &str, now: i64) -> DbResult<Option<Session>> {
    with_conn!(pool, read, |conn| {
        Ok(sessions::table
            .filter(sessions::id.eq(id))
            .filter(sessions::expires_at.gt(now))
            .select(Session::as_select())
            .first(conn)
            .await
            .optional()?)
    })
}

pub async fn delete_session(pool: &Pool, id: &str) -> DbResult<()> {
    with_tx!(pool, |conn| {
        diesel::delete(sessions::table.find(id)).execute(conn).await?;
        Ok(())
    })
}

pub async fn set_session_org(pool: &Pool, id: &str, org_id: Option<&str>) -> DbResult<()> {
    let org_id = org_id.map(str::to_owned);
    with_tx!(pool, |conn| {
        diesel::update(sessions::table.find(id)).set(sessions::org_id.eq(org_id)).execute(conn).await?;
        Ok(())
    })
}
