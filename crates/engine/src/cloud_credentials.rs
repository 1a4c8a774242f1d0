//! The clouds' stored credentials (`bedrock`, `vertex`, `azure`): their JSON shapes,
//! checked when an admin stores one (every problem named by its field under
//! `secret`), the parts a list may show, and the typed form the proxy calls with.
//!
//! - `bedrock`: `{ accessKeyId, secretAccessKey, sessionToken?, region, endpoint? }`
//!   or `{ apiKey, region, endpoint? }`;
//! - `vertex`: `{ serviceAccount, endpoint? }`, `serviceAccount` the key file's JSON
//!   (an object, or the file's text);
//! - `azure`: `{ apiKey, endpoint, deployments? }`, `deployments` naming each
//!   deployment's model.
//!
//! An `endpoint` (and a service account's `token_uri`) follows the webhook targets'
//! address rules: https, no private or loopback address (`dev` allows both).

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use crate::error::Issues;
use crate::webhooks::target;

/// The upstream names whose credential is a JSON object.
pub const CLOUDS: [&str; 3] = ["bedrock", "vertex", "azure"];

/// Google's token endpoint, when a key file names none.
pub const GOOGLE_TOKEN_URI: &str = "https://oauth2.googleapis.com/token";

const MAX_FIELD_CHARS: usize = 4096;
const MAX_DEPLOYMENTS: usize = 200;

/// Whether `upstream`'s credential is one of the clouds' JSON shapes.
pub fn is_cloud(upstream: &str) -> bool {
    CLOUDS.contains(&upstream)
}

/// A stored cloud credential.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CloudCredential {
    Bedrock(Bedrock),
    Vertex(Vertex),
    Azure(Azure),
}

