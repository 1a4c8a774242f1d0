//! Dashboard sessions: the `svc_session` cookie, the extractors that turn it into a
//! user, organization and role, and the same-origin rule for session writes.

use std::future::Future;
use std::pin::Pin;

use actix_web::cookie::{Cookie, SameSite};
use actix_web::dev::Payload;
use actix_web::http::{header, Method};
use actix_web::{web, FromRequest, HttpRequest};

use crate::db::models::{Organization, User};
use crate::db::{self};
use crate::error::ApiError;
use crate::plans::{Plan, Role};
use crate::state::AppState;
use crate::util::time;

pub const COOKIE_NAME: &str = "svc_session";

/// A signed-in user, with the organization the session currently points at (if any).
#[derive(Debug, Clone)]
pub struct SessionUser {
    /// SHA-256 of the cookie token: the session row's id.
    pub session_id: String,
    pub user: User,
    pub org_id: Option<String>,
}

/// A signed-in user acting inside an organization with a role.
#[derive(Debug, Clone)]
pub struct SessionAuth {
    pub session_id: String,
    pub user: User,
    pub org: Organization,
    pub role: Role,
}

impl SessionAuth {
    /// Refuses with 403 `forbidden` below `min`.
    pub fn require(&self, min: Role) -> Result<(), ApiError> {
        if self.role >= min {
            Ok(())
        } else {
            Err(ApiError::forbidden(format!("This action requires the {} role", min.as_str())))
        }
    }

    pub fn plan(&self) -> Plan {
        self.org.plan.parse().unwrap_or(Plan::Free)
    }
}

pub fn session_cookie(token: &str, secure: bool, max_age_secs: i64) -> Cookie<'static> {
    Cookie::build(COOKIE_NAME, token.to_owned())
        .http_only(true)
        .same_site(SameSite::Lax)
        .path("/")
        .secure(secure)
        .max_age(actix_web::cookie::time::Duration::seconds(max_age_secs))
        .finish()
}

pub fn clear_cookie(secure: bool) -> Cookie<'static> {
    let mut c = session_cookie("", secure, 0);
    c.make_removal();
    c
}

/// Session-authenticated writes must come from our own origin. Browsers always send
/// `Origin` on cross-site POSTs, so a present, foreign `Origin` (or, lacking it, a
/// foreign `Referer`) is refused; `Sec-Fetch-Site: cross-site` is refused too.
pub fn same_origin(req: &HttpRequest) -> bool {
    if matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS) {
        return true;
    }
    let host = req.headers().get(header::HOST).and_then(|v| v.to_str().ok()).unwrap_or_default();
    let source = req
        .headers()
        .get(header::ORIGIN)
        .or_else(|| req.headers().get(header::REFERER))
        .and_then(|v| v.to_str().ok());
    if let Some(source) = source {
        return url::Url::parse(source).ok().is_some_and(|u| {
            let authority = match (u.host_str(), u.port()) {
                (Some(h), Some(p)) => format!("{h}:{p}"),
                (Some(h), None) => h.to_owned(),
                _ => return false,
            };
            authority.eq_ignore_ascii_case(host)
        });
    }
    req.headers().get("sec-fetch-site").and_then(|v| v.to_str().ok()).is_none_or(|v| v != "cross-site")
}

fn state(req: &HttpRequest) -> Result<AppState, ApiError> {
    req.app_data::<web::Data<AppState>>()
        .map(|d| d.get_ref().clone())
        .ok_or_else(|| ApiError::internal("application state missing"))
}

async fn load_session_user(
    state: AppState,
    token: Option<String>,
    same_origin: bool,
) -> Result<SessionUser, ApiError> {
    let token = token.ok_or_else(ApiError::authentication_required)?;
    let session_id = super::sha256_hex(&token);
    let session = db::users::find_session(&state.pool, &session_id, time::now_ms())
        .await?
        .ok_or_else(ApiError::authentication_required)?;
    if !same_origin {
        return Err(ApiError::forbidden("Cross-origin requests are not allowed on session endpoints"));
    }
    let user = db::users::find(&state.pool, &session.user_id)
        .await?
        .ok_or_else(ApiError::authentication_required)?;
    Ok(SessionUser { session_id, user, org_id: session.org_id })
}

impl FromRequest for SessionUser {
    type Error = ApiError;
    type Future = Pin<Box<dyn Future<Output = Result<Self, ApiError>>>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        let token = req.cookie(COOKIE_NAME).map(|c| c.value().to_owned()).filter(|v| !v.is_empty());
        let same = same_origin(req);
        let st = state(req);
        Box::pin(async move { load_session_user(st?, token, same).await })
    }
}

/// Resolves the organization of a session: its current one while the membership
/// exists, else the user's oldest organization (persisted back to the session).
pub async fn resolve_org(state: &AppState, user: SessionUser) -> Result<SessionAuth, ApiError> {
    if let Some(org_id) = &user.org_id {
        if let Some(m) = db::orgs::membership(&state.pool, org_id, &user.user.id).await? {
            if let Some(org) = db::orgs::find(&state.pool, org_id).await? {
                let role = m.role.parse().unwrap_or(Role::Viewer);
                return Ok(SessionAuth { session_id: user.session_id, user: user.user, org, role });
            }
        }
    }
    let (org, role) = db::orgs::orgs_for_user(&state.pool, &user.user.id)
        .await?
        .into_iter()
        .next()
        .ok_or_else(|| ApiError::forbidden("You are not a member of any organization"))?;
    db::users::set_session_org(&state.pool, &user.session_id, Some(&org.id)).await?;
    Ok(SessionAuth {
        session_id: user.session_id,
        user: user.user,
        org,
        role: role.parse().unwrap_or(Role::Viewer),
    })
}

impl FromRequest for SessionAuth {
    type Error = ApiError;
    type Future = Pin<Box<dyn Future<Output = Result<Self, ApiError>>>>;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        let user = SessionUser::from_request(req, payload);
        let st = state(req);
        Box::pin(async move { resolve_org(&st?, user.await?).await })
    }
}

#[cfg(test)]
mod tests {
    use actix_web::test::TestRequest;

    use super::*;

    #[test]
    fn origin_rules() {
        let get = TestRequest::get()
            .insert_header(("host", "a:1"))
            .insert_header(("origin", "http://evil"))
            .to_http_request();
        assert!(same_origin(&get));
        let ok = TestRequest::post()
            .insert_header(("host", "a:1"))
            .insert_header(("origin", "http://a:1"))
            .to_http_request();
        assert!(same_origin(&ok));
        let evil = TestRequest::post()
            .insert_header(("host", "a:1"))
            .insert_header(("origin", "http://evil"))
            .to_http_request();
        assert!(!same_origin(&evil));
        let referer = TestRequest::post()
            .insert_header(("host", "a:1"))
            .insert_header(("referer", "http://b:1/x"))
            .to_http_request();
        assert!(!same_origin(&referer));
        let script = TestRequest::post().insert_header(("host", "a:1")).to_http_request();
        assert!(same_origin(&script));
        let fetch = TestRequest::post()
            .insert_header(("host", "a:1"))
            .insert_header(("sec-fetch-site", "cross-site"))
            .to_http_request();
        assert!(!same_origin(&fetch));
    }
}
