//! The error envelope every surface answers with, and the one place that maps an
//! error code to its HTTP status.
//!
//! Handlers return `Result<_, ApiError>`; the code table of the spec lives in
//! [`ErrorCode`], and `status()` lists every variant with no catch-all arm so a new
//! code forces a deliberate status.

use actix_web::http::{header, StatusCode};
use actix_web::{HttpResponse, ResponseError};
use serde::Serialize;
use serde_json::Value;

/// Machine codes of the spec's error table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    ValidationError,
    InvalidJson,
    InvalidInput,
    SpendCapExceeded,
    InvalidKey,
    InvalidUpstream,
    InvalidCustomerId,
    InvalidPlanRef,
    InvalidBudgetCap,
    InvalidMarginTarget,
    InvalidEstimate,
    InvalidFeature,
    CustomerDataUnsupported,
    BindingInactive,
    /// The payment processor rejected the supplied key.
    ProcessorValidationFailed,
    AuthenticationRequired,
    Unauthorized,
    Forbidden,
    CustomerNotAllowed,
    MandateViolation,
    NotFound,
    PayloadTooLarge,
    UnsupportedMediaType,
    LimitExceeded,
    Conflict,
    IdempotencyConflict,
    InvalidActionTransition,
    ActionExpired,
    StaleAction,
    InvalidIdempotencyKey,
    IdempotencyUnavailable,
    RateLimitExceeded,
    BudgetExceeded,
    TagBudgetExceeded,
    CustomerBudgetExceeded,
    SessionLimitExceeded,
    VelocityExceeded,
    LoopDetected,
    PlanLimitExceeded,
    MethodNotAllowed,
    InternalError,
    ServiceUnavailable,
    RequestInProgress,
    /// The proxy could not reach the provider, or the connection failed.
    UpstreamError,
    /// The provider did not answer within the upstream timeout.
    UpstreamTimeout,
    /// A proxied call to a model without a price, in an organization whose
    /// `unpricedModels` is `block`.
    ModelNotPriced,
}

impl ErrorCode {
    pub fn status(self) -> StatusCode {
        match self {
            Self::ValidationError
            | Self::InvalidJson
            | Self::InvalidInput
            | Self::SpendCapExceeded
            | Self::InvalidKey
            | Self::InvalidUpstream
            | Self::InvalidCustomerId
            | Self::InvalidPlanRef
            | Self::InvalidBudgetCap
            | Self::InvalidMarginTarget
            | Self::InvalidEstimate
            | Self::InvalidFeature
            | Self::CustomerDataUnsupported
            | Self::ProcessorValidationFailed
            | Self::InvalidIdempotencyKey
            | Self::ModelNotPriced => StatusCode::BAD_REQUEST,
            Self::AuthenticationRequired | Self::Unauthorized => StatusCode::UNAUTHORIZED,
            // The spec leaves mandate_violation's status open; a policy refusal of an
            // authenticated caller is a 403.
            Self::Forbidden | Self::CustomerNotAllowed | Self::MandateViolation => StatusCode::FORBIDDEN,
            Self::NotFound => StatusCode::NOT_FOUND,
            Self::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Self::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Self::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Self::LimitExceeded
            | Self::Conflict
            | Self::IdempotencyConflict
            | Self::BindingInactive
            | Self::InvalidActionTransition
            | Self::ActionExpired
            | Self::StaleAction => StatusCode::CONFLICT,
            Self::RateLimitExceeded
            | Self::BudgetExceeded
            | Self::TagBudgetExceeded
            | Self::CustomerBudgetExceeded
            | Self::SessionLimitExceeded
            | Self::VelocityExceeded
            | Self::LoopDetected
            | Self::PlanLimitExceeded => StatusCode::TOO_MANY_REQUESTS,
            Self::InternalError => StatusCode::INTERNAL_SERVER_ERROR,
            Self::UpstreamError => StatusCode::BAD_GATEWAY,
            Self::UpstreamTimeout => StatusCode::GATEWAY_TIMEOUT,
            Self::ServiceUnavailable | Self::RequestInProgress | Self::IdempotencyUnavailable => {
                StatusCode::SERVICE_UNAVAILABLE
            }
        }
    }
}

