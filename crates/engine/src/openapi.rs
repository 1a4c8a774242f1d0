//! What the control plane's and the proxy's documentation share: the security scheme
//! names operations refer to, the `{ data }` and page wrappers, and the spec's error
//! envelope. Below both surfaces; the document itself is assembled above them, by the
//! binary crate (`spendgate::openapi::document`).

use utoipa::ToSchema;

/// Security scheme names, as operations reference them in `security(...)`.
pub const SERVICE_KEY: &str = "serviceKey";
pub const SESSION: &str = "session";
pub const INTERNAL_SECRET: &str = "internalSecret";
pub const CRON_SECRET: &str = "cronSecret";

/// `{ data: T }`: the wrapper of most control-plane responses.
#[derive(serde::Serialize, ToSchema)]
pub struct Data<T: ToSchema> {
    pub data: T,
}

/// `{ data: T[], cursor }`: a page of a cursor-paginated list; `cursor` is null on
/// the last page.
#[derive(ToSchema)]
pub struct Page<T: ToSchema> {
    pub data: Vec<T>,
    pub cursor: Option<crate::util::pagination::Cursor>,
}

/// The spec's error envelope: `{ error: { code, message, details } }`.
#[derive(ToSchema)]
pub struct ErrorEnvelope {
    pub error: ErrorBody,
}

#[derive(ToSchema)]
pub struct ErrorBody {
    /// Machine code from the spec's error table (`validation_error`, `not_found`, ...).
    pub code: String,
    pub message: String,
    /// `{ issues: [{ path, message }] }` for `validation_error`; other codes may
    /// carry an object; otherwise null.
    #[schema(value_type = Option<Object>)]
    pub details: Option<serde_json::Value>,
}
