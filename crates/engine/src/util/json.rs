//! The JSON body extractor shared by every JSON endpoint: content type (415), size
//! (413, from `Content-Length` before reading and by bytes read after), syntax
//! (`invalid_json`) and shape (`validation_error` with the failing path).

use std::future::Future;
use std::pin::Pin;

use actix_web::dev::Payload;
use actix_web::http::header;
use actix_web::{FromRequest, HttpRequest};
use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;
use serde::de::DeserializeOwned;

use crate::error::{ApiError, ErrorCode, Issue};

/// 1 MiB, the spec's request body limit.
pub const MAX_BODY_BYTES: usize = 1_048_576;

/// A JSON body deserialized into `T`; `raw` keeps the exact bytes (idempotency
/// fingerprints hash them).
pub struct JsonBody<T> {
    pub value: T,
    pub raw: Bytes,
}

pub fn payload_too_large() -> ApiError {
    ApiError::new(ErrorCode::PayloadTooLarge, "Request body exceeds 1048576 bytes")
}

/// Checks the declared media type is JSON.
pub fn require_json_content_type(req: &HttpRequest) -> Result<(), ApiError> {
    let ok = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"));
    if ok {
        Ok(())
    } else {
        Err(ApiError::new(ErrorCode::UnsupportedMediaType, "Content-Type must be application/json"))
    }
}

/// Rejects a declared `Content-Length` over the limit before any byte is read.
pub fn check_content_length(req: &HttpRequest, limit: usize) -> Result<(), ApiError> {
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    match declared {
        Some(n) if n > limit as u64 => Err(payload_too_large()),
        _ => Ok(()),
    }
}

/// Reads the whole body, failing with 413 as soon as it passes `limit` bytes.
pub async fn read_body(mut payload: Payload, limit: usize) -> Result<Bytes, ApiError> {
    let mut buf = BytesMut::new();
    while let Some(chunk) = payload.next().await {
        let chunk = chunk.map_err(|e| {
            ApiError::new(ErrorCode::ValidationError, format!("Could not read request body: {e}"))
        })?;
        if buf.len() + chunk.len() > limit {
            return Err(payload_too_large());
        }
        buf.extend_from_slice(&chunk);
    }
    Ok(buf.freeze())
}

/// Deserializes `bytes`, telling malformed JSON apart from JSON of the wrong shape.
pub fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let result: Result<T, _> = serde_path_to_error::deserialize(&mut de);
    match result {
        Ok(v) => {
            de.end().map_err(|_| ApiError::new(ErrorCode::InvalidJson, "Request body is not valid JSON"))?;
            Ok(v)
        }
        Err(err) => {
            let mut path: Vec<String> = err
                .path()
                .iter()
                .filter_map(|seg| match seg {
                    serde_path_to_error::Segment::Map { key } => Some(key.clone()),
                    serde_path_to_error::Segment::Seq { index } => Some(index.to_string()),
                    serde_path_to_error::Segment::Enum { variant } => Some(variant.clone()),
                    serde_path_to_error::Segment::Unknown => None,
                })
                .collect();
            let inner = err.into_inner();
            // serde reports a missing or repeated field at the object that lacks it;
            // the caller needs the field itself.
            if let Some(field) = named_field(&inner) {
                path.push(field);
            }
            // A shape error may hide a later syntax error (`{} x`): only a body that
            // is valid JSON as a whole gets a validation error.
            let syntactically_valid = serde_json::from_slice::<serde::de::IgnoredAny>(bytes).is_ok();
            match inner.classify() {
                serde_json::error::Category::Data if syntactically_valid => {
                    Err(ApiError::validation(vec![Issue { path, message: clean_serde_message(&inner) }]))
                }
                _ => Err(ApiError::new(ErrorCode::InvalidJson, "Request body is not valid JSON")),
            }
        }
    }
}

