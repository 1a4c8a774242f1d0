//! The OpenTelemetry side of a proxied call, used by the route only when export is on:
//! the GenAI operation and provider of a route, what admission tells the span, and
//! the spans of calls that end before a settlement (a refusal, an upstream error).
//! The settlement exports the rest (`Settlement::export`).

use std::borrow::Cow;
use std::time::Instant;

use actix_web::http::StatusCode;
use actix_web::HttpRequest;

use super::admitted::Admitted;
use super::denial::DENIED;
use super::upstream::Route;
use spendgate_engine::error::ApiError;
use spendgate_engine::telemetry::spans::{self, CallTrace, Outcome, Parent};
use spendgate_engine::telemetry::Telemetry;
use spendgate_llm::pricing::Provider;

/// `gen_ai.operation.name` of a route.
pub fn operation(route: Route) -> &'static str {
    match route {
        Route::ChatCompletions
        | Route::Responses
        | Route::Messages
        | Route::AzureChat
        | Route::AzureResponses
        | Route::BedrockConverse
        | Route::BedrockInvoke
        | Route::BedrockInvokeAnthropic => "chat",
        Route::GenerateContent | Route::StreamGenerateContent => "generate_content",
        Route::Embeddings | Route::AzureEmbeddings => "embeddings",
    }
}

/// `gen_ai.provider.name` of a route's wire format.
pub fn provider(route: Route) -> &'static str {
    match route.provider() {
        Provider::OpenAi => "openai",
        Provider::Anthropic => "anthropic",
        Provider::Google => "gcp.gemini",
        Provider::Bedrock => "aws.bedrock",
        Provider::Vertex => "gcp.vertex_ai",
        Provider::Azure => "azure.ai.openai",
    }
}

pub fn start(req: &HttpRequest, route: Route, started: Instant) -> Option<Box<CallTrace>> {
    let resolved = super::trace::trace_of(req);
    let parent = Parent::of(&resolved.trace_id, resolved.traceparent.as_deref())?;
    Some(Box::new(CallTrace::new(parent, started, operation(route), provider(route))))
}

pub fn admitted(a: &Admitted) -> spans::Admitted {
    spans::Admitted {
        model: a.model.clone(),
        upstream: a.event_provider().to_owned(),
        max_tokens: a.summary.max_output_tokens,
        stream: a.summary.stream || a.route == Route::StreamGenerateContent,
        api_key_id: a.key.key_id.clone(),
        session: a.headers.session.clone(),
        customer: a.customer.clone(),
        request_id: a.headers.request_id.clone(),
    }
}

/// A call refused before it reached the provider (a budget, a policy, a limit, a
/// bad request) or whose client went away.
pub fn refused(telemetry: &Telemetry, mut trace: CallTrace, e: &ApiError) {
    let code = serde_json::to_value(e.code).ok();
    let code = code.as_ref().and_then(|v| v.as_str());
    let denied = e.headers.iter().any(|(n, _)| n == DENIED);
    if denied && trace.tightest.is_none() {
        trace.tightest = e.details.as_ref().and_then(|d| {
            Some(format!("{}:{}", d["budget_entity_type"].as_str()?, d["budget_entity_id"].as_str()?))
        });
    }
    let outcome = Outcome {
        budget_status: denied.then_some("denied"),
        denial_code: code.filter(|_| denied),
        cost_microdollars: denied.then_some(0),
        error_type: code.map(Cow::Borrowed),
        ..Outcome::default()
    };
    telemetry.record_call(&trace, &outcome, Instant::now());
}

/// The provider answered an error status: passed through, nothing charged.
pub fn upstream_error(telemetry: &Telemetry, trace: &CallTrace, budget_status: &str, status: StatusCode) {
    let outcome = Outcome {
        budget_status: Some(budget_status),
        cost_microdollars: Some(0),
        error_type: Some(Cow::Owned(status.as_u16().to_string())),
        ..Outcome::default()
    };
    telemetry.record_call(trace, &outcome, Instant::now());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_name_their_genai_operation_and_provider() {
        assert_eq!((operation(Route::ChatCompletions), provider(Route::ChatCompletions)), ("chat", "openai"));
        assert_eq!((operation(Route::Messages), provider(Route::Messages)), ("chat", "anthropic"));
        assert_eq!(
            (operation(Route::StreamGenerateContent), provider(Route::StreamGenerateContent)),
            ("generate_content", "gcp.gemini")
        );
        assert_eq!(operation(Route::Embeddings), "embeddings");
    }
}
