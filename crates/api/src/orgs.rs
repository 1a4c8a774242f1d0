//! Organizations, their members and invitations, ownership transfer and the current
//! organization's usage.
//!
//! Endpoints under `/api/orgs/{id}` act on the organization in the path, not on the
//! session's current one: access is the session user's membership in that
//! organization. A caller who is not a member gets 404 `not_found` rather than 403,
//! so organization ids cannot be probed.

use actix_web::{delete, get, patch, post, web, HttpRequest, HttpResponse};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::json;

use spendgate_engine::auth::session::{SessionAuth, SessionUser};
use spendgate_engine::auth::{random_hex, sha256_hex};
use spendgate_engine::db::models::{Invitation, Organization};
use spendgate_engine::db::orgs::{
    AcceptOutcome, Departure, InviteOutcome, Member, OrgChanges, TransferOutcome,
};
use spendgate_engine::db::{self};
use spendgate_engine::error::{ApiError, ErrorCode, Issues};
use spendgate_engine::model_prices::UnpricedPolicy;
use spendgate_engine::openapi::{Data, Page};
use spendgate_engine::plans::{PlanLimits, Role};
use spendgate_engine::state::AppState;
use spendgate_engine::util::json::{double_option, JsonBody};
use spendgate_engine::util::pagination::{self, After, Cursor};
use spendgate_engine::util::{ids, time, validate};

/// Invitations are valid for seven days.
const INVITATION_TTL_MS: i64 = 7 * 24 * 3600 * 1000;
/// Default page size of the member and invitation lists.
const DEFAULT_PAGE: i64 = 50;
const MAX_ORG_NAME: usize = 100;
const MAX_URL_LEN: usize = 2048;
const MAX_EMAIL_LEN: usize = 254;

// ---------------------------------------------------------------------------
// Wire shapes
// ---------------------------------------------------------------------------

/// An organization in the caller's list, with the caller's role in it.
#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct OrgSummary {
    id: String,
    name: String,
    plan: String,
    role: String,
    created_at: String,
}

/// One organization in full.
#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct OrgView {
    id: String,
    name: String,
    plan: String,
    /// The caller's role in the organization.
    role: String,
    upgrade_url: Option<String>,
    customer_upgrade_url: Option<String>,
    /// `estimate` (the default) or `block`: what a proxied call to a model without a
    /// price does.
    unpriced_models: String,
    /// `allow` (the default: charged 0, tagged `_svc_unpriced_tool`) or `block`: what an
    /// MCP gateway call of a tool without a cost does.
    unpriced_tools: String,
    member_count: i64,
    created_at: String,
    updated_at: String,
}

fn org_view(org: &Organization, role: Role, member_count: i64) -> OrgView {
    OrgView {
        id: ids::prefixed(ids::ORG, &org.id),
        name: org.name.clone(),
        plan: org.plan.clone(),
        role: role.as_str().to_owned(),
        upgrade_url: org.upgrade_url.clone(),
        customer_upgrade_url: org.customer_upgrade_url.clone(),
        unpriced_models: org.unpriced_models.clone(),
        unpriced_tools: org.unpriced_tools.clone(),
        member_count,
        created_at: time::iso(org.created_at),
        updated_at: time::iso(org.updated_at),
    }
}

#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct MemberView {
    user_id: String,
    email: String,
    name: Option<String>,
    role: String,
    joined_at: String,
}

impl From<&Member> for MemberView {
    fn from(m: &Member) -> Self {
        MemberView {
            user_id: ids::prefixed(ids::USER, &m.user_id),
            email: m.email.clone(),
            name: m.name.clone(),
            role: m.role.clone(),
            joined_at: time::iso(m.joined_at),
        }
    }
}

#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct InvitationView {
    /// A plain UUID.
    id: String,
    email: String,
    role: String,
    invited_by: String,
    /// `pending`, `accepted`, `revoked` or `expired`.
    status: &'static str,
    created_at: String,
    expires_at: String,
}

fn invitation_view(inv: &Invitation, now: i64) -> InvitationView {
    let status = if inv.accepted_at.is_some() {
        "accepted"
    } else if inv.revoked_at.is_some() {
        "revoked"
    } else if inv.expires_at <= now {
        "expired"
    } else {
        "pending"
    };
    InvitationView {
        id: inv.id.clone(),
        email: inv.email.clone(),
        role: inv.role.clone(),
        invited_by: ids::prefixed(ids::USER, &inv.invited_by),
        status,
        created_at: time::iso(inv.created_at),
        expires_at: time::iso(inv.expires_at),
    }
}

/// A new invitation and its one-time token (shown once; only its hash is stored).
#[derive(Serialize, utoipa::ToSchema)]
pub struct CreatedInvitation {
    #[serde(flatten)]
    invitation: InvitationView,
    token: String,
}