/// The field a "missing field `x`" or "duplicate field `x`" error is about.
fn named_field(err: &serde_json::Error) -> Option<String> {
    let msg = err.to_string();
    let rest = msg.strip_prefix("missing field `").or_else(|| msg.strip_prefix("duplicate field `"))?;
    rest.split_once('`').map(|(field, _)| field.to_owned())
}

/// serde's messages end with " at line 1 column 20", which means nothing to a caller
/// that is told the field path.
fn clean_serde_message(err: &serde_json::Error) -> String {
    let msg = err.to_string();
    match msg.rfind(" at line ") {
        Some(i) => msg[..i].to_owned(),
        None => msg,
    }
}

impl<T: DeserializeOwned + 'static> FromRequest for JsonBody<T> {
    type Error = ApiError;
    type Future = Pin<Box<dyn Future<Output = Result<Self, Self::Error>>>>;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        let checks = require_json_content_type(req).and_then(|()| check_content_length(req, MAX_BODY_BYTES));
        let payload = payload.take();
        Box::pin(async move {
            checks?;
            let raw = read_body(payload, MAX_BODY_BYTES).await?;
            let value = parse::<T>(&raw)?;
            Ok(JsonBody { value, raw })
        })
    }
}

/// The body of a handler that must authenticate before it reads the body (so that a
/// call without a valid key is 401 whatever its body): the same checks as [`JsonBody`].
pub async fn read_json<T: DeserializeOwned>(req: &HttpRequest, payload: Payload) -> Result<T, ApiError> {
    Ok(read_json_body(req, payload).await?.value)
}

/// [`read_json`] keeping the exact bytes (idempotency fingerprints hash them).
pub async fn read_json_body<T: DeserializeOwned>(
    req: &HttpRequest,
    payload: Payload,
) -> Result<JsonBody<T>, ApiError> {
    require_json_content_type(req)?;
    check_content_length(req, MAX_BODY_BYTES)?;
    let raw = read_body(payload, MAX_BODY_BYTES).await?;
    Ok(JsonBody { value: parse::<T>(&raw)?, raw })
}

/// Deserializes a field that distinguishes "absent" (`None`) from "null"
/// (`Some(None)`), for PATCH bodies where null clears.
pub fn double_option<'de, T, D>(de: D) -> Result<Option<Option<T>>, D::Error>
where
    T: serde::Deserialize<'de>,
    D: serde::Deserializer<'de>,
{
    serde::Deserialize::deserialize(de).map(Some)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize, Debug)]
    #[allow(dead_code)]
    struct Body {
        name: String,
        n: Vec<u32>,
    }

    #[test]
    fn tells_syntax_from_shape() {
        assert_eq!(parse::<Body>(b"{").unwrap_err().code, ErrorCode::InvalidJson);
        assert_eq!(parse::<Body>(b"{} x").unwrap_err().code, ErrorCode::InvalidJson);
        let err = parse::<Body>(br#"{"name":"a","n":[1,-1]}"#).unwrap_err();
        assert_eq!(err.code, ErrorCode::ValidationError);
        let details = err.details.unwrap();
        assert_eq!(details["issues"][0]["path"], serde_json::json!(["n", "1"]));
        assert!(parse::<Body>(br#"{"name":"a","n":[1]}"#).is_ok());
    }

    #[derive(serde::Deserialize, Debug)]
    #[allow(dead_code)]
    struct Outer {
        items: Vec<Body>,
    }

    #[test]
    fn missing_and_duplicate_fields_are_named() {
        let paths =
            |bytes: &[u8]| parse::<Outer>(bytes).unwrap_err().details.unwrap()["issues"][0]["path"].clone();
        assert_eq!(paths(br#"{}"#), serde_json::json!(["items"]));
        assert_eq!(
            paths(br#"{"items":[{"name":"a","n":[]},{"n":[]}]}"#),
            serde_json::json!(["items", "1", "name"])
        );
        assert_eq!(
            paths(br#"{"items":[{"name":"a","name":"b","n":[]}]}"#),
            serde_json::json!(["items", "0", "name"])
        );
    }
}
