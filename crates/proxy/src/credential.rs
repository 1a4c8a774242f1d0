//! Whose provider credential a proxied call goes out with: the client's own, or the
//! organization's stored one (so an agent never holds a provider key), and where the
//! spendgate key may sit on a provider route.
//!
//! Decided per provider wire format, not per path, so every route of a format shares
//! the rules. A spendgate key (`svc_live_sk_…`) is never forwarded: when
//! `X-Service-Key` is absent it is read from where the format's clients put their
//! provider key (`Authorization: Bearer`, and `x-api-key` for Anthropic,
//! `x-goog-api-key` for Gemini), and found there beside `X-Service-Key` it is ignored.

use std::sync::Arc;

use actix_web::http::header::{HeaderMap, HeaderName, HeaderValue};
use actix_web::HttpRequest;

use super::upstream::{self, Route};
use spendgate_engine::auth::identity::{KeyIdentity, KEY_HEADER, RAW_KEY_PREFIX};
use spendgate_engine::cloud_credentials::CloudCredential;
use spendgate_engine::credentials::CredentialError;
use spendgate_engine::error::{ApiError, ErrorCode};
use spendgate_engine::state::AppState;
use spendgate_llm::pricing::Provider;

/// Where the call's spendgate key was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeySource {
    /// `X-Service-Key`.
    ServiceHeader,
    /// The provider's own API key header: the call must use a stored credential.
    ProviderSlot,
}

/// The provider credential the call is forwarded with.
#[derive(Debug, Clone)]
pub enum Credential {
    /// The client's own provider key headers, passed through.
    Client,
    /// The organization's stored secret, as the header the provider reads.
    Stored(HeaderName, HeaderValue),
    /// None at all; the provider answers as it does to a call without a key.
    Absent,
    /// The organization's stored cloud credential (`bedrock`, `vertex`, `azure`): its
    /// endpoint and how calls to it are authenticated.
    Cloud(Arc<CloudCredential>),
}

/// The headers that may carry the provider key in `provider`'s format.
const fn key_headers(provider: Provider) -> &'static [&'static str] {
    match provider {
        Provider::OpenAi => &["authorization"],
        Provider::Anthropic => &["x-api-key", "authorization"],
        Provider::Google => &["x-goog-api-key", "authorization"],
        // `AzureOpenAI` sends its key as `api-key`.
        Provider::Azure => &["api-key", "authorization"],
        Provider::Bedrock | Provider::Vertex => &["authorization"],
    }
}

/// The key a provider key header carries (`Bearer ` stripped from `Authorization`).
fn key_in<'a>(name: &str, value: &'a HeaderValue) -> Option<&'a str> {
    let value = value.to_str().ok()?.trim();
    let key = if name == "authorization" {
        let (scheme, rest) = value.split_once(' ')?;
        scheme.eq_ignore_ascii_case("bearer").then_some(rest.trim())?
    } else {
        value
    };
    (!key.is_empty()).then_some(key)
}

/// Whether a header value is a spendgate key (never forwarded).
pub fn is_spendgate_key(name: &str, value: &HeaderValue) -> bool {
    key_in(name, value).is_some_and(|k| k.starts_with(RAW_KEY_PREFIX))
}

/// The spendgate key in the provider's key headers, if one is there.
fn spendgate_key_in_slot(provider: Provider, headers: &HeaderMap) -> Option<&str> {
    key_headers(provider)
        .iter()
        .filter_map(|name| headers.get(*name).and_then(|v| key_in(name, v)))
        .find(|k| k.starts_with(RAW_KEY_PREFIX))
}

/// Whether the call brings a provider credential of its own: a provider key header
/// that is not a spendgate key, or Gemini's `key` query parameter.
pub fn brings_own(provider: Provider, headers: &HeaderMap, query: &str) -> bool {
    if is_cloud(provider) {
        // A cloud call always goes out with the stored credential: what the client
        // brings is never forwarded.
        return false;
    }
    let in_headers = key_headers(provider).iter().any(|name| {
        headers.get(*name).is_some_and(|v| !v.as_bytes().is_empty() && !is_spendgate_key(name, v))
    });
    let in_query = provider == Provider::Google && query.split('&').any(|p| p.starts_with("key="));
    in_headers || in_query
}

/// The call's key: `X-Service-Key` when present, else a spendgate key in the
/// provider's key headers. 401 `unauthorized` when neither is a valid key.
pub async fn key_of(
    req: &HttpRequest,
    state: &AppState,
    provider: Provider,
) -> Result<(Arc<KeyIdentity>, KeySource), ApiError> {
    if req.headers().contains_key(KEY_HEADER) {
        return Ok((super::key_of(req, state).await?, KeySource::ServiceHeader));
    }
    let Some(raw) = spendgate_key_in_slot(provider, req.headers()) else {
        return Ok((super::key_of(req, state).await?, KeySource::ServiceHeader));
    };
    match state.keys.validate(raw).await {
        Ok(Some(key)) => Ok((key, KeySource::ProviderSlot)),
        Ok(None) => Err(ApiError::new(ErrorCode::Unauthorized, "Missing or invalid spendgate API key")),
        Err(e) => Err(ApiError::unavailable(e)),
    }
}

/// The refusal of a call that brings its own provider credential under a key that
/// requires the stored ones.
pub fn own_credential_refused(provider: Provider) -> ApiError {
    ApiError::forbidden(format!(
        "This key requires the organization's stored provider credentials: send no {} API key \
         ({}); the gateway adds the stored one",
        provider.as_str(),
        key_headers(provider).join(", ")
    ))
}