#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    api_keys: i64,
    members: i64,
    budgets: i64,
    webhook_endpoints: i64,
    governed_requests: i64,
}

#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct UsageView {
    plan: String,
    limits: PlanLimits,
    usage: Usage,
    period_start: String,
}

#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AcceptedInvitation {
    org_id: String,
    org_name: String,
    plan: String,
    role: String,
}

#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct OwnershipTransfer {
    org_id: String,
    new_owner_user_id: String,
    previous_owner_user_id: String,
}

// ---------------------------------------------------------------------------
// Request bodies and query strings
// ---------------------------------------------------------------------------

#[derive(Deserialize, utoipa::ToSchema)]
pub struct CreateOrgBody {
    /// 1-100 characters, trimmed.
    name: String,
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpdateOrgBody {
    name: Option<String>,
    /// An http(s) URL, or null to clear.
    #[serde(default, deserialize_with = "double_option")]
    #[schema(value_type = Option<String>)]
    upgrade_url: Option<Option<String>>,
    /// An http(s) URL, or null to clear.
    #[serde(default, deserialize_with = "double_option")]
    #[schema(value_type = Option<String>)]
    customer_upgrade_url: Option<Option<String>>,
    /// `estimate` (a model without a price is charged at the conservative fallback
    /// price and tagged) or `block` (refused before it is forwarded). Audited as
    /// `org_unpriced_models.updated`.
    unpriced_models: Option<String>,
    /// `allow` (a gateway call of a tool without a cost is charged 0 and tagged
    /// `_svc_unpriced_tool`) or `block` (refused with an `isError` tool result).
    /// Audited as `org_unpriced_tools.updated`.
    unpriced_tools: Option<String>,
}

#[derive(Deserialize, utoipa::ToSchema)]
pub struct UpdateMemberBody {
    /// `viewer`, `member` or `admin`; ownership moves only through a transfer.
    role: String,
}

#[derive(Deserialize, utoipa::ToSchema)]
pub struct CreateInvitationBody {
    email: String,
    /// `viewer`, `member` (default) or `admin`.
    role: Option<String>,
}

#[derive(Deserialize, utoipa::ToSchema)]
pub struct AcceptInvitationBody {
    token: String,
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TransferBody {
    /// The member who becomes owner (`svc_usr_…`).
    user_id: String,
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct DeletedOrg {
    id: String,
    deleted: bool,
}

#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RemovedMember {
    user_id: String,
    removed: bool,
}

#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct LeftOrg {
    org_id: String,
    left: bool,
}

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct PageQuery {
    /// 1-100, default 50.
    limit: Option<String>,
    /// The previous page's `cursor`, JSON-encoded.
    cursor: Option<String>,
}

/// A JSON body whose failure is handed to the handler instead of failing the
/// extraction.
///
/// actix polls a handler's extractors together and answers with the first error,
/// so a bad body would win over the session and membership checks. Taking the body
/// as a `Result` lets the handler check access first and apply `?` after: a
/// non-member gets 404 whatever it sends, and nothing about the body's rules leaks
/// to callers without access. (It also kept in-flight session queries from being
/// dropped, which panicked actix workers on SQLite before `db::DetachedBlocking`.)
type Body<T> = Result<JsonBody<T>, ApiError>;

/// Parses the query string into `T`, answering in the error envelope (actix's own
/// `Query` extractor would answer in plain text).
pub(super) fn query<T: DeserializeOwned>(req: &HttpRequest) -> Result<T, ApiError> {
    web::Query::<T>::from_query(req.query_string())
        .map(web::Query::into_inner)
        .map_err(|e| ApiError::invalid_field(&[], format!("invalid query string: {e}")))
}

// ---------------------------------------------------------------------------
// Shared checks
// ---------------------------------------------------------------------------

fn parse_org_id(raw: &str) -> Result<String, ApiError> {
    ids::parse_prefixed_or_raw(ids::ORG, raw)
        .ok_or_else(|| ApiError::invalid_field(&["id"], "must be an organization id (svc_org_…)"))
}

fn parse_user_id(raw: &str, path: &[&str]) -> Result<String, ApiError> {
    ids::parse_prefixed_or_raw(ids::USER, raw)
        .ok_or_else(|| ApiError::invalid_field(path, "must be a user id (svc_usr_…)"))
}

fn parse_role(raw: &str) -> Role {
    raw.parse().unwrap_or(Role::Viewer)
}

/// A role that may be granted by a role change or an invitation: anything below
/// owner. Ownership moves only through `POST /api/orgs/{id}/transfer`. The error is
/// the issue message.
fn assignable_role(raw: &str) -> Result<Role, &'static str> {
    match raw.parse::<Role>() {
        Ok(Role::Owner) => {
            Err("cannot grant the owner role; transfer ownership with POST /api/orgs/{id}/transfer")
        }
        Ok(role) => Ok(role),
        Err(()) => Err("must be one of viewer, member, admin"),
    }
}

