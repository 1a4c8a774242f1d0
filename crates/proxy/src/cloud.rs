//! What a cloud route (`/azure/...`) needs beyond the pipeline every route shares:
//! the stored cloud credential's endpoint and authentication headers, the model a
//! deployment stands for, and the price of the model the answer names.

use actix_web::http::header::{HeaderName, HeaderValue};

use super::admitted::Admitted;
use super::credential::{self, Credential};
use super::meter::Seen;
use super::upstream::Route;
use spendgate_engine::auth::identity::KeyIdentity;
use spendgate_engine::cloud_credentials::CloudCredential;
use spendgate_engine::error::ApiError;
use spendgate_engine::state::AppState;
use spendgate_llm::pricing::{ModelPrice, Provider};

/// The headers that authenticate a call with the stored cloud credential.
pub fn headers(cloud: &CloudCredential) -> Vec<(HeaderName, HeaderValue)> {
    match cloud {
        CloudCredential::Azure(a) => sensitive("api-key", &a.api_key).into_iter().collect(),
        // Signed per request once their routes exist.
        CloudCredential::Bedrock(_) | CloudCredential::Vertex(_) => Vec::new(),
    }
}

fn sensitive(name: &'static str, value: &str) -> Option<(HeaderName, HeaderValue)> {
    let mut value = HeaderValue::from_str(value).ok()?;
    value.set_sensitive(true);
    Some((HeaderName::from_static(name), value))
}

/// The base URL a cloud call goes to: the credential's endpoint.
pub fn base(credential: &Credential) -> Option<String> {
    match credential {
        Credential::Cloud(cloud) => match &**cloud {
            CloudCredential::Azure(a) => Some(a.endpoint.clone()),
            CloudCredential::Bedrock(b) => b.endpoint.clone(),
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
