//! Margin health: percentages, tiers at their exact boundaries, the sparkline's
//! projection and the budget suggestion.
//!
//! Tiers (spec: Margin health tier) are decided on exact integers: with margin
//! `m = revenue - cost`, `healthy` when `100·m >= 50·revenue`, `moderate` when
//! `100·m >= 20·revenue`, `at_risk` when `m >= 0`, else `critical`. A month
//! without revenue is `healthy` when it has no cost either (nothing to lose) and
//! `critical` when it has cost; its `marginPercent` is null.

use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Tier {
    Healthy,
    Moderate,
    AtRisk,
    Critical,
}

impl Tier {
    pub fn as_str(self) -> &'static str {
        match self {
            Tier::Healthy => "healthy",
            Tier::Moderate => "moderate",
            Tier::AtRisk => "at_risk",
            Tier::Critical => "critical",
        }
    }

    pub fn parse(s: &str) -> Option<Tier> {
        [Tier::Healthy, Tier::Moderate, Tier::AtRisk, Tier::Critical].into_iter().find(|t| t.as_str() == s)
    }

    /// Whether going from `self` to `to` is a worsening.
    pub fn worsens_to(self, to: Tier) -> bool {
        to > self
    }

    /// The tier of a margin percentage (for projections, which are not exact).
    pub fn of_percent(p: f64) -> Tier {
        if p >= 50.0 {
            Tier::Healthy
        } else if p >= 20.0 {
            Tier::Moderate
        } else if p >= 0.0 {
            Tier::AtRisk
        } else {
            Tier::Critical
        }
    }
}

/// The tier of a month's revenue and cost (microdollars).
pub fn tier(revenue: i64, cost: i64) -> Tier {
    let (r, m) = (i128::from(revenue), i128::from(revenue) - i128::from(cost));
    if r <= 0 {
        return if cost <= 0 && r == 0 { Tier::Healthy } else { Tier::Critical };
    }
    if 100 * m >= 50 * r {
        Tier::Healthy
    } else if 100 * m >= 20 * r {
        Tier::Moderate
    } else if m >= 0 {
        Tier::AtRisk
    } else {
        Tier::Critical
    }
}

/// `(revenue - cost) / revenue` in percent, rounded to two decimals; `None`
/// without revenue.
pub fn margin_percent(revenue: i64, cost: i64) -> Option<f64> {
    if revenue <= 0 {
        return None;
    }
    let m = i128::from(revenue) - i128::from(cost);
    // Basis points of a hundredth, rounded half away from zero, in integers.
    let scaled = m * 10_000;
    let r = i128::from(revenue);
    let q = if scaled >= 0 { (scaled + r / 2) / r } else { (scaled - r / 2) / r };
    Some(q as f64 / 100.0)
}

/// The next month's margin percentage on the least-squares line through the
/// known points (in order, one month apart); `None` with fewer than two.
pub fn project_next(points: &[Option<f64>]) -> Option<f64> {
    let known: Vec<(f64, f64)> =
        points.iter().enumerate().filter_map(|(i, p)| p.map(|p| (i as f64, p))).collect();
    if known.len() < 2 {
        return None;
    }
    let n = known.len() as f64;
    let mean_x = known.iter().map(|(x, _)| x).sum::<f64>() / n;
    let mean_y = known.iter().map(|(_, y)| y).sum::<f64>() / n;
    let sxx: f64 = known.iter().map(|(x, _)| (x - mean_x).powi(2)).sum();
    let sxy: f64 = known.iter().map(|(x, y)| (x - mean_x) * (y - mean_y)).sum();
    let slope = if sxx == 0.0 { 0.0 } else { sxy / sxx };
    let next_x = points.len() as f64;
    Some(((mean_y + slope * (next_x - mean_x)) * 100.0).round() / 100.0)
}

/// The monthly cost that keeps a customer exactly at the healthy floor (50 %
/// margin): `floor(revenue / 2)`, 0 without revenue.
pub fn budget_suggestion(revenue: i64) -> i64 {
    revenue.max(0) / 2
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiers_at_their_exact_boundaries() {
        assert_eq!(tier(1_000_000, 500_000), Tier::Healthy, "exactly 50 %");
        assert_eq!(tier(1_000_000, 500_001), Tier::Moderate, "just under 50 %");
        assert_eq!(tier(1_000_000, 800_000), Tier::Moderate, "exactly 20 %");
        assert_eq!(tier(1_000_000, 800_001), Tier::AtRisk, "just under 20 %");
        assert_eq!(tier(1_000_000, 1_000_000), Tier::AtRisk, "exactly 0 %");
        assert_eq!(tier(1_000_000, 1_000_001), Tier::Critical, "just under 0 %");
        assert_eq!(tier(0, 0), Tier::Healthy);
        assert_eq!(tier(0, 1), Tier::Critical);
        assert_eq!(tier(i64::MAX, i64::MIN), Tier::Healthy, "no overflow");
        assert_eq!(tier(3, 1), Tier::Healthy, "66.7 %");
    }

    #[test]
    fn percentages_round_to_hundredths() {
        assert_eq!(margin_percent(1_000_000, 500_000), Some(50.0));
        assert_eq!(margin_percent(3, 1), Some(66.67));
        assert_eq!(margin_percent(3, 2), Some(33.33));
        assert_eq!(margin_percent(1_000_000, 2_000_000), Some(-100.0));
        assert_eq!(margin_percent(0, 5), None);
    }

    #[test]
    fn projection_follows_the_trend() {
        assert_eq!(project_next(&[Some(60.0), Some(50.0), Some(40.0)]), Some(30.0));
        assert_eq!(project_next(&[None, Some(10.0), None, Some(30.0)]), Some(40.0));
        assert_eq!(project_next(&[Some(10.0)]), None);
        assert_eq!(Tier::of_percent(49.99), Tier::Moderate);
        assert!(Tier::Moderate.worsens_to(Tier::Critical) && !Tier::AtRisk.worsens_to(Tier::Healthy));
        assert_eq!(budget_suggestion(1_000_001), 500_000);
    }
}