/// Checks an optional upgrade URL (an absolute http(s) URL), recording an issue
/// under `path` when it is not one; returns it trimmed.
fn check_url(value: &Option<String>, path: &str, issues: &mut Issues) -> Option<String> {
    let raw = value.as_deref()?;
    let trimmed = raw.trim();
    let ok = trimmed.len() <= MAX_URL_LEN
        && url::Url::parse(trimmed).is_ok_and(|u| {
            matches!(u.scheme(), "http" | "https") && u.host_str().is_some_and(|h| !h.is_empty())
        });
    issues.check(ok, &[path], "must be an http(s) URL of at most 2048 characters, or null");
    Some(trimmed.to_owned())
}

/// A deliberately loose address check (`local@domain.tld`): the invitation itself
/// proves the address, by being accepted from an account with that email.
fn is_email(email: &str) -> bool {
    email.len() <= MAX_EMAIL_LEN
        && !email.contains(char::is_whitespace)
        && email.split_once('@').is_some_and(|(local, domain)| {
            !local.is_empty() && domain.contains('.') && !domain.starts_with('.') && !domain.ends_with('.')
        })
}

/// The organization in the path and the caller's role there. Non-members get 404,
/// members below `min` get 403.
async fn org_access(
    state: &AppState,
    user: &SessionUser,
    raw_org_id: &str,
    min: Role,
) -> Result<(Organization, Role), ApiError> {
    let org_id = parse_org_id(raw_org_id)?;
    let membership = db::orgs::membership(&state.pool, &org_id, &user.user.id)
        .await?
        .ok_or_else(|| ApiError::not_found("Organization"))?;
    let org =
        db::orgs::find(&state.pool, &org_id).await?.ok_or_else(|| ApiError::not_found("Organization"))?;
    let role = parse_role(&membership.role);
    if role < min {
        return Err(ApiError::forbidden(format!("This action requires the {} role", min.as_str())));
    }
    Ok((org, role))
}

/// Whether `actor` (holding `actor_role`) may change or remove `target` (holding
/// `target_role`). The owner is out of reach (that is a transfer); admins are out of
/// reach of other admins, only the owner manages them.
fn check_may_manage(actor: &str, actor_role: Role, target: &str, target_role: Role) -> Result<(), ApiError> {
    if target_role == Role::Owner {
        return Err(ApiError::forbidden("The owner's membership changes only through an ownership transfer"));
    }
    if target_role == Role::Admin && target != actor && actor_role != Role::Owner {
        return Err(ApiError::forbidden("Only the owner can change or remove another admin"));
    }
    Ok(())
}

fn stale() -> ApiError {
    ApiError::new(ErrorCode::Conflict, "The membership changed meanwhile; reload and retry")
}

fn page_params(req: &HttpRequest, id_prefix: &str) -> Result<(i64, Option<After>), ApiError> {
    let q: PageQuery = query(req)?;
    pagination::parse(q.limit.as_deref(), q.cursor.as_deref(), DEFAULT_PAGE, id_prefix)
}

fn data_page<T: Serialize>(items: Vec<T>, cursor: Option<Cursor>) -> HttpResponse {
    HttpResponse::Ok().json(json!({ "data": items, "cursor": cursor }))
}

// ---------------------------------------------------------------------------
// Organizations
// ---------------------------------------------------------------------------

/// Lists the organizations the signed-in user belongs to, oldest first, with the
/// user's role in each.
#[utoipa::path(get, path = "/api/orgs", tag = "orgs", security(("session" = [])),
    responses((status = 200, description = "`{ data: OrgSummary[] }`", body = Data<Vec<OrgSummary>>), (status = 401)))]
#[get("/orgs")]
pub async fn list_orgs(state: web::Data<AppState>, user: SessionUser) -> Result<HttpResponse, ApiError> {
    let orgs = db::orgs::orgs_for_user(&state.pool, &user.user.id).await?;
    let data: Vec<OrgSummary> = orgs
        .into_iter()
        .map(|(org, role)| OrgSummary {
            id: ids::prefixed(ids::ORG, &org.id),
            name: org.name,
            plan: org.plan,
            role,
            created_at: time::iso(org.created_at),
        })
        .collect();
    Ok(HttpResponse::Ok().json(json!({ "data": data })))
}

/// Creates an organization on the configured default plan with the caller as
/// owner. The session stays on its current organization (switch with
/// `POST /api/auth/switch-org`).
#[utoipa::path(post, path = "/api/orgs", tag = "orgs", security(("session" = [])), request_body = CreateOrgBody,
    responses((status = 201, description = "`{ data: OrgView }`", body = Data<OrgView>), (status = 400), (status = 401)))]
