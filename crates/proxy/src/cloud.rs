//! What a cloud route (`/azure/...`, `/bedrock/...`) needs beyond the pipeline every
//! route shares: the stored cloud credential's endpoint and authentication headers
//! (a Bedrock request signed with SigV4, by the `aws-sigv4` crate), the model a
//! deployment stands for, and the price of the model the answer names.

use actix_web::http::header::{HeaderName, HeaderValue};

use super::admitted::Admitted;
use super::credential::{self, Credential};
use super::meter::Seen;
use super::upstream::Route;
use spendgate_engine::auth::identity::KeyIdentity;
use spendgate_engine::cloud_credentials::{Bedrock, BedrockAuth, CloudCredential};
use spendgate_engine::error::ApiError;
use spendgate_engine::state::AppState;
use spendgate_llm::pricing::{ModelPrice, Provider};

/// The headers that authenticate a call with the stored cloud credential.
pub fn headers(cloud: &CloudCredential) -> Vec<(HeaderName, HeaderValue)> {
    match cloud {
        CloudCredential::Azure(a) => sensitive("api-key", &a.api_key).into_iter().collect(),
        CloudCredential::Bedrock(Bedrock { auth: BedrockAuth::ApiKey(key), .. }) => {
            sensitive("authorization", &format!("Bearer {key}")).into_iter().collect()
        }
        // Signed per request: `signed`.
        CloudCredential::Bedrock(_) | CloudCredential::Vertex(_) => Vec::new(),
    }
}

/// The SigV4 headers of a Bedrock request sent with an access key pair (`Authorization`,
/// `X-Amz-Date`, `X-Amz-Security-Token`), over the method, URL, `content-type` and
/// body exactly as sent; none for every other credential.
pub fn signed(
    credential: &Credential,
    url: &str,
    body: &[u8],
) -> Result<Vec<(HeaderName, HeaderValue)>, ApiError> {
    use aws_sigv4::http_request::{sign, SignableBody, SignableRequest, SigningSettings};
    let Credential::Cloud(cloud) = credential else { return Ok(Vec::new()) };
    let CloudCredential::Bedrock(Bedrock {
        auth: BedrockAuth::Keys { access_key_id, secret_access_key, session_token },
        region,
        ..
    }) = &**cloud
    else {
        return Ok(Vec::new());
    };
    let identity = aws_credential_types::Credentials::new(
        access_key_id,
        secret_access_key,
        session_token.clone(),
        None,
        "spendgate",
    )
    .into();
    let params = aws_sigv4::sign::v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name("bedrock")
        .time(now())
        .settings(SigningSettings::default())
        .build()
        .map_err(ApiError::internal)?
        .into();
    let headers = [("content-type", "application/json")];
    let request = SignableRequest::new("POST", url, headers.into_iter(), SignableBody::Bytes(body))
        .map_err(ApiError::internal)?;
    let (instructions, _) = sign(request, &params).map_err(ApiError::internal)?.into_parts();
    let mut out = Vec::new();
    for (name, value) in instructions.headers() {
        let name = HeaderName::from_bytes(name.as_bytes()).map_err(ApiError::internal)?;
        let mut value = HeaderValue::from_str(value).map_err(ApiError::internal)?;
        value.set_sensitive(true);
        out.push((name, value));
    }
    Ok(out)
}

fn sensitive(name: &'static str, value: &str) -> Option<(HeaderName, HeaderValue)> {
    let mut value = HeaderValue::from_str(value).ok()?;
    value.set_sensitive(true);
    Some((HeaderName::from_static(name), value))
}

/// Now, on the clock accounting shares.
fn now() -> std::time::SystemTime {
    let ms = u64::try_from(spendgate_engine::util::time::now_ms()).unwrap_or(0);
    std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms)
}

/// The base URL a cloud call goes to: the credential's endpoint.
pub fn base(credential: &Credential) -> Option<String> {
    match credential {
        Credential::Cloud(cloud) => match &**cloud {
            CloudCredential::Azure(a) => Some(a.endpoint.clone()),
            CloudCredential::Bedrock(b) => Some(
                b.endpoint
                    .clone()
                    .unwrap_or_else(|| format!("https://bedrock-runtime.{}.amazonaws.com", b.region)),
            ),
            CloudCredential::Vertex(v) => v.endpoint.clone(),
        },
        _ => None,
    }
}

/// The model a call asks for: on Azure, the model the stored credential's
/// `deployments` names for the deployment, else the deployment's name.
pub async fn model_for(
    state: &AppState,
    key: &KeyIdentity,
    route: Route,
    model: String,
) -> Result<String, ApiError> {
    if route.provider() != Provider::Azure {
        return Ok(model);
    }
    let mapped = match credential::stored_cloud(state, key, "azure").await? {
        Some(CloudCredential::Azure(a)) => a.deployments.get(&model).cloned(),
        _ => None,
    };
    Ok(mapped.unwrap_or(model))
}

/// The model the answer names, with its price, when that prices the call: on Azure,
/// whose answers name the model behind the deployment.
pub fn answer_price(state: &AppState, a: &Admitted, seen: &Seen) -> Option<(String, ModelPrice)> {
    if a.provider != Provider::Azure {
        return None;
    }
    let model = seen.model.as_deref().filter(|m| !m.is_empty() && m.len() <= 200)?;
    let (_, price) = state.pricing.lookup(a.event_provider(), model)?;
    Some((model.to_owned(), *price))
}
