//! Dashboard sign-in: signup, login, logout, the current session, switching
//! organization.

use actix_web::{get, post, web, HttpRequest, HttpResponse};
use serde::{Deserialize, Serialize};

use spendgate_engine::auth::session::{clear_cookie, resolve_org, session_cookie, SessionUser};
use spendgate_engine::auth::{password, random_hex, sha256_hex, users};
use spendgate_engine::db::{self, models::Session};
use spendgate_engine::error::{ApiError, ErrorCode};
use spendgate_engine::openapi::Data;
use spendgate_engine::state::AppState;
use spendgate_engine::util::json::JsonBody;
use spendgate_engine::util::{ids, time};

#[derive(Deserialize, utoipa::ToSchema)]
pub struct SignupBody {
    email: String,
    password: String,
    name: Option<String>,
}

#[derive(Deserialize, utoipa::ToSchema)]
pub struct LoginBody {
    email: String,
    password: String,
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SwitchOrgBody {
    org_id: String,
}

#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct UserView {
    pub id: String,
    pub email: String,
    pub name: Option<String>,
    pub created_at: String,
}

impl From<&db::models::User> for UserView {
    fn from(u: &db::models::User) -> Self {
        UserView {
            id: ids::prefixed(ids::USER, &u.id),
            email: u.email.clone(),
            name: u.name.clone(),
            created_at: time::iso(u.created_at),
        }
    }
}

#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct OrgRef {
    pub id: String,
    pub name: String,
    pub plan: String,
}

/// `POST /api/auth/login`: the signed-in user.
#[derive(Serialize, utoipa::ToSchema)]
pub struct LoginView {
    user: UserView,
}

#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct LoggedOut {
    logged_out: bool,
}

#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionView {
    user: UserView,
    org: OrgRef,
    role: String,
    /// The proxy's base URL as agents reach it (`proxy_public_url`, default
    /// `http://PROXY_ADDR`): what the dashboard puts in its SDK snippets.
    proxy_url: String,
}

async fn start_session(
    state: &AppState,
    user_id: &str,
    org_id: Option<&str>,
) -> Result<HttpResponse, ApiError> {
    let token = random_hex(32);
    let now = time::now_ms();
    let ttl_ms = i64::try_from(state.config.session_ttl.as_millis()).unwrap_or(i64::MAX);
    db::users::insert_session(
        &state.pool,
        Session {
            id: sha256_hex(&token),
            user_id: user_id.to_owned(),
            org_id: org_id.map(str::to_owned),
            created_at: now,
            expires_at: now.saturating_add(ttl_ms),
        },
    )
    .await?;
    let secure = !state.config.dev;
    let cookie = session_cookie(&token, secure, ttl_ms / 1000);
    Ok(HttpResponse::Ok().cookie(cookie).finish())
}

/// Counts a sign-in attempt (login or signup) against the per-address and per-email
/// limits before any password is hashed: 429 `rate_limit_exceeded` past either.
fn check_sign_in_rate(state: &AppState, req: &HttpRequest, email: &str) -> Result<(), ApiError> {
    let Some(ip) = state.config.trusted_proxies.client_ip(req) else { return Ok(()) };
    if state.rate_limits.check_auth(ip, &users::normalize_email(email)).allowed {
        Ok(())
    } else {
        Err(spendgate_engine::ratelimit::rate_limit_exceeded())
    }
}

fn signup_closed() -> ApiError {
    ApiError::forbidden("Signup is closed; ask an administrator for an invitation")
}

/// Creates a user and an organization it owns. Open while no user exists, or when
/// open signup is enabled; the new user is signed in. Concurrent first signups
/// create exactly one owner (the others get 403).
#[utoipa::path(post, path = "/api/auth/signup", tag = "auth", request_body = SignupBody, security(()),
    responses((status = 201, description = "User created and signed in; Set-Cookie svc_session", body = Data<SessionView>),
        (status = 400, description = "validation_error"),
        (status = 403, description = "forbidden: signup is closed"), (status = 409, description = "conflict: email taken"),
        (status = 429, description = "rate_limit_exceeded: too many sign-in attempts from this address or for this email")))]
#[post("/auth/signup")]
pub async fn signup(
    state: web::Data<AppState>,
    req: HttpRequest,
    body: JsonBody<SignupBody>,
) -> Result<HttpResponse, ApiError> {
    let body = body.value;
    check_sign_in_rate(&state, &req, &body.email)?;
    let first_user_only = !state.config.open_signup;
    if first_user_only && db::users::count_users(&state.pool).await? > 0 {
        return Err(signup_closed());
    }
    let name = body.name.map(|n| n.trim().to_owned()).filter(|n| !n.is_empty());
    let created =
        users::signup(&state.pool, &state.config, &body.email, &body.password, name, first_user_only)
            .await?
            .ok_or_else(signup_closed)?;
    let session = start_session(&state, &created.user_id, Some(&created.org_id)).await?;
    let user = db::users::find(&state.pool, &created.user_id)
        .await?
        .ok_or_else(|| ApiError::internal("user vanished"))?;
    let org = db::orgs::find(&state.pool, &created.org_id)
        .await?
        .ok_or_else(|| ApiError::internal("org vanished"))?;
    let mut res = HttpResponse::Created();
    for c in session.cookies() {
        res.cookie(c.into_owned());
    }
    Ok(res.json(serde_json::json!({ "data": SessionView {
        user: UserView::from(&user),
        org: OrgRef { id: ids::prefixed(ids::ORG, &org.id), name: org.name, plan: org.plan },
        role: "owner".to_owned(),
        proxy_url: state.proxy_public_url(),
    }})))
}