#[post("/orgs")]
pub async fn create_org(
    state: web::Data<AppState>,
    user: SessionUser,
    body: Body<CreateOrgBody>,
) -> Result<HttpResponse, ApiError> {
    let name = validate::trimmed_name(&body?.value.name, 1, MAX_ORG_NAME)
        .ok_or_else(|| ApiError::invalid_field(&["name"], "must be 1 to 100 characters"))?;
    let org = db::orgs::new_org(ids::new_id(), name, state.config.default_plan.as_str(), time::now_ms());
    db::orgs::create_org(&state.pool, &org, &user.user.id).await?;
    Ok(HttpResponse::Created().json(json!({ "data": org_view(&org, Role::Owner, 1) })))
}

/// The current organization's plan, its limits and what is counted against them.
#[utoipa::path(get, path = "/api/orgs/me/usage", tag = "orgs", security(("session" = [])),
    responses((status = 200, description = "`{ data: UsageView }`", body = Data<UsageView>), (status = 401), (status = 403)))]
#[get("/orgs/me/usage")]
pub async fn get_usage(state: web::Data<AppState>, auth: SessionAuth) -> Result<HttpResponse, ApiError> {
    auth.require(Role::Viewer)?;
    let plan = auth.plan();
    let counts = db::orgs::usage_counts(&state.pool, &auth.org.id).await?;
    let usage = Usage {
        api_keys: counts.api_keys,
        members: counts.members,
        budgets: counts.budgets,
        // Webhook endpoints: counted once their table exists.
        webhook_endpoints: 0,
        governed_requests: auth.org.governed_requests,
    };
    let view = UsageView {
        plan: plan.as_str().to_owned(),
        limits: plan.limits(),
        usage,
        period_start: time::iso(auth.org.usage_period_start),
    };
    Ok(HttpResponse::Ok().json(json!({ "data": view })))
}

/// One organization the caller belongs to (member role or above).
#[utoipa::path(get, path = "/api/orgs/{id}", tag = "orgs", security(("session" = [])),
    params(("id" = String, Path, description = "svc_org_…")),
    responses((status = 200, description = "`{ data: OrgView }`", body = Data<OrgView>), (status = 400), (status = 401), (status = 403), (status = 404)))]
#[get("/orgs/{id}")]
pub async fn get_org(
    state: web::Data<AppState>,
    user: SessionUser,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let (org, role) = org_access(&state, &user, &path, Role::Member).await?;
    let count = db::orgs::member_count(&state.pool, &org.id).await?;
    Ok(HttpResponse::Ok().json(json!({ "data": org_view(&org, role, count) })))
}

/// Renames an organization or sets its upgrade URLs, `unpricedModels` or
/// `unpricedTools` (admin). URL changes are audited as `org_upgrade_url.updated` and
/// `customer_upgrade_url.updated`, the settings as `org_unpriced_models.updated` and
/// `org_unpriced_tools.updated`.
#[utoipa::path(patch, path = "/api/orgs/{id}", tag = "orgs", security(("session" = [])), request_body = UpdateOrgBody,
    params(("id" = String, Path, description = "svc_org_…")),
    responses((status = 200, description = "`{ data: OrgView }`", body = Data<OrgView>), (status = 400), (status = 401), (status = 403), (status = 404)))]
#[patch("/orgs/{id}")]
pub async fn update_org(
    state: web::Data<AppState>,
    user: SessionUser,
    path: web::Path<String>,
    body: Body<UpdateOrgBody>,
) -> Result<HttpResponse, ApiError> {
    let (org, role) = org_access(&state, &user, &path, Role::Admin).await?;
    let body = body?.value;
    let mut issues = Issues::new();
    if body.name.is_none()
        && body.upgrade_url.is_none()
        && body.customer_upgrade_url.is_none()
        && body.unpriced_models.is_none()
        && body.unpriced_tools.is_none()
    {
        issues.push(
            &[],
            "provide at least one of name, upgradeUrl, customerUpgradeUrl, unpricedModels, unpricedTools",
        );
    }
    let unpriced_tools = body.unpriced_tools.as_deref().and_then(|raw| {
        let value =
            [db::orgs::UNPRICED_TOOLS_ALLOW, db::orgs::UNPRICED_TOOLS_BLOCK].into_iter().find(|v| *v == raw);
        issues.check(value.is_some(), &["unpricedTools"], "must be allow or block");
        value
    });
    let unpriced_models = body.unpriced_models.as_deref().and_then(|raw| {
        let policy = UnpricedPolicy::parse(raw);
        issues.check(policy.is_some(), &["unpricedModels"], "must be estimate or block");
        policy
    });
    let name = body.name.as_deref().and_then(|raw| {
        let name = validate::trimmed_name(raw, 1, MAX_ORG_NAME);
        issues.check(name.is_some(), &["name"], "must be 1 to 100 characters");
        name
    });
    let changes = OrgChanges {
        name,
        upgrade_url: body.upgrade_url.map(|v| check_url(&v, "upgradeUrl", &mut issues)),
        customer_upgrade_url: body
            .customer_upgrade_url
            .map(|v| check_url(&v, "customerUpgradeUrl", &mut issues)),
        unpriced_models: unpriced_models.map(UnpricedPolicy::as_str),
        unpriced_tools,
    };
    issues.finish()?;
    let updated = db::orgs::update_org(&state.pool, &org.id, &user.user.id, &changes, time::now_ms())
        .await?
        .ok_or_else(|| ApiError::not_found("Organization"))?;
    if unpriced_models.is_some() || unpriced_tools.is_some() {
        state.model_prices.invalidate(&org.id);
    }
    let count = db::orgs::member_count(&state.pool, &org.id).await?;
    Ok(HttpResponse::Ok().json(json!({ "data": org_view(&updated, role, count) })))
}

