//! Talking to the providers: one pooled HTTPS client per worker thread, the upstream
//! allow-list and the operator's named upstreams (where a call goes: [`Target`]), and
//! upstream URLs. Which headers cross the proxy is `crossing.rs`.

use std::cell::RefCell;
use std::time::Duration;

use spendgate_engine::config::Config;
use spendgate_engine::upstreams::NamedUpstream;
use spendgate_llm::pricing::Provider;
use spendgate_llm::usage::WireFormat;

/// The provider routes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    ChatCompletions,
    /// `POST /v1/responses`, the OpenAI Responses API.
    Responses,
    /// `POST /v1/embeddings`.
    Embeddings,
    Messages,
    GenerateContent,
    StreamGenerateContent,
    /// Azure OpenAI chat completions (deployment or v1 path, under `/azure`).
    AzureChat,
    /// Azure OpenAI Responses.
    AzureResponses,
    /// Azure OpenAI embeddings.
    AzureEmbeddings,
    /// Amazon Bedrock `/model/{modelId}/converse`.
    BedrockConverse,
    /// Bedrock `/model/{modelId}/invoke` of a model whose body has Converse's shape
    /// (Amazon Nova).
    BedrockInvoke,
    /// Bedrock `/model/{modelId}/invoke` of a Claude model: Anthropic's messages.
    BedrockInvokeAnthropic,
}

impl Route {
    /// The provider the call is priced and recorded as.
    pub const fn provider(self) -> Provider {
        match self {
            Route::ChatCompletions | Route::Responses | Route::Embeddings => Provider::OpenAi,
            Route::Messages => Provider::Anthropic,
            Route::GenerateContent | Route::StreamGenerateContent => Provider::Google,
            Route::AzureChat | Route::AzureResponses | Route::AzureEmbeddings => Provider::Azure,
            Route::BedrockConverse | Route::BedrockInvoke | Route::BedrockInvokeAnthropic => {
                Provider::Bedrock
            }
        }
    }

    /// The provider whose clients' header conventions the route follows (where a key
    /// may sit, which headers are forwarded).
    pub const fn wire(self) -> Provider {
        match self.provider() {
            Provider::Azure => Provider::OpenAi,
            other => other,
        }
    }

    /// A cloud route's mount point: the cloud's own path follows it unchanged, and
    /// goes upstream as it came.
    pub const fn cloud_prefix(self) -> Option<&'static str> {
        match self.provider() {
            Provider::Azure => Some("/azure"),
            Provider::Bedrock => Some("/bedrock"),
            _ => None,
        }
    }

    /// How the route's requests and answers are read.
    pub const fn format(self) -> WireFormat {
        match self {
            Route::Responses | Route::AzureResponses => WireFormat::OpenAiResponses,
            Route::Embeddings | Route::AzureEmbeddings => WireFormat::OpenAiEmbeddings,
            Route::BedrockConverse | Route::BedrockInvoke => WireFormat::BedrockConverse,
            Route::BedrockInvokeAnthropic => WireFormat::Anthropic,
            other => WireFormat::of(other.provider()),
        }
    }
}

/// OpenAI-compatible providers accepted in `X-Service-Upstream` besides the two
/// defaults (`https://api.openai.com`, `https://api.anthropic.com`). Entries carry no
/// version segment; the proxy appends the route's path (`/v1/chat/completions`).
pub const EXTRA_UPSTREAMS: [&str; 5] = [
    "https://api.groq.com/openai",
    "https://api.together.xyz",
    "https://api.fireworks.ai/inference",
    "https://api.mistral.ai",
    "https://api.deepseek.com",
];

pub const DEFAULT_OPENAI: &str = "https://api.openai.com";
pub const DEFAULT_ANTHROPIC: &str = "https://api.anthropic.com";
pub const DEFAULT_GEMINI: &str = "https://generativelanguage.googleapis.com";

/// An `X-Service-Upstream` that is not on the allow-list (400 `invalid_upstream`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotAllowed;