/// Signs in with email and password; sets the `svc_session` cookie.
#[utoipa::path(post, path = "/api/auth/login", tag = "auth", request_body = LoginBody, security(()),
    responses((status = 200, description = "Signed in; Set-Cookie svc_session", body = Data<LoginView>),
        (status = 401, description = "authentication_required: wrong email or password"),
        (status = 429, description = "rate_limit_exceeded: too many sign-in attempts from this address or for this email")))]
#[post("/auth/login")]
pub async fn login(
    state: web::Data<AppState>,
    req: HttpRequest,
    body: JsonBody<LoginBody>,
) -> Result<HttpResponse, ApiError> {
    let body = body.value;
    check_sign_in_rate(&state, &req, &body.email)?;
    let email = users::normalize_email(&body.email);
    let user = db::users::find_by_email(&state.pool, &email).await?;
    // Verify against a real hash even for unknown emails so timing does not reveal
    // which addresses have accounts.
    let stored = user.as_ref().map(|u| u.password_hash.clone()).unwrap_or_else(|| DUMMY_HASH.to_owned());
    let ok = password::verify_blocking(body.password, stored).await;
    let user = match (user, ok) {
        (Some(u), true) => u,
        _ => return Err(ApiError::new(ErrorCode::AuthenticationRequired, "Invalid email or password")),
    };
    let org_id = db::orgs::orgs_for_user(&state.pool, &user.id).await?.into_iter().next().map(|(o, _)| o.id);
    let session = start_session(&state, &user.id, org_id.as_deref()).await?;
    let mut res = HttpResponse::Ok();
    for c in session.cookies() {
        res.cookie(c.into_owned());
    }
    Ok(res.json(Data { data: LoginView { user: UserView::from(&user) } }))
}

/// An argon2 hash of a random password, used to equalize login timing.
const DUMMY_HASH: &str =
    "$argon2id$v=19$m=19456,t=2,p=1$c29tZXNhbHRzb21lc2FsdA$yZCNoT2x0bSP3jmZfwBdmeH1hWjPWHU1Zx5ALSy7nO8";

/// Ends the session and clears the cookie.
#[utoipa::path(post, path = "/api/auth/logout", tag = "auth", security(("session" = [])),
    responses((status = 200, description = "Session ended; the cookie is cleared", body = Data<LoggedOut>)))]
#[post("/auth/logout")]
pub async fn logout(state: web::Data<AppState>, user: SessionUser) -> Result<HttpResponse, ApiError> {
    db::users::delete_session(&state.pool, &user.session_id).await?;
    Ok(HttpResponse::Ok()
        .cookie(clear_cookie(!state.config.dev))
        .json(Data { data: LoggedOut { logged_out: true } }))
}

/// The signed-in user, current organization and role.
#[utoipa::path(get, path = "/api/auth/session", tag = "auth", security(("session" = [])),
    responses((status = 200, body = Data<SessionView>)))]
#[get("/auth/session")]
pub async fn get_session(state: web::Data<AppState>, user: SessionUser) -> Result<HttpResponse, ApiError> {
    session_view(&state, user).await
}

async fn session_view(state: &AppState, user: SessionUser) -> Result<HttpResponse, ApiError> {
    let auth = resolve_org(state, user).await?;
    Ok(HttpResponse::Ok().json(serde_json::json!({ "data": SessionView {
        user: UserView::from(&auth.user),
        org: OrgRef { id: ids::prefixed(ids::ORG, &auth.org.id), name: auth.org.name.clone(), plan: auth.org.plan.clone() },
        role: auth.role.as_str().to_owned(),
        proxy_url: state.proxy_public_url(),
    }})))
}

/// Points the session at another organization the user belongs to.
#[utoipa::path(post, path = "/api/auth/switch-org", tag = "auth", request_body = SwitchOrgBody, security(("session" = [])),
    responses((status = 200, body = Data<SessionView>), (status = 404, description = "not_found: not a member")))]
#[post("/auth/switch-org")]
pub async fn switch_org(
    state: web::Data<AppState>,
    user: SessionUser,
    body: JsonBody<SwitchOrgBody>,
) -> Result<HttpResponse, ApiError> {
    let org_id = ids::parse_prefixed_or_raw(ids::ORG, &body.value.org_id)
        .ok_or_else(|| ApiError::invalid_field(&["orgId"], "must be an organization id (svc_org_…)"))?;
    if db::orgs::membership(&state.pool, &org_id, &user.user.id).await?.is_none() {
        return Err(ApiError::not_found("Organization"));
    }
    db::users::set_session_org(&state.pool, &user.session_id, Some(&org_id)).await?;
    let user = SessionUser { org_id: Some(org_id), ..user };
    session_view(&state, user).await
}

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(signup).service(login).service(logout).service(get_session).service(switch_org);
}

#[derive(utoipa::OpenApi)]
#[openapi(paths(signup, login, logout, get_session, switch_org))]
pub struct ApiDoc;
