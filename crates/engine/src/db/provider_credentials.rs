//! Provider credentials held by the gateway: one per organization and upstream,
//! stored (already encrypted by the caller), rotated in place, deleted, and read by
//! the proxy's credential cache. Every change writes an audit row and a
//! `provider_credential_changes` row in its own transaction, so each instance's cache
//! drops the old secret.

use diesel::prelude::*;
use diesel_async::RunQueryDsl;

use crate::db::audit::{self, actions, resources, Entry};
use crate::db::change_feed::change_feed;
use crate::db::models::ProviderCredential;
use crate::db::schema::{provider_credential_changes, provider_credentials};
use crate::db::{DbResult, Pool};
use crate::util::{ids, time};
use crate::{record_audit, with_conn, with_tx};

/// Records in the caller's transaction that `(org_id, upstream)` changed.
macro_rules! note_credential_change {
    ($conn:ident, $org_id:expr, $upstream:expr, $now:expr) => {{
        diesel::insert_into(provider_credential_changes::table)
            .values((
                provider_credential_changes::id.eq(ids::new_id()),
                provider_credential_changes::org_id.eq($org_id),
                provider_credential_changes::upstream.eq($upstream),
                provider_credential_changes::changed_at.eq($now),
            ))
            .execute($conn)
            .await?;
    }};
}

/// Whether [`store`] created the credential or replaced the secret of an existing one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stored {
    Created,
    Rotated,
}

fn audit_entry<'a>(row: &'a ProviderCredential, actor: &'a str, action: &'a str) -> Entry<'a> {
    Entry {
        org_id: &row.org_id,
        actor_user_id: Some(actor),
        action,
        resource_type: resources::PROVIDER_CREDENTIAL,
        resource_id: Some(ids::prefixed(ids::PROVIDER_CREDENTIAL, &row.id)),
        metadata: serde_json::json!({ "upstream": row.upstream, "secretPrefix": row.secret_prefix }),
    }
}

/// Stores `new` as the organization's credential for its upstream. When one exists,
/// its secret (and name, when `new` has one) is replaced and its id kept: a rotation.
/// A concurrent store for the same upstream turns into an update by the unique index.
///
/// The transaction begins with its write: on SQLite a deferred transaction that read
/// first cannot take the write lock once another process wrote in between (busy at
/// once, without the busy timeout's wait), so whether a row existed is told by the id
/// the upsert returns, not by a read before it.
pub async fn store(
    pool: &Pool,
    new: ProviderCredential,
    actor: &str,
) -> DbResult<(ProviderCredential, Stored)> {
    with_tx!(pool, |conn| {
        let row: ProviderCredential = diesel::insert_into(provider_credentials::table)
            .values(&new)
            .on_conflict((provider_credentials::org_id, provider_credentials::upstream))
            .do_update()
            .set((
                provider_credentials::encrypted_secret.eq(&new.encrypted_secret),
                provider_credentials::secret_prefix.eq(&new.secret_prefix),
                provider_credentials::details.eq(&new.details),
                provider_credentials::name.eq(diesel::dsl::sql::<
                    diesel::sql_types::Nullable<diesel::sql_types::Text>,
                >(
                    "COALESCE(excluded.name, provider_credentials.name)"
                )),
                provider_credentials::updated_at.eq(new.updated_at),
            ))
            .returning(ProviderCredential::as_returning())
            .get_result(conn)
            .await?;
        let stored = if row.id == new.id { Stored::Created } else { Stored::Rotated };
        let action = match stored {
            Stored::Created => actions::PROVIDER_CREDENTIAL_CREATED,
            Stored::Rotated => actions::PROVIDER_CREDENTIAL_ROTATED,
        };
        let entry = audit_entry(&row, actor, action);
        record_audit!(conn, audit::new_event(entry, new.updated_at))?;
        note_credential_change!(conn, &row.org_id, &row.upstream, new.updated_at);
        Ok((row, stored))
    })
}

/// The organization's credentials, by upstream.
pub async fn list(pool: &Pool, org_id: &str) -> DbResult<Vec<ProviderCredential>> {
    with_conn!(pool, read, |conn| {
        Ok(provider_credentials::table
            .filter(provider_credentials::org_id.eq(org_id))
            .order(provider_credentials::upstream.asc())
            .select(ProviderCredential::as_select())
            .load(conn)
            .await?)
    })
}

/// The organization's credential for `upstream`, if it holds one.
pub async fn find(pool: &Pool, org_id: &str, upstream: &str) -> DbResult<Option<ProviderCredential>> {
    with_conn!(pool, read, |conn| {
        Ok(provider_credentials::table
            .filter(provider_credentials::org_id.eq(org_id))
            .filter(provider_credentials::upstream.eq(upstream))
            .select(ProviderCredential::as_select())
            .first(conn)
            .await
            .optional()?)
    })
}

/// Deletes one of the organization's credentials; `None` when it holds no such id.
pub async fn delete(
    pool: &Pool,
    org_id: &str,
    id: &str,
    actor: &str,
) -> DbResult<Option<ProviderCredential>> {
    with_tx!(pool, |conn| {
        let row: Option<ProviderCredential> = diesel::delete(
            provider_credentials::table
                .filter(provider_credentials::id.eq(id))
                .filter(provider_credentials::org_id.eq(org_id)),
        )
        .returning(ProviderCredential::as_returning())
        .get_result(conn)
        .await
        .optional()?;
        if let Some(row) = &row {
            let now = time::now_ms();
            let entry = audit_entry(row, actor, actions::PROVIDER_CREDENTIAL_DELETED);
            record_audit!(conn, audit::new_event(entry, now))?;
            note_credential_change!(conn, &row.org_id, &row.upstream, now);
        }
        Ok(row)
    })
}

/// A credential change: (change id, organization, upstream, when).
pub type CredentialChange = (String, String, String, i64);

change_feed!(provider_credential_changes, CredentialChange, (id, org_id, upstream, changed_at));