/// Deletes an organization (owner): its memberships and invitations go, sessions
/// pointing at it are detached, its API keys are revoked. The audit log keeps the
/// `org.deleted` row.
#[utoipa::path(delete, path = "/api/orgs/{id}", tag = "orgs", security(("session" = [])),
    params(("id" = String, Path, description = "svc_org_…")),
    responses((status = 200, description = "`{ data: { id, deleted: true } }`", body = Data<DeletedOrg>), (status = 400), (status = 401), (status = 403), (status = 404)))]
#[delete("/orgs/{id}")]
pub async fn delete_org(
    state: web::Data<AppState>,
    user: SessionUser,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let (org, _) = org_access(&state, &user, &path, Role::Owner).await?;
    db::orgs::delete_org(&state.pool, &org.id, &user.user.id, time::now_ms()).await?;
    // The revoked keys may sit in the proxy's positive cache; a revocation must
    // take effect at once, and organization deletes are rare enough to flush it all.
    // Here at once; on the other instances through the key change feed.
    db::keys::note_org_keys_changed(&state.pool, &org.id).await?;
    state.keys.invalidate_all();
    Ok(HttpResponse::Ok()
        .json(Data { data: DeletedOrg { id: ids::prefixed(ids::ORG, &org.id), deleted: true } }))
}

// ---------------------------------------------------------------------------
// Members
// ---------------------------------------------------------------------------

/// Lists an organization's members, newest first (member role or above).
#[utoipa::path(get, path = "/api/orgs/{id}/members", tag = "orgs", security(("session" = [])),
    params(("id" = String, Path, description = "svc_org_…"), PageQuery),
    responses((status = 200, description = "`{ data: MemberView[], cursor }`", body = Page<MemberView>), (status = 400), (status = 401), (status = 403), (status = 404)))]
#[get("/orgs/{id}/members")]
pub async fn list_members(
    state: web::Data<AppState>,
    user: SessionUser,
    path: web::Path<String>,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    let (org, _) = org_access(&state, &user, &path, Role::Member).await?;
    let (limit, after) = page_params(&req, ids::USER)?;
    // The table holds the canonical bare UUID.
    let after = match after {
        Some(a) => Some(After { id: parse_user_id(&a.id, &["cursor", "id"])?, created_at: a.created_at }),
        None => None,
    };
    let rows = db::orgs::list_members(&state.pool, &org.id, limit, after.as_ref()).await?;
    let (rows, cursor) = pagination::page(rows, limit, ids::USER, |m| (m.joined_at, m.user_id.clone()));
    Ok(data_page(rows.iter().map(MemberView::from).collect(), cursor))
}

/// Changes a member's role (admin). Nobody gains or loses the owner role here, and
/// only the owner changes another admin. Audited as `member.role_changed`.
#[utoipa::path(patch, path = "/api/orgs/{id}/members/{userId}", tag = "orgs", security(("session" = [])), request_body = UpdateMemberBody,
    params(("id" = String, Path, description = "svc_org_…"), ("userId" = String, Path, description = "svc_usr_…")),
    responses((status = 200, description = "`{ data: MemberView }`", body = Data<MemberView>), (status = 400), (status = 401), (status = 403), (status = 404), (status = 409)))]
