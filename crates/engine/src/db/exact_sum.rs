//! Exact, overflow-proof `SUM` of a BIGINT column on both backends.
//!
//! A plain `SUM` fails once the total leaves `i64`: SQLite raises "integer overflow",
//! and PostgreSQL's NUMERIC sum fails the cast back to BIGINT. So every aggregate sums
//! two parts that cannot overflow, `x / 10^6` and `x % 10^6` (integer division and
//! remainder truncate toward zero on both backends, so `x = hi * 10^6 + lo` holds for
//! negative values too), and Rust joins them in `i128`, saturating at the `i64`
//! bounds. Each part of one row is below 10^13 even for `i64::MAX`, so a part's sum
//! stays inside `i64` for about a million rows of the largest possible value, and for
//! trillions of rows of values within the input bounds (`util::bounds`).

use diesel::dsl::sql;
use diesel::expression::SqlLiteral;
use diesel::sql_types::BigInt;

/// The two partial sums of one column, as loaded: `(Σ x / 10^6, Σ x % 10^6)`.
pub type SumParts = (i64, i64);

const SPLIT: i64 = 1_000_000;

/// The select expression of the two partial sums of `column` (table-qualified).
pub fn parts(column: &str) -> (SqlLiteral<BigInt>, SqlLiteral<BigInt>) {
    (
        sql::<BigInt>(&format!("COALESCE(CAST(SUM({column} / {SPLIT}) AS BIGINT), 0)")),
        sql::<BigInt>(&format!("COALESCE(CAST(SUM({column} % {SPLIT}) AS BIGINT), 0)")),
    )
}

/// An expression to `ORDER BY` the sum of `column`: exact on PostgreSQL (NUMERIC);
/// on SQLite exact while inside `i64`, past it a REAL that still orders correctly.
/// It never fails.
pub fn order_key(column: &str) -> SqlLiteral<BigInt> {
    sql::<BigInt>(&format!(
        "(COALESCE(SUM({column} / {SPLIT}), 0) * {SPLIT} + COALESCE(SUM({column} % {SPLIT}), 0))"
    ))
}

/// The exact sum, saturated to the `i64` range.
pub fn join((hi, lo): SumParts) -> i64 {
    let exact = i128::from(hi) * i128::from(SPLIT) + i128::from(lo);
    i64::try_from(exact).unwrap_or(if exact < 0 { i64::MIN } else { i64::MAX })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(x: i64) -> SumParts {
        (x / SPLIT, x % SPLIT)
    }

    fn add(a: SumParts, b: SumParts) -> SumParts {
        (a.0 + b.0, a.1 + b.1)
    }

    #[test]
    fn joins_exactly_and_saturates() {
        for x in [0, 1, -1, 999_999, 1_000_000, -1_234_567_890_123, i64::MAX, i64::MIN] {
            assert_eq!(join(split(x)), x, "{x}");
        }
        assert_eq!(join(add(split(i64::MAX), split(1))), i64::MAX);
        assert_eq!(join(add(split(i64::MAX), split(-5))), i64::MAX - 5);
        assert_eq!(join(add(split(i64::MIN), split(-1))), i64::MIN);
        assert_eq!(join(add(split(9_223_372_036_854_775_000), split(9_223_372_036_854_775_000))), i64::MAX);
    }
}