/// The credential the call goes out with. The stored one of the target upstream is
/// used when the client brings none; a call whose spendgate key sits in the provider
/// key header must have one on a built-in provider (400 `invalid_upstream` naming the
/// upstream otherwise, nothing forwarded). An operator-defined upstream without a
/// stored credential (a local vLLM or Ollama server) gets the call without a key, and
/// an allow-listed third-party base never gets a stored key.
pub async fn resolve(
    state: &AppState,
    key: &KeyIdentity,
    source: KeySource,
    route: Route,
    target: &upstream::Target,
    brings_own: bool,
) -> Result<Credential, ApiError> {
    if is_cloud(route.provider()) {
        return cloud(state, key, target).await;
    }
    if brings_own && source == KeySource::ServiceHeader {
        return Ok(Credential::Client);
    }
    let stored = match target.name.as_deref() {
        Some(name) => stored_secret(state, key, name).await?,
        None => None,
    };
    match (stored, source) {
        (Some(secret), _) => stored_header(route.provider(), &secret),
        (None, KeySource::ServiceHeader) => Ok(Credential::Absent),
        (None, KeySource::ProviderSlot) if target.named => Ok(Credential::Absent),
        (None, KeySource::ProviderSlot) => {
            Err(no_stored_credential(target.name.as_deref().unwrap_or(&target.base)))
        }
    }
}

fn is_cloud(provider: Provider) -> bool {
    matches!(provider, Provider::Bedrock | Provider::Vertex | Provider::Azure)
}

/// The stored cloud credential a cloud call must go out with (400 `invalid_upstream`
/// when the organization stores none).
async fn cloud(
    state: &AppState,
    key: &KeyIdentity,
    target: &upstream::Target,
) -> Result<Credential, ApiError> {
    let name = target.name.as_deref().unwrap_or_default();
    let Some(secret) = stored_secret(state, key, name).await? else {
        return Err(no_stored_credential(name));
    };
    let parsed = CloudCredential::from_stored(name, &secret).ok_or_else(|| {
        tracing::error!(upstream = name, "stored cloud credential unreadable");
        ApiError::new(
            ErrorCode::ServiceUnavailable,
            format!("The stored {name} credential is unreadable; store it again"),
        )
    })?;
    Ok(Credential::Cloud(Arc::new(parsed)))
}

/// The organization's stored cloud credential for `upstream`, if it has one.
pub async fn stored_cloud(
    state: &AppState,
    key: &KeyIdentity,
    upstream: &str,
) -> Result<Option<CloudCredential>, ApiError> {
    Ok(stored_secret(state, key, upstream).await?.and_then(|s| CloudCredential::from_stored(upstream, &s)))
}

async fn stored_secret(
    state: &AppState,
    key: &KeyIdentity,
    upstream: &str,
) -> Result<Option<Arc<str>>, ApiError> {
    let found = state
        .credentials
        .secret(&state.pool, state.config.secret_key.as_deref(), &key.org_id, upstream)
        .await;
    match found {
        Ok(secret) => Ok(secret),
        Err(CredentialError::Db(e)) => Err(ApiError::unavailable(e)),
        Err(e) => {
            tracing::error!(error = %e, upstream, "stored provider credential unusable");
            Err(ApiError::new(ErrorCode::ServiceUnavailable, e.to_string()))
        }
    }
}

fn stored_header(provider: Provider, secret: &str) -> Result<Credential, ApiError> {
    let (name, text) = match provider {
        Provider::OpenAi => ("authorization", format!("Bearer {secret}")),
        Provider::Anthropic => ("x-api-key", secret.to_owned()),
        Provider::Google => ("x-goog-api-key", secret.to_owned()),
        cloud => return Err(ApiError::internal(format!("{} takes a cloud credential", cloud.as_str()))),
    };
    let mut value = HeaderValue::from_str(&text).map_err(ApiError::internal)?;
    value.set_sensitive(true);
    Ok(Credential::Stored(HeaderName::from_static(name), value))
}

fn no_stored_credential(upstream: &str) -> ApiError {
    ApiError::new(
        ErrorCode::InvalidUpstream,
        format!(
            "The organization stores no {upstream} credential, and this call brings none (the spendgate key \
             stands in the provider key header): an admin adds one with POST /api/provider-credentials \
             or on the dashboard's Provider keys page"
        ),
    )
    .with_details(serde_json::json!({ "upstream": upstream }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (n, v) in pairs {
            h.insert(HeaderName::from_static(n), HeaderValue::from_static(v));
        }
        h
    }

    const SVC: &str = "Bearer svc_live_sk_0123456789abcdef0123456789abcdef";

    #[test]
    fn spendgate_key_is_found_per_format_and_never_counts_as_own() {
        let h = headers(&[("authorization", SVC)]);
        assert!(spendgate_key_in_slot(Provider::OpenAi, &h).is_some());
        assert!(!brings_own(Provider::OpenAi, &h, ""));
        let h = headers(&[("x-api-key", "svc_live_sk_0123456789abcdef0123456789abcdef")]);
        assert!(spendgate_key_in_slot(Provider::Anthropic, &h).is_some());
        assert!(spendgate_key_in_slot(Provider::OpenAi, &h).is_none());
        let h = headers(&[("x-goog-api-key", "svc_live_sk_0123456789abcdef0123456789abcdef")]);
        assert!(spendgate_key_in_slot(Provider::Google, &h).is_some());
        assert!(!brings_own(Provider::Google, &h, ""));
        assert!(brings_own(Provider::Google, &HeaderMap::new(), "key=AIza"));
        let h = headers(&[("authorization", "Bearer sk-proj-1"), ("x-api-key", "sk-ant-1")]);
        assert!(brings_own(Provider::OpenAi, &h, ""));
        assert!(brings_own(Provider::Anthropic, &h, ""));
        assert!(!brings_own(Provider::OpenAi, &headers(&[("x-api-key", "sk-ant-1")]), ""));
    }
}