#[patch("/orgs/{id}/members/{userId}")]
pub async fn update_member(
    state: web::Data<AppState>,
    user: SessionUser,
    path: web::Path<(String, String)>,
    body: Body<UpdateMemberBody>,
) -> Result<HttpResponse, ApiError> {
    let (raw_org, raw_user) = path.into_inner();
    let (org, role) = org_access(&state, &user, &raw_org, Role::Admin).await?;
    let target_id = parse_user_id(&raw_user, &["userId"])?;
    let new_role = assignable_role(&body?.value.role).map_err(|m| ApiError::invalid_field(&["role"], m))?;
    let target = db::orgs::find_member(&state.pool, &org.id, &target_id)
        .await?
        .ok_or_else(|| ApiError::not_found("Member"))?;
    let current = parse_role(&target.role);
    check_may_manage(&user.user.id, role, &target_id, current)?;
    if current == new_role {
        return Ok(HttpResponse::Ok().json(json!({ "data": MemberView::from(&target) })));
    }
    let changed = db::orgs::set_member_role(
        &state.pool,
        &org.id,
        &user.user.id,
        &target_id,
        current,
        new_role,
        time::now_ms(),
    )
    .await?;
    if !changed {
        return Err(stale());
    }
    let updated = Member { role: new_role.as_str().to_owned(), ..target };
    Ok(HttpResponse::Ok().json(json!({ "data": MemberView::from(&updated) })))
}

/// Removes a member (admin). The owner cannot be removed, and only the owner
/// removes another admin. The user's sessions stop pointing at the organization.
/// Audited as `member.removed`.
#[utoipa::path(delete, path = "/api/orgs/{id}/members/{userId}", tag = "orgs", security(("session" = [])),
    params(("id" = String, Path, description = "svc_org_…"), ("userId" = String, Path, description = "svc_usr_…")),
    responses((status = 200, description = "`{ data: { userId, removed: true } }`", body = Data<RemovedMember>), (status = 400), (status = 401), (status = 403), (status = 404), (status = 409)))]
#[delete("/orgs/{id}/members/{userId}")]
pub async fn remove_member(
    state: web::Data<AppState>,
    user: SessionUser,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, ApiError> {
    let (raw_org, raw_user) = path.into_inner();
    let (org, role) = org_access(&state, &user, &raw_org, Role::Admin).await?;
    let target_id = parse_user_id(&raw_user, &["userId"])?;
    let target = db::orgs::find_member(&state.pool, &org.id, &target_id)
        .await?
        .ok_or_else(|| ApiError::not_found("Member"))?;
    let current = parse_role(&target.role);
    check_may_manage(&user.user.id, role, &target_id, current)?;
    let removed = db::orgs::remove_member(
        &state.pool,
        &org.id,
        &user.user.id,
        &target_id,
        current,
        Departure::Removed,
        time::now_ms(),
    )
    .await?;
    if !removed {
        return Err(stale());
    }
    // The departed member's keys were revoked with the membership.
    // Here at once; on the other instances through the key change feed.
    db::keys::note_org_keys_changed(&state.pool, &org.id).await?;
    state.keys.invalidate_all();
    Ok(HttpResponse::Ok()
        .json(Data { data: RemovedMember { user_id: ids::prefixed(ids::USER, &target_id), removed: true } }))
}

/// Leaves an organization. The spec gives leave a minimum role of `member`; viewers
/// may leave too, because refusing someone the way out of an organization protects
/// nothing. The owner must transfer ownership first (409 `conflict`). Audited as
/// `member.left`.
#[utoipa::path(post, path = "/api/orgs/{id}/leave", tag = "orgs", security(("session" = [])),
    params(("id" = String, Path, description = "svc_org_…")),
    responses((status = 200, description = "`{ data: { orgId, left: true } }`", body = Data<LeftOrg>), (status = 400), (status = 401), (status = 404), (status = 409)))]
#[post("/orgs/{id}/leave")]
pub async fn leave_org(
    state: web::Data<AppState>,
    user: SessionUser,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let (org, role) = org_access(&state, &user, &path, Role::Viewer).await?;
    if role == Role::Owner {
        return Err(ApiError::new(
            ErrorCode::Conflict,
            "The owner cannot leave; transfer ownership first (POST /api/orgs/{id}/transfer)",
        ));
    }
    let left = db::orgs::remove_member(
        &state.pool,
        &org.id,
        &user.user.id,
        &user.user.id,
        role,
        Departure::Left,
        time::now_ms(),
    )
    .await?;
    if !left {
        return Err(stale());
    }
    // Here at once; on the other instances through the key change feed.
    db::keys::note_org_keys_changed(&state.pool, &org.id).await?;
    state.keys.invalidate_all();
    Ok(HttpResponse::Ok()
        .json(Data { data: LeftOrg { org_id: ids::prefixed(ids::ORG, &org.id), left: true } }))
}

/// Hands ownership to another member (owner): the target becomes owner and the
/// caller becomes admin, in one transaction. Audited as `org.ownership_transferred`.
#[utoipa::path(post, path = "/api/orgs/{id}/transfer", tag = "orgs", security(("session" = [])), request_body = TransferBody,
    params(("id" = String, Path, description = "svc_org_…")),
    responses((status = 200, description = "`{ data: OwnershipTransfer }`", body = Data<OwnershipTransfer>), (status = 400), (status = 401), (status = 403), (status = 404)))]
