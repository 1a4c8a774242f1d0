//! Creating users: signup through HTTP and the operator's `user create` command
//! share these rules.

use crate::config::Config;
use crate::db::{self, models::User, Pool};
use crate::error::{ApiError, ErrorCode, Issues};
use crate::plans::Role;
use crate::util::{ids, time};

pub struct CreatedUser {
    pub user_id: String,
    pub org_id: String,
    pub org_created: bool,
}

pub fn normalize_email(email: &str) -> String {
    email.trim().to_lowercase()
}

pub fn check_credentials(email: &str, password: &str, issues: &mut Issues) {
    let valid_email = email.len() <= 254
        && email.split_once('@').is_some_and(|(local, domain)| !local.is_empty() && domain.contains('.'))
        && !email.contains(char::is_whitespace);
    issues.check(valid_email, &["email"], "must be a valid email address");
    let n = password.chars().count();
    issues.check(
        (super::password::MIN_PASSWORD_LEN..=super::password::MAX_PASSWORD_LEN).contains(&n),
        &["password"],
        "must be 8 to 256 characters",
    );
}

async fn new_user(email: &str, password: &str, name: Option<String>) -> Result<User, ApiError> {
    let mut issues = Issues::new();
    check_credentials(email, password, &mut issues);
    issues.finish()?;
    let password_hash =
        super::password::hash_blocking(password.to_owned()).await.map_err(ApiError::internal)?;
    Ok(User { id: ids::new_id(), email: email.to_owned(), name, password_hash, created_at: time::now_ms() })
}

fn email_taken() -> ApiError {
    ApiError::new(ErrorCode::Conflict, "A user with this email already exists")
}

/// Signup: a new user owning a new organization. With `first_user_only`, the user
/// is created only while there is no user at all (decided inside the transaction);
/// `Ok(None)` when there already is one.
pub async fn signup(
    pool: &Pool,
    config: &Config,
    email: &str,
    password: &str,
    name: Option<String>,
    first_user_only: bool,
) -> Result<Option<CreatedUser>, ApiError> {
    let email = normalize_email(email);
    let user = new_user(&email, password, name.clone()).await?;
    let org_name =
        name.map(|n| format!("{n}'s organization")).unwrap_or_else(|| format!("{email}'s organization"));
    let org = db::orgs::new_org(ids::new_id(), org_name, config.default_plan.as_str(), user.created_at);
    let (user_id, org_id) = (user.id.clone(), org.id.clone());
    let created = db::orgs::create_user_with_org(pool, user, org, first_user_only).await.map_err(|e| {
        if e.is_unique_violation() {
            email_taken()
        } else {
            e.into()
        }
    })?;
    Ok(created.then_some(CreatedUser { user_id, org_id, org_created: true }))
}

/// Operator command: a user in the organization called `org_name`.
pub async fn create_user_in_org(
    pool: &Pool,
    config: &Config,
    email: &str,
    password: &str,
    name: Option<String>,
    org_name: &str,
    role: Role,
) -> Result<CreatedUser, ApiError> {
    let email = normalize_email(email);
    let user = new_user(&email, password, name).await?;
    let org =
        db::orgs::new_org(ids::new_id(), org_name.to_owned(), config.default_plan.as_str(), user.created_at);
    let user_id = user.id.clone();
    let (org_id, org_created) = db::orgs::create_user_in_named_org(pool, user, org_name, role.as_str(), org)
        .await
        .map_err(|e| if e.is_unique_violation() { email_taken() } else { e.into() })?;
    Ok(CreatedUser { user_id, org_id, org_created })
}
