//! Plan tiers and the limits each one carries.

use std::str::FromStr;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Plan {
    Free,
    Pro,
    Scale,
    Enterprise,
}

/// Tier limits. `None` means unlimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlanLimits {
    pub api_keys: Option<i64>,
    pub webhook_endpoints: Option<i64>,
    pub budgets: Option<i64>,
    /// The largest `maxBudgetMicrodollars` a budget may have.
    pub budget_cap_microdollars: Option<i64>,
    /// Proxied requests governed per billing period (Free hard-blocks at the cap).
    pub governed_requests_per_period: Option<i64>,
}

impl Plan {
    pub fn as_str(self) -> &'static str {
        match self {
            Plan::Free => "free",
            Plan::Pro => "pro",
            Plan::Scale => "scale",
            Plan::Enterprise => "enterprise",
        }
    }

    /// Pro and above unlock exports, margins, body logging and full webhook payloads.
    pub fn is_paid(self) -> bool {
        !matches!(self, Plan::Free)
    }

    pub fn limits(self) -> PlanLimits {
        match self {
            Plan::Free => PlanLimits {
                api_keys: Some(10),
                webhook_endpoints: Some(2),
                budgets: Some(20),
                budget_cap_microdollars: Some(1_000_000_000),
                governed_requests_per_period: Some(10_000),
            },
            Plan::Pro => PlanLimits {
                api_keys: None,
                webhook_endpoints: None,
                budgets: Some(500),
                budget_cap_microdollars: Some(100_000_000_000),
                governed_requests_per_period: Some(1_000_000),
            },
            Plan::Scale => PlanLimits {
                api_keys: None,
                webhook_endpoints: None,
                budgets: None,
                budget_cap_microdollars: None,
                governed_requests_per_period: Some(10_000_000),
            },
            Plan::Enterprise => PlanLimits {
                api_keys: None,
                webhook_endpoints: None,
                budgets: None,
                budget_cap_microdollars: None,
                governed_requests_per_period: None,
            },
        }
    }
}

impl FromStr for Plan {
    type Err = ();

    fn from_str(s: &str) -> Result<Self, ()> {
        match s {
            "free" => Ok(Plan::Free),
            "pro" => Ok(Plan::Pro),
            "scale" => Ok(Plan::Scale),
            "enterprise" => Ok(Plan::Enterprise),
            _ => Err(()),
        }
    }
}

/// Dashboard roles, in ascending order of power.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Viewer,
    Member,
    Admin,
    Owner,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Member => "member",
            Role::Admin => "admin",
            Role::Owner => "owner",
        }
    }
}

impl FromStr for Role {
    type Err = ();

    fn from_str(s: &str) -> Result<Self, ()> {
        match s {
            "viewer" => Ok(Role::Viewer),
            "member" => Ok(Role::Member),
            "admin" => Ok(Role::Admin),
            "owner" => Ok(Role::Owner),
            _ => Err(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_are_ordered() {
        assert!(Role::Viewer < Role::Member && Role::Member < Role::Admin && Role::Admin < Role::Owner);
        assert_eq!("admin".parse::<Role>(), Ok(Role::Admin));
        assert_eq!(Plan::Free.limits().api_keys, Some(10));
        assert_eq!(Plan::Pro.limits().api_keys, None);
    }
}