/// How spendgate signs its Bedrock calls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BedrockAuth {
    /// SigV4 with an access key pair (and a session token for temporary ones).
    Keys { access_key_id: String, secret_access_key: String, session_token: Option<String> },
    /// A Bedrock API key, sent as `Authorization: Bearer`.
    ApiKey(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bedrock {
    pub auth: BedrockAuth,
    pub region: String,
    pub endpoint: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceAccount {
    pub client_email: String,
    pub private_key: String,
    pub private_key_id: Option<String>,
    pub token_uri: String,
    pub project_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vertex {
    pub service_account: ServiceAccount,
    pub endpoint: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Azure {
    pub api_key: String,
    /// The resource's endpoint (`https://{resource}.openai.azure.com`), no trailing slash.
    pub endpoint: String,
    /// Deployment name to model.
    pub deployments: BTreeMap<String, String>,
}

impl CloudCredential {
    /// Checks `secret` as `upstream`'s shape; `None` with the problems in `issues`.
    pub fn parse(upstream: &str, secret: &Value, dev: bool, issues: &mut Issues) -> Option<Self> {
        let Some(obj) = secret.as_object() else {
            issues.push(&["secret"], format!("must be a JSON object for {upstream}"));
            return None;
        };
        let mut f = Fields { obj, issues, dev };
        let parsed = match upstream {
            "bedrock" => f.bedrock().map(CloudCredential::Bedrock),
            "vertex" => f.vertex().map(CloudCredential::Vertex),
            "azure" => f.azure().map(CloudCredential::Azure),
            _ => None,
        };
        parsed.filter(|_| issues.is_empty())
    }

    /// Reads a stored credential back (it was checked when stored).
    pub fn from_stored(upstream: &str, plain: &str) -> Option<Self> {
        let value: Value = serde_json::from_str(plain).ok()?;
        Self::parse(upstream, &value, true, &mut Issues::new())
    }

    /// The secret as it is stored: the normalized JSON.
    pub fn to_stored(&self) -> String {
        match self {
            CloudCredential::Bedrock(b) => {
                let mut v = match &b.auth {
                    BedrockAuth::Keys { access_key_id, secret_access_key, session_token } => json!({
                        "accessKeyId": access_key_id,
                        "secretAccessKey": secret_access_key,
                        "sessionToken": session_token,
                    }),
                    BedrockAuth::ApiKey(key) => json!({ "apiKey": key }),
                };
                v["region"] = json!(b.region);
                v["endpoint"] = json!(b.endpoint);
                strip_nulls(v).to_string()
            }
            CloudCredential::Vertex(v) => {
                let sa = &v.service_account;
                let account = json!({
                    "type": "service_account",
                    "client_email": sa.client_email,
                    "private_key": sa.private_key,
                    "private_key_id": sa.private_key_id,
                    "token_uri": sa.token_uri,
                    "project_id": sa.project_id,
                });
                strip_nulls(json!({ "serviceAccount": strip_nulls(account), "endpoint": v.endpoint }))
                    .to_string()
            }
            CloudCredential::Azure(a) => {
                json!({ "apiKey": a.api_key, "endpoint": a.endpoint, "deployments": a.deployments })
                    .to_string()
            }
        }
    }

    /// The secret part whose first characters a list shows.
    pub fn secret_part(&self) -> &str {
        match self {
            CloudCredential::Bedrock(Bedrock {
                auth: BedrockAuth::Keys { secret_access_key, .. }, ..
            }) => secret_access_key,
            CloudCredential::Bedrock(Bedrock { auth: BedrockAuth::ApiKey(key), .. }) => key,
            CloudCredential::Vertex(v) => v.service_account.private_key_id.as_deref().unwrap_or_default(),
            CloudCredential::Azure(a) => &a.api_key,
        }
    }

    /// The parts that are not secret, as a list shows them.
    pub fn details(&self) -> Value {
        let v = match self {
            CloudCredential::Bedrock(b) => {
                let (auth, key_id) = match &b.auth {
                    BedrockAuth::Keys { access_key_id, session_token, .. } => (
                        if session_token.is_some() { "sessionKeys" } else { "accessKeys" },
                        Some(access_key_id),
                    ),
                    BedrockAuth::ApiKey(_) => ("apiKey", None),
                };
                json!({ "auth": auth, "accessKeyId": key_id, "region": b.region, "endpoint": b.endpoint })
            }
            CloudCredential::Vertex(v) => json!({
                "serviceAccountEmail": v.service_account.client_email,
                "projectId": v.service_account.project_id,
                "endpoint": v.endpoint,
            }),
            CloudCredential::Azure(a) => json!({ "endpoint": a.endpoint, "deployments": a.deployments }),
        };
        strip_nulls(v)
    }
}

fn strip_nulls(mut v: Value) -> Value {
    if let Some(obj) = v.as_object_mut() {
        obj.retain(|_, x| !x.is_null());
    }
    v
}

/// One object's fields, read with their problems noted under `secret`.
struct Fields<'a> {
    obj: &'a Map<String, Value>,
    issues: &'a mut Issues,
    dev: bool,
}

impl Fields<'_> {
    fn text(&mut self, name: &str, required: bool) -> Option<String> {
        match self.obj.get(name) {
            None | Some(Value::Null) if !required => None,
            None | Some(Value::Null) => {
                self.issues.push(&["secret", name], "is required");
                None
            }
            Some(Value::String(s)) if !s.trim().is_empty() && s.chars().count() <= MAX_FIELD_CHARS => {
                Some(s.trim().to_owned())
            }
            Some(_) => {
                self.issues.push(&["secret", name], "must be a string of 1 to 4096 characters");
                None
            }
        }
    }

    /// A visible-ASCII token (key ids, keys, regions).
    fn token(&mut self, name: &str, required: bool) -> Option<String> {
        let value = self.text(name, required)?;
        if value.bytes().all(|b| b.is_ascii_graphic()) {
            Some(value)
        } else {
            self.issues.push(&["secret", name], "must be visible ASCII characters without spaces");
            None
        }
    }

    fn endpoint(&mut self, name: &str, required: bool) -> Option<String> {
        let value = self.text(name, required)?;
        match target::check_url(&value, self.dev) {
            Ok(_) => Some(value.trim_end_matches('/').to_owned()),
            Err(e) => {
                self.issues.push(&["secret", name], e.0);
                None
            }
        }
    }

    fn bedrock(&mut self) -> Option<Bedrock> {
        let region = self.token("region", true);
        if region.as_deref().is_some_and(|r| !is_region(r)) {
            self.issues.push(&["secret", "region"], "must be an AWS region such as us-east-1");
        }
        let endpoint = self.endpoint("endpoint", false);
        let auth = if self.obj.contains_key("apiKey") {
            if self.obj.contains_key("accessKeyId") || self.obj.contains_key("secretAccessKey") {
                self.issues
                    .push(&["secret", "apiKey"], "give either apiKey or accessKeyId and secretAccessKey");
            }
            BedrockAuth::ApiKey(self.token("apiKey", true)?)
        } else {
            let access_key_id = self.token("accessKeyId", true);
            let secret_access_key = self.token("secretAccessKey", true);
            let session_token = self.token("sessionToken", false);
            BedrockAuth::Keys {
                access_key_id: access_key_id?,
                secret_access_key: secret_access_key?,
                session_token,
            }
        };
        Some(Bedrock { auth, region: region?, endpoint })
    }

    fn vertex(&mut self) -> Option<Vertex> {
        let endpoint = self.endpoint("endpoint", false);
        let account = match self.obj.get("serviceAccount") {
            Some(Value::Object(o)) => Some(o.clone()),
            Some(Value::String(s)) => serde_json::from_str::<Map<String, Value>>(s).ok(),
            _ => None,
        };
        let Some(account) = account else {
            self.issues.push(&["secret", "serviceAccount"], "must be the service account's key file (JSON)");
            return None;
        };
        let mut inner = Fields { obj: &account, issues: &mut *self.issues, dev: self.dev };
        let sa = inner.service_account();
        Some(Vertex { service_account: sa?, endpoint })
    }

    fn service_account(&mut self) -> Option<ServiceAccount> {
        let mut bad = |field: &str, message: &str| {
            self.issues.push(&["secret", "serviceAccount", field], message);
        };
        let text = |name: &str| self.obj.get(name).and_then(Value::as_str).map(str::to_owned);
        let client_email = text("client_email").filter(|e| e.contains('@'));
        if client_email.is_none() {
            bad("client_email", "is required: the service account's email");
        }
        let private_key = text("private_key").filter(|k| k.contains("PRIVATE KEY-----"));
        if private_key.is_none() {
            bad("private_key", "is required: the PEM private key of the key file");
        }
        if text("type").is_some_and(|t| t != "service_account") {
            bad("type", "must be service_account");
        }
        let token_uri = text("token_uri").unwrap_or_else(|| GOOGLE_TOKEN_URI.to_owned());
        if let Err(e) = target::check_url(&token_uri, self.dev) {
            bad("token_uri", &e.0);
        }
        Some(ServiceAccount {
            client_email: client_email?,
            private_key: private_key?,
            private_key_id: text("private_key_id"),
            token_uri,
            project_id: text("project_id"),
        })
    }

    fn azure(&mut self) -> Option<Azure> {
        let api_key = self.token("apiKey", true);
        let endpoint = self.endpoint("endpoint", true);
        let mut deployments = BTreeMap::new();
        match self.obj.get("deployments") {
            None | Some(Value::Null) => {}
            Some(Value::Object(map)) if map.len() <= MAX_DEPLOYMENTS => {
                for (name, model) in map {
                    match model.as_str().filter(|m| is_name(m) && is_name(name)) {
                        Some(m) => {
                            deployments.insert(name.clone(), m.to_owned());
                        }
                        None => self.issues.push(
                            &["secret", "deployments", name],
                            "deployment and model names must be 1 to 200 of A-Z a-z 0-9 . _ - : @",
                        ),
                    }
                }
            }
            Some(_) => self.issues.push(
                &["secret", "deployments"],
                "must be an object of at most 200 deployment names to model names",
            ),
        }
        Some(Azure { api_key: api_key?, endpoint: endpoint?, deployments })
    }
}

/// `us-east-1`, `eu-central-2`, `us-gov-west-1`, `ap-southeast-4`.
fn is_region(r: &str) -> bool {
    let parts: Vec<&str> = r.split('-').collect();
    parts.len() >= 3
        && r.len() <= 32
        && parts.last().is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        && parts[..parts.len() - 1].iter().all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_lowercase()))
}