/// Where one call goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The upstream's name, which a stored provider credential is looked up by:
    /// `openai`, `anthropic`, `gemini` (the configured built-in bases) or an
    /// operator-defined name. `None` for an allow-listed OpenAI-compatible provider
    /// (Groq, Together, ...) that is none of them: no stored credential goes there.
    pub name: Option<String>,
    /// Base URL, no trailing slash; the route's path is appended.
    pub base: String,
    /// The cost event's `provider`: `openai`, `anthropic`, `google` on the built-in
    /// upstreams, the name of an operator-defined one (its prices are keyed on it).
    pub provider: String,
    /// Set for an operator-defined upstream.
    pub named: bool,
    /// The header the provider key goes in, when not the format's own.
    pub key_header: Option<String>,
}

/// Why no target could be chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetError {
    /// `/upstreams/{name}/...` names no configured upstream of the route's format.
    UnknownName,
    /// `X-Service-Upstream` is neither allow-listed for the route nor a configured
    /// upstream of its format.
    NotAllowed,
}

impl Target {
    fn builtin(config: &Config, route: Route) -> Target {
        let (name, base) = match route.provider() {
            Provider::OpenAi => ("openai", config.upstream_openai.as_str()),
            Provider::Anthropic => ("anthropic", config.upstream_anthropic.as_str()),
            Provider::Google => ("gemini", config.upstream_gemini.as_str()),
            // A cloud's base is its stored credential's endpoint, set once resolved.
            cloud => (cloud.as_str(), ""),
        };
        Target {
            name: Some(name.to_owned()),
            base: base.trim_end_matches('/').to_owned(),
            provider: route.provider().as_str().to_owned(),
            named: false,
            key_header: None,
        }
    }

    fn named(upstream: &NamedUpstream) -> Target {
        Target {
            name: Some(upstream.name.clone()),
            base: upstream.base_url.clone(),
            provider: upstream.name.clone(),
            named: true,
            key_header: upstream.key_header.clone(),
        }
    }
}

/// The target of a call on `route`: the operator-defined upstream named in the path
/// (`/upstreams/{name}/...`) or whose base URL is in `X-Service-Upstream`, else an
/// allow-listed `X-Service-Upstream` (OpenAI-compatible route only), else the route's
/// configured base. A named upstream answers only the routes of its wire format.
pub fn target(
    config: &Config,
    route: Route,
    path_name: Option<&str>,
    requested: Option<&str>,
) -> Result<Target, TargetError> {
    let format = route.provider();
    let wanted = requested.map(|r| r.trim_end_matches('/'));
    if route.cloud_prefix().is_some() {
        // A cloud call goes to the stored credential's endpoint only.
        return match (path_name, wanted) {
            (Some(_), _) => Err(TargetError::UnknownName),
            (None, Some(_)) => Err(TargetError::NotAllowed),
            (None, None) => Ok(Target::builtin(config, route)),
        };
    }
    if let Some(name) = path_name {
        let upstream =
            config.upstream(name).filter(|u| u.format == format).ok_or(TargetError::UnknownName)?;
        // A header beside the path prefix may only repeat it.
        return match wanted {
            Some(w) if w != upstream.base_url => Err(TargetError::NotAllowed),
            _ => Ok(Target::named(upstream)),
        };
    }
    let Some(wanted) = wanted else { return Ok(Target::builtin(config, route)) };
    if let Some(upstream) = config.upstreams.iter().find(|u| u.base_url == wanted && u.format == format) {
        return Ok(Target::named(upstream));
    }
    if format != Provider::OpenAi {
        // An Anthropic or Gemini request carries that provider's key, which must never
        // reach another provider the operator did not name.
        return Err(TargetError::NotAllowed);
    }
    let base = base_url(config, route, Some(wanted)).map_err(|NotAllowed| TargetError::NotAllowed)?;
    let mut target = Target::builtin(config, route);
    if base != target.base {
        target.name = None;
        target.base = base.to_owned();
    }
    Ok(target)
}

