//! Statements of fixed text kept prepared on each connection.
//!
//! diesel never caches an `UPDATE` it builds (a changeset's columns may depend on its
//! values), nor anything holding a SQL literal. On PostgreSQL an uncached statement
//! costs a round trip to prepare it and is parsed and planned again on every commit,
//! so the commit path's updates (the commit clock, each budget's spend and reserved,
//! each lease) each paid twice. [`Prepared`] marks a statement whose text is the same
//! on every call: diesel then keeps it in the connection's statement cache, keyed by
//! that text and its bind types, and later calls only bind and execute.
//!
//! Wrap only statements whose SQL never depends on values (no `eq_any` on SQLite,
//! no optional changeset fields, batch inserts only of a fixed row count): each
//! distinct text stays in the cache for the connection's life.

use diesel::backend::Backend;
use diesel::query_builder::{AstPass, Query, QueryFragment, QueryId};
use diesel::QueryResult;

/// A statement of fixed text, cached as prepared (see the module documentation).
#[derive(Debug, Clone, Copy)]
pub struct Prepared<Q>(pub Q);

impl<Q, DB> QueryFragment<DB> for Prepared<Q>
where
    DB: Backend,
    Q: QueryFragment<DB>,
{
    fn walk_ast<'b>(&'b self, pass: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        self.0.walk_ast(pass)
    }

    fn is_safe_to_cache_prepared(&self, _backend: &DB) -> QueryResult<bool> {
        Ok(true)
    }
}

impl<Q> QueryId for Prepared<Q> {
    /// Keyed by its text and bind types, not by its Rust type.
    type QueryId = ();
    const HAS_STATIC_QUERY_ID: bool = false;
}

impl<Q: Query> Query for Prepared<Q> {
    type SqlType = Q::SqlType;
}

impl<Q, Conn> diesel::RunQueryDsl<Conn> for Prepared<Q> {}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::sync::{Arc, Mutex};

    use diesel::connection::{InstrumentationEvent, SimpleConnection};
    use diesel::prelude::*;
    use diesel::sqlite::SqliteConnection;

    use super::Prepared;

    diesel::table! {
        counters (name) {
            name -> Text,
            value -> BigInt,
        }
    }

    /// The texts the connection put in its statement cache, as diesel reports them.
    fn cached_texts(conn: &mut SqliteConnection) -> Arc<Mutex<Vec<String>>> {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = seen.clone();
        conn.set_instrumentation(move |event: InstrumentationEvent<'_>| {
            if let InstrumentationEvent::CacheQuery { sql, .. } = event {
                sink.lock().unwrap().push(sql.to_owned());
            }
        });
        seen
    }

    /// An update through `Prepared` enters the statement cache once and is found
    /// there on every later run; diesel's own update never enters it.
    #[test]
    fn a_fixed_update_is_prepared_once() {
        let mut conn = SqliteConnection::establish(":memory:").unwrap();
        conn.batch_execute("CREATE TABLE counters (name TEXT PRIMARY KEY, value BIGINT NOT NULL); INSERT INTO counters VALUES ('a', 0)").unwrap();
        let cached = cached_texts(&mut conn);
        for _ in 0..3 {
            let plain =
                diesel::update(counters::table.find("a")).set(counters::value.eq(counters::value + 1));
            plain.execute(&mut conn).unwrap();
        }
        assert!(cached.lock().unwrap().is_empty(), "diesel caches no update");
        for n in 4..7 {
            let update = diesel::update(counters::table.find("a"))
                .set(counters::value.eq(counters::value + 1))
                .returning(counters::value);
            let value: i64 = Prepared(update).get_result(&mut conn).unwrap();
            assert_eq!(value, n);
        }
        let texts = cached.lock().unwrap().clone();
        assert_eq!(texts.len(), 1, "one text, prepared once: {texts:?}");
        assert!(texts[0].starts_with("UPDATE"), "{texts:?}");
    }
}