#[post("/orgs/{id}/transfer")]
pub async fn transfer_ownership(
    state: web::Data<AppState>,
    user: SessionUser,
    path: web::Path<String>,
    body: Body<TransferBody>,
) -> Result<HttpResponse, ApiError> {
    let (org, _) = org_access(&state, &user, &path, Role::Owner).await?;
    let target_id = parse_user_id(&body?.value.user_id, &["userId"])?;
    if target_id == user.user.id {
        return Err(ApiError::invalid_field(&["userId"], "is already the owner"));
    }
    match db::orgs::transfer_ownership(&state.pool, &org.id, &user.user.id, &target_id, time::now_ms())
        .await?
    {
        TransferOutcome::Transferred => Ok(HttpResponse::Ok().json(json!({ "data": OwnershipTransfer {
            org_id: ids::prefixed(ids::ORG, &org.id),
            new_owner_user_id: ids::prefixed(ids::USER, &target_id),
            previous_owner_user_id: ids::prefixed(ids::USER, &user.user.id),
        }}))),
        TransferOutcome::NotOwner => Err(ApiError::forbidden("This action requires the owner role")),
        TransferOutcome::TargetNotMember => Err(ApiError::not_found("Member")),
    }
}

// ---------------------------------------------------------------------------
// Invitations
// ---------------------------------------------------------------------------

/// Lists an organization's pending invitations, newest first (admin).
#[utoipa::path(get, path = "/api/orgs/{id}/invitations", tag = "orgs", security(("session" = [])),
    params(("id" = String, Path, description = "svc_org_…"), PageQuery),
    responses((status = 200, description = "`{ data: InvitationView[], cursor }`", body = Page<InvitationView>), (status = 400), (status = 401), (status = 403), (status = 404)))]
#[get("/orgs/{id}/invitations")]
pub async fn list_invitations(
    state: web::Data<AppState>,
    user: SessionUser,
    path: web::Path<String>,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    let (org, _) = org_access(&state, &user, &path, Role::Admin).await?;
    let (limit, after) = page_params(&req, "")?;
    let now = time::now_ms();
    let rows = db::orgs::pending_invitations(&state.pool, &org.id, now, limit, after.as_ref()).await?;
    let (rows, cursor) = pagination::page(rows, limit, "", |i| (i.created_at, i.id.clone()));
    Ok(data_page(rows.iter().map(|i| invitation_view(i, now)).collect(), cursor))
}

/// Invites an email address (admin). Answers 201 with a one-time `token` valid for
/// seven days; only its SHA-256 is stored. Members and already-invited addresses
/// get 409 `conflict`. Audited as `invitation.created`.
#[utoipa::path(post, path = "/api/orgs/{id}/invitations", tag = "orgs", security(("session" = [])), request_body = CreateInvitationBody,
    params(("id" = String, Path, description = "svc_org_…")),
    responses((status = 201, description = "`{ data: CreatedInvitation }`", body = Data<CreatedInvitation>), (status = 400), (status = 401), (status = 403), (status = 404), (status = 409)))]
#[post("/orgs/{id}/invitations")]
pub async fn create_invitation(
    state: web::Data<AppState>,
    user: SessionUser,
    path: web::Path<String>,
    body: Body<CreateInvitationBody>,
) -> Result<HttpResponse, ApiError> {
    let (org, _) = org_access(&state, &user, &path, Role::Admin).await?;
    let body = body?.value;
    let email = spendgate_engine::auth::users::normalize_email(&body.email);
    let mut issues = Issues::new();
    issues.check(is_email(&email), &["email"], "must be a valid email address");
    let role = body.role.as_deref().map_or(Ok(Role::Member), assignable_role);
    if let Err(message) = role {
        issues.push(&["role"], message);
    }
    issues.finish()?;
    let role = role.unwrap_or(Role::Member);
    let token = random_hex(32);
    let now = time::now_ms();
    let invitation = Invitation {
        id: ids::new_id(),
        org_id: org.id.clone(),
        email,
        role: role.as_str().to_owned(),
        token_hash: sha256_hex(&token),
        invited_by: user.user.id.clone(),
        created_at: now,
        expires_at: now.saturating_add(INVITATION_TTL_MS),
        accepted_at: None,
        revoked_at: None,
    };
    match db::orgs::create_invitation(&state.pool, &invitation).await? {
        InviteOutcome::Created => Ok(HttpResponse::Created().json(json!({ "data": CreatedInvitation {
            invitation: invitation_view(&invitation, now),
            token,
        }}))),
        InviteOutcome::AlreadyMember => {
            Err(ApiError::new(ErrorCode::Conflict, "A user with this email is already a member"))
        }
        InviteOutcome::AlreadyInvited => {
            Err(ApiError::new(ErrorCode::Conflict, "This email already has a pending invitation"))
        }
    }
}