fn is_name(s: &str) -> bool {
    (1..=200).contains(&s.len())
        && s.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b':' | b'@'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(upstream: &str, v: Value) -> Result<CloudCredential, String> {
        let mut issues = Issues::new();
        CloudCredential::parse(upstream, &v, false, &mut issues).ok_or_else(|| format!("{issues:?}"))
    }

    #[test]
    fn bedrock_shapes() {
        let keys = parse(
            "bedrock",
            json!({ "accessKeyId": "AKIAEXAMPLE", "secretAccessKey": "wJalrXUtnFEMI/K7MDENG", "region": "us-east-1" }),
        )
        .unwrap();
        assert_eq!(keys.details()["accessKeyId"], "AKIAEXAMPLE");
        assert_eq!(keys.secret_part(), "wJalrXUtnFEMI/K7MDENG");
        assert_eq!(CloudCredential::from_stored("bedrock", &keys.to_stored()), Some(keys));
        let api = parse("bedrock", json!({ "apiKey": "ABSKabc", "region": "eu-west-3" })).unwrap();
        assert_eq!(api.details(), json!({ "auth": "apiKey", "region": "eu-west-3" }));
        let err = parse("bedrock", json!({ "accessKeyId": "A", "region": "mars" })).unwrap_err();
        assert!(err.contains("secretAccessKey") && err.contains("region"), "{err}");
        let err = parse(
            "bedrock",
            json!({ "apiKey": "k", "region": "us-east-1", "endpoint": "http://127.0.0.1:9" }),
        )
        .unwrap_err();
        assert!(err.contains("endpoint"), "{err}");
    }

    #[test]
    fn azure_and_vertex_shapes() {
        let a = parse(
            "azure",
            json!({ "apiKey": "abc123", "endpoint": "https://r.openai.azure.com/", "deployments": { "prod": "gpt-4o" } }),
        )
        .unwrap();
        assert_eq!(a.details()["endpoint"], "https://r.openai.azure.com");
        assert!(parse("azure", json!({ "apiKey": "abc" })).unwrap_err().contains("endpoint"));
        let sa = json!({ "type": "service_account", "client_email": "x@p.iam.gserviceaccount.com",
            "private_key": "-----BEGIN PRIVATE KEY-----\nMII\n-----END PRIVATE KEY-----\n", "project_id": "p" });
        let v = parse("vertex", json!({ "serviceAccount": sa.to_string() })).unwrap();
        assert_eq!(v.details()["serviceAccountEmail"], "x@p.iam.gserviceaccount.com");
        assert_eq!(CloudCredential::from_stored("vertex", &v.to_stored()), Some(v));
        let err = parse("vertex", json!({ "serviceAccount": { "client_email": "x" } })).unwrap_err();
        assert!(err.contains("private_key"), "{err}");
        assert!(is_region("us-gov-west-1") && !is_region("us-east") && !is_region("US-EAST-1"));
    }
}