/// The base URL the route goes to: the allow-listed override, else the configured one.
pub fn base_url<'a>(
    config: &'a Config,
    route: Route,
    requested: Option<&'a str>,
) -> Result<&'a str, NotAllowed> {
    let configured = match route.provider() {
        Provider::OpenAi => config.upstream_openai.as_str(),
        Provider::Anthropic => config.upstream_anthropic.as_str(),
        Provider::Google => config.upstream_gemini.as_str(),
        _ => return Err(NotAllowed),
    };
    let Some(requested) = requested else { return Ok(configured.trim_end_matches('/')) };
    let wanted = requested.trim_end_matches('/');
    let allowed = [DEFAULT_OPENAI, DEFAULT_ANTHROPIC]
        .into_iter()
        .chain(EXTRA_UPSTREAMS)
        // The configured bases count as the defaults they replace.
        .chain([config.upstream_openai.as_str(), config.upstream_anthropic.as_str()])
        .any(|a| a.trim_end_matches('/') == wanted);
    if allowed {
        Ok(wanted)
    } else {
        Err(NotAllowed)
    }
}

/// A cloud route's upstream URL: base + the cloud's path as the client sent it
/// (still percent-encoded) + query.
pub fn cloud_url(base: &str, tail: &str, query: &str) -> String {
    join_query(format!("{base}{tail}"), query)
}

/// The upstream URL: base + the route's own path (+ query; `alt=sse` on the Gemini
/// streaming route).
pub fn url(base: &str, route: Route, model: &str, query: &str) -> String {
    match route {
        // Cloud routes go by `cloud_url`; the base alone stands for them here.
        Route::AzureChat
        | Route::AzureResponses
        | Route::AzureEmbeddings
        | Route::BedrockConverse
        | Route::BedrockInvoke
        | Route::BedrockInvokeAnthropic => join_query(base.to_owned(), query),
        Route::ChatCompletions => join_query(format!("{base}/v1/chat/completions"), query),
        Route::Responses => join_query(format!("{base}/v1/responses"), query),
        Route::Embeddings => join_query(format!("{base}/v1/embeddings"), query),
        Route::Messages => join_query(format!("{base}/v1/messages"), query),
        Route::GenerateContent => join_query(format!("{base}/v1beta/models/{model}:generateContent"), query),
        Route::StreamGenerateContent => {
            let has_alt = query.split('&').any(|p| p.starts_with("alt="));
            let url = join_query(format!("{base}/v1beta/models/{model}:streamGenerateContent"), query);
            if has_alt {
                url
            } else if query.is_empty() {
                format!("{url}?alt=sse")
            } else {
                format!("{url}&alt=sse")
            }
        }
    }
}

fn join_query(url: String, query: &str) -> String {
    if query.is_empty() {
        url
    } else {
        format!("{url}?{query}")
    }
}

thread_local! {
    static CLIENT: RefCell<Option<awc::Client>> = const { RefCell::new(None) };
}

/// This worker's pooled client (keep-alive connections are reused per worker), with
/// the operator's trust store and proxy settings (`spendgate_engine::net`).
pub fn client(config: &Config) -> awc::Client {
    CLIENT.with(|c| c.borrow_mut().get_or_insert_with(|| build_client(config)).clone())
}

fn build_client(config: &Config) -> awc::Client {
    // No client-wide timeout: awc would apply it to the whole response body too, and a
    // stream may rightly last longer. The proxy times the head and each chunk itself.
    let mut options = spendgate_engine::net::Options::new(config.upstream_connect_timeout);
    options.keep_alive = Duration::from_secs(90);
    spendgate_engine::net::client(&options)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gemini_stream_gets_alt_sse() {
        assert_eq!(
            url("http://m", Route::StreamGenerateContent, "gemini-2.5-pro", ""),
            "http://m/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse"
        );
        assert_eq!(
            url("http://m", Route::StreamGenerateContent, "g", "key=k"),
            "http://m/v1beta/models/g:streamGenerateContent?key=k&alt=sse"
        );
        assert_eq!(url("http://m", Route::ChatCompletions, "", ""), "http://m/v1/chat/completions");
    }
}