/// Revokes a pending invitation (admin). Audited as `invitation.revoked`.
#[utoipa::path(delete, path = "/api/orgs/{id}/invitations/{invitationId}", tag = "orgs", security(("session" = [])),
    params(("id" = String, Path, description = "svc_org_…"), ("invitationId" = String, Path, description = "UUID")),
    responses((status = 200, description = "`{ data: InvitationView }` with status `revoked`", body = Data<InvitationView>), (status = 400), (status = 401), (status = 403), (status = 404)))]
#[delete("/orgs/{id}/invitations/{invitationId}")]
pub async fn revoke_invitation(
    state: web::Data<AppState>,
    user: SessionUser,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, ApiError> {
    let (raw_org, raw_invitation) = path.into_inner();
    let (org, _) = org_access(&state, &user, &raw_org, Role::Admin).await?;
    let invitation_id = ids::parse_uuid(&raw_invitation)
        .ok_or_else(|| ApiError::invalid_field(&["invitationId"], "must be a UUID"))?;
    let now = time::now_ms();
    let revoked = db::orgs::revoke_invitation(&state.pool, &org.id, &invitation_id, &user.user.id, now)
        .await?
        .ok_or_else(|| ApiError::not_found("Invitation"))?;
    Ok(HttpResponse::Ok().json(json!({ "data": invitation_view(&revoked, now) })))
}

/// Accepts an invitation with its token. The invitation must be pending and
/// unexpired and addressed to the signed-in user's email (403 `forbidden`
/// otherwise); unknown, used and revoked tokens are 404. The user joins with the
/// invited role and the session switches to the organization. Audited as
/// `invitation.accepted`.
#[utoipa::path(post, path = "/api/invite/accept", tag = "orgs", security(("session" = [])), request_body = AcceptInvitationBody,
    responses((status = 200, description = "`{ data: AcceptedInvitation }`", body = Data<AcceptedInvitation>), (status = 400), (status = 401), (status = 403), (status = 404), (status = 409)))]
#[post("/invite/accept")]
pub async fn accept_invitation(
    state: web::Data<AppState>,
    user: SessionUser,
    body: Body<AcceptInvitationBody>,
) -> Result<HttpResponse, ApiError> {
    let token = body?.value.token.trim().to_owned();
    if token.is_empty() {
        return Err(ApiError::invalid_field(&["token"], "must not be empty"));
    }
    let not_found = || ApiError::not_found("Invitation");
    let invitation = db::orgs::find_invitation_by_token_hash(&state.pool, &sha256_hex(&token))
        .await?
        .ok_or_else(not_found)?;
    if invitation.accepted_at.is_some() || invitation.revoked_at.is_some() {
        return Err(not_found());
    }
    let now = time::now_ms();
    if invitation.expires_at <= now {
        return Err(ApiError::forbidden("This invitation has expired; ask for a new one"));
    }
    if !invitation.email.eq_ignore_ascii_case(user.user.email.trim()) {
        return Err(ApiError::forbidden("This invitation was sent to a different email address"));
    }
    match db::orgs::accept_invitation(&state.pool, &invitation, &user.user.id, &user.session_id, now).await? {
        AcceptOutcome::Accepted(org) => Ok(HttpResponse::Ok().json(json!({ "data": AcceptedInvitation {
            org_id: ids::prefixed(ids::ORG, &org.id),
            org_name: org.name,
            plan: org.plan,
            role: invitation.role,
        }}))),
        AcceptOutcome::Gone => Err(not_found()),
        AcceptOutcome::AlreadyMember => {
            Err(ApiError::new(ErrorCode::Conflict, "You are already a member of this organization"))
        }
    }
}

pub fn configure(cfg: &mut web::ServiceConfig) {
    // `/orgs/me/usage` goes before the `/orgs/{id}` family so "me" is never read as
    // an organization id.
    cfg.service(get_usage)
        .service(list_orgs)
        .service(create_org)
        .service(get_org)
        .service(update_org)
        .service(delete_org)
        .service(list_members)
        .service(update_member)
        .service(remove_member)
        .service(leave_org)
        .service(transfer_ownership)
        .service(list_invitations)
        .service(create_invitation)
        .service(revoke_invitation)
        .service(accept_invitation);
}

#[derive(utoipa::OpenApi)]
#[openapi(paths(
    list_orgs,
    create_org,
    get_usage,
    get_org,
    update_org,
    delete_org,
    list_members,
    update_member,
    remove_member,
    leave_org,
    transfer_ownership,
    list_invitations,
    create_invitation,
    revoke_invitation,
    accept_invitation
))]
pub struct ApiDoc;
