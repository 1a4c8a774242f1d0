//! Spans of the governed operations other than proxied calls: MCP budget checks and
//! tool events, the gate, and action decisions. One middleware on both listeners
//! times each such request and exports a span when it is answered; handlers add what
//! they decided with [`note`]. Any other request passes straight through.

use std::time::Instant;

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::Method;
use actix_web::middleware::Next;
use actix_web::{web, HttpMessage, HttpRequest};
use opentelemetry::KeyValue;

use super::spans::{self, Parent};

/// The operation of a request, if it is a governed one.
pub fn operation_of(method: &Method, path: &str) -> Option<&'static str> {
    if method != Method::POST {
        return None;
    }
    match path {
        "/v1/mcp/budget/check" => return Some("mcp.budget_check"),
        "/v1/mcp/events" => return Some("mcp.event"),
        "/v1/gate" => return Some("gate"),
        "/api/actions" => return Some("action.create"),
        _ => {}
    }
    let rest = path.strip_prefix("/api/actions/")?;
    let (id, verb) = rest.split_once('/')?;
    if id.is_empty() {
        return None;
    }
    match verb {
        "approve" => Some("action.approve"),
        "reject" => Some("action.reject"),
        "result" => Some("action.result"),
        _ => None,
    }
}

/// The running export as both listeners' app data (`None`: export is off), so that
/// this layer needs nothing else of the application's state.
pub struct Exporting(pub Option<std::sync::Arc<super::Telemetry>>);

/// What a handler decided, for its operation's span.
#[derive(Debug, Default)]
struct Notes(Vec<KeyValue>);

/// Adds attributes to the span of this request's operation (nothing when export is
/// off).
pub fn note(req: &HttpRequest, add: impl FnOnce(&mut Vec<KeyValue>)) {
    let on = req.app_data::<web::Data<Exporting>>().is_some_and(|e| e.0.is_some());
    if on {
        let mut ext = req.extensions_mut();
        match ext.get_mut::<Notes>() {
            Some(notes) => add(&mut notes.0),
            None => {
                let mut notes = Notes::default();
                add(&mut notes.0);
                ext.insert(notes);
            }
        }
    }
}

/// Times a governed operation and exports its span. Both listeners wrap it in a
/// `Condition` on export being on, so that with export off it is not there at all.
pub async fn span(
    req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let traced = req
        .app_data::<web::Data<Exporting>>()
        .and_then(|e| e.0.clone())
        .and_then(|t| Some((t, operation_of(req.method(), req.path())?, Instant::now())));
    let res = next.call(req).await?;
    if let Some((telemetry, operation, started)) = traced {
        let headers = res.headers();
        let traceparent = res.request().headers().get("traceparent").and_then(|v| v.to_str().ok());
        // The proxy answers with the trace id it resolved; the control plane has none.
        let resolved = headers.get("x-service-trace-id").and_then(|v| v.to_str().ok());
        let parent = match resolved.and_then(|tid| Parent::of(tid, traceparent)) {
            Some(parent) => parent,
            None => Parent::from_traceparent(traceparent),
        };
        let clock = spans::Clock::since(started);
        let status = res.status();
        let mut attrs = vec![
            KeyValue::new("spendgate.operation", operation),
            KeyValue::new("http.request.method", "POST"),
            KeyValue::new("http.response.status_code", i64::from(status.as_u16())),
        ];
        if let Some(id) = res.request().path().strip_prefix("/api/actions/").and_then(|r| r.split('/').next())
        {
            attrs.push(KeyValue::new("spendgate.action.id", id.to_owned()));
        }
        if headers.contains_key("x-service-denied") {
            attrs.push(KeyValue::new("spendgate.denied", true));
        }
        if let Some(notes) = res.request().extensions_mut().remove::<Notes>() {
            attrs.extend(notes.0);
        }
        let error =
            (status.is_client_error() || status.is_server_error()).then(|| status.as_u16().to_string());
        if let Some(e) = &error {
            attrs.push(KeyValue::new("error.type", e.clone()));
        }
        let span = spans::operation_span(
            parent,
            operation,
            (clock.wall(started), clock.wall(Instant::now())),
            attrs,
            error,
            telemetry.scope(),
        );
        if let Some(span) = span {
            telemetry.push(span);
        }
    }
    Ok(res)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn governed_operations_by_path() {
        let post = Method::POST;
        assert_eq!(operation_of(&post, "/v1/mcp/budget/check"), Some("mcp.budget_check"));
        assert_eq!(operation_of(&post, "/v1/gate"), Some("gate"));
        assert_eq!(operation_of(&post, "/api/actions/svc_act_1/approve"), Some("action.approve"));
        assert_eq!(operation_of(&post, "/api/actions//approve"), None);
        assert_eq!(operation_of(&post, "/api/actions/a/costs"), None);
        assert_eq!(operation_of(&post, "/v1/chat/completions"), None, "a proxied call has its own span");
        assert_eq!(operation_of(&Method::GET, "/v1/gate"), None);
    }
}
