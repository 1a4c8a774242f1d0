//! Cursor pagination: forward-only, newest first. The cursor is `{createdAt, id}`,
//! sent back JSON-encoded in the `cursor` query parameter.
//!
//! `id` is the last item's id exactly as the items show it: the public, prefixed id
//! (`svc_key_…`, `svc_evt_…`) where the resource has one. A cursor's id is accepted
//! with that prefix or without it: cursors handed out before ids were prefixed name
//! the same row by its bare UUID, so a client paging across an upgrade loses nothing.

use serde::{Deserialize, Serialize};

use crate::error::ApiError;
use crate::util::time;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Cursor {
    pub created_at: String,
    pub id: String,
}

/// A decoded cursor: rows strictly older than `(created_at, id)` come next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct After {
    pub created_at: i64,
    pub id: String,
}

pub const MAX_LIMIT: i64 = 100;

/// Validates `limit` (1..=max) and decodes `cursor`; failures are `validation_error`.
/// `id_prefix` is the prefix of the items' public ids (`""` when they have none); the
/// decoded `After::id` is the bare id the table stores.
pub fn parse(
    limit: Option<&str>,
    cursor: Option<&str>,
    default: i64,
    id_prefix: &str,
) -> Result<(i64, Option<After>), ApiError> {
    let (limit, after) = parse_with_max(limit, cursor, default, MAX_LIMIT)?;
    let after = after.map(|a| match a.id.strip_prefix(id_prefix) {
        Some(bare) if !id_prefix.is_empty() => After { id: bare.to_owned(), ..a },
        _ => a,
    });
    Ok((limit, after))
}

pub fn parse_with_max(
    limit: Option<&str>,
    cursor: Option<&str>,
    default: i64,
    max: i64,
) -> Result<(i64, Option<After>), ApiError> {
    let limit = match limit {
        None => default,
        Some(s) => match s.parse::<i64>() {
            Ok(n) if (1..=max).contains(&n) => n,
            _ => {
                return Err(ApiError::invalid_field(
                    &["limit"],
                    format!("must be an integer from 1 to {max}"),
                ))
            }
        },
    };
    let after = match cursor {
        None | Some("") => None,
        Some(s) => {
            let c: Cursor = serde_json::from_str(s).map_err(|_| {
                ApiError::invalid_field(&["cursor"], "must be a JSON-encoded {createdAt, id} object")
            })?;
            let created_at = time::parse_iso(&c.created_at).ok_or_else(|| {
                ApiError::invalid_field(&["cursor", "createdAt"], "must be an ISO 8601 timestamp")
            })?;
            Some(After { created_at, id: c.id })
        }
    };
    Ok((limit, after))
}

/// Given `limit + 1` fetched rows, trims to `limit` and builds the next cursor.
/// `key` gives a row's time and bare id; the cursor shows the id with `id_prefix`,
/// as the items do.
pub fn page<T>(
    mut rows: Vec<T>,
    limit: i64,
    id_prefix: &str,
    key: impl Fn(&T) -> (i64, String),
) -> (Vec<T>, Option<Cursor>) {
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    if rows.len() > limit {
        rows.truncate(limit);
        let cursor = rows.last().map(|r| {
            let (created_at, id) = key(r);
            Cursor { created_at: time::iso(created_at), id: format!("{id_prefix}{id}") }
        });
        (rows, cursor)
    } else {
        (rows, None)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn limit_bounds() {
        assert_eq!(parse(None, None, 25, "").unwrap().0, 25);
        assert_eq!(parse(Some("100"), None, 25, "").unwrap().0, 100);
        assert!(parse(Some("101"), None, 25, "").is_err());
        assert!(parse(Some("0"), None, 25, "").is_err());
        assert!(parse(Some("x"), None, 25, "").is_err());
    }

    #[test]
    fn cursor_round_trip() {
        let (rows, cursor) = page(vec![(3, "c"), (2, "b"), (1, "a")], 2, "svc_x_", |r| (r.0, r.1.to_owned()));
        assert_eq!(rows.len(), 2);
        let cursor = cursor.unwrap();
        assert_eq!(cursor.id, "svc_x_b");
        let encoded = serde_json::to_string(&cursor).unwrap();
        let (_, after) = parse(None, Some(&encoded), 25, "svc_x_").unwrap();
        assert_eq!(after, Some(After { created_at: 2, id: "b".into() }));
        // A cursor from before ids were prefixed still names the same row.
        let old = serde_json::to_string(&Cursor { id: "b".into(), ..cursor }).unwrap();
        assert_eq!(parse(None, Some(&old), 25, "svc_x_").unwrap().1.unwrap().id, "b");
        assert!(parse(None, Some("{"), 25, "").is_err());
    }
}
