//! The storage side of a change feed (see `crate::changes`): a table of change rows,
//! each with an `id` and a `changed_at`, written in the transaction of the change it
//! announces, read page by page in `(changed_at, id)` order and pruned by age.
//!
//! Every feed's table differs only in what a row says besides its id and time, so the
//! two queries are stated once here and expanded per table by [`change_feed!`].

/// `change_feed!(table, Row, (columns...))` defines, in the calling module:
/// - `changes_since(pool, since, after, limit) -> DbResult<Vec<Row>>`: up to `limit`
///   changes recorded at or after `since` and after the change `after` (its
///   `(changed_at, id)`), in `(changed_at, id)` order: a page of the feed;
/// - `prune_changes(pool, before) -> DbResult<usize>`: drops change rows older than
///   `before`.
///
/// `Row` is the tuple of `columns`, selected in that order.
macro_rules! change_feed {
    ($table:ident, $row:ty, ($($column:ident),+ $(,)?)) => {
        /// A page of this feed: see `db::change_feed`.
        pub async fn changes_since(
            pool: &$crate::db::Pool,
            since: i64,
            after: Option<(i64, String)>,
            limit: usize,
        ) -> $crate::db::DbResult<Vec<$row>> {
            use diesel::{BoolExpressionMethods, ExpressionMethods, QueryDsl};
            use $crate::db::schema::$table as c;
            $crate::with_conn!(pool, read, |conn| {
                use diesel_async::RunQueryDsl;
                let mut query = c::table.filter(c::changed_at.ge(since)).into_boxed();
                if let Some((at, id)) = &after {
                    query = query
                        .filter(c::changed_at.gt(*at).or(c::changed_at.eq(*at).and(c::id.gt(id.clone()))));
                }
                Ok(query
                    .order((c::changed_at.asc(), c::id.asc()))
                    .select(($(c::$column),+))
                    .limit(i64::try_from(limit).unwrap_or(i64::MAX))
                    .load(conn)
                    .await?)
            })
        }

        /// Drops this feed's change rows older than `before`.
        pub async fn prune_changes(pool: &$crate::db::Pool, before: i64) -> $crate::db::DbResult<usize> {
            use diesel::{ExpressionMethods, QueryDsl};
            use $crate::db::schema::$table as c;
            $crate::with_conn!(pool, write, |conn| {
                use diesel_async::RunQueryDsl;
                Ok(diesel::delete(c::table.filter(c::changed_at.lt(before))).execute(conn).await?)
            })
        }
    };
}
pub(crate) use change_feed;