/// One failed check of a request, as reported in `details.issues`.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Issue {
    pub path: Vec<String>,
    pub message: String,
}

/// An error on its way to the client, in the spec's envelope.
#[derive(Debug)]
pub struct ApiError {
    pub code: ErrorCode,
    pub message: String,
    pub details: Option<Value>,
    /// Extra response headers (`Retry-After`, `X-Service-Denied`, ...).
    pub headers: Vec<(header::HeaderName, String)>,
}

impl ApiError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self { code, message: message.into(), details: None, headers: Vec::new() }
    }

    pub fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }

    pub fn with_header(mut self, name: header::HeaderName, value: impl Into<String>) -> Self {
        self.headers.push((name, value.into()));
        self
    }

    pub fn validation(issues: Vec<Issue>) -> Self {
        Self::new(ErrorCode::ValidationError, "Request validation failed")
            .with_details(serde_json::json!({ "issues": issues }))
    }

    /// A single-issue validation error.
    pub fn invalid_field(path: &[&str], message: impl Into<String>) -> Self {
        Self::validation(vec![Issue {
            path: path.iter().map(|p| (*p).to_owned()).collect(),
            message: message.into(),
        }])
    }

    pub fn not_found(what: &str) -> Self {
        Self::new(ErrorCode::NotFound, format!("{what} not found"))
    }

    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Forbidden, message)
    }

    pub fn authentication_required() -> Self {
        Self::new(ErrorCode::AuthenticationRequired, "Authentication required")
    }

    pub fn internal(err: impl std::fmt::Display) -> Self {
        tracing::error!(error = %err, "internal error");
        Self::new(ErrorCode::InternalError, "Internal error")
    }

    pub fn unavailable(err: impl std::fmt::Display) -> Self {
        tracing::error!(error = %err, "dependency unavailable");
        Self::new(ErrorCode::ServiceUnavailable, "Service temporarily unavailable")
            .with_header(header::RETRY_AFTER, "1")
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}: {}", self.code, self.message)
    }
}

#[derive(Serialize)]
struct Envelope<'a> {
    error: Body<'a>,
}

#[derive(Serialize)]
struct Body<'a> {
    code: ErrorCode,
    message: &'a str,
    details: &'a Option<Value>,
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        self.code.status()
    }

    fn error_response(&self) -> HttpResponse {
        let mut builder = HttpResponse::build(self.status_code());
        for (name, value) in &self.headers {
            builder.insert_header((name.clone(), value.as_str()));
        }
        builder.json(Envelope {
            error: Body { code: self.code, message: &self.message, details: &self.details },
        })
    }
}

impl From<crate::db::DbError> for ApiError {
    fn from(err: crate::db::DbError) -> Self {
        match err {
            crate::db::DbError::Unavailable(e) => ApiError::unavailable(e),
            crate::db::DbError::NotFound => ApiError::not_found("Resource"),
            crate::db::DbError::Query(e) => ApiError::internal(e),
        }
    }
}

/// Collects validation issues so a request reports all of them at once.
#[derive(Debug, Default)]
pub struct Issues(Vec<Issue>);

impl Issues {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn push(&mut self, path: &[&str], message: impl Into<String>) {
        self.0.push(Issue { path: path.iter().map(|p| (*p).to_owned()).collect(), message: message.into() });
    }

    pub fn check(&mut self, ok: bool, path: &[&str], message: &str) {
        if !ok {
            self.push(path, message);
        }
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn extend(&mut self, other: Issues) {
        self.0.extend(other.0);
    }

    pub fn finish(self) -> Result<(), ApiError> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(ApiError::validation(self.0))
        }
    }
}
