//! Operator-defined upstreams: named providers besides the built-in three (Azure
//! OpenAI, OpenRouter, a self-hosted vLLM or Ollama server, ...), each a base URL, the
//! wire format it speaks (`openai`, `anthropic`, `gemini`) and optionally the header its
//! key goes in. This module owns their one configuration format and its validation;
//! the proxy reaches them through `{proxy}/upstreams/{name}/...` or by their base URL
//! in `X-Service-Upstream`.
//!
//! The format, in the config file:
//!
//! ```toml
//! [upstreams.openrouter]
//! base_url = "https://openrouter.ai/api"
//! format = "openai"
//! ```
//!
//! and in one environment variable (entries separated by `;`, fields by `,`):
//!
//! ```text
//! SPENDGATE_UPSTREAMS="name=openrouter,format=openai,base_url=https://openrouter.ai/api;name=azure,format=openai,base_url=https://x.openai.azure.com/openai,key_header=api-key"
//! ```

use std::collections::BTreeMap;

use spendgate_llm::pricing::Provider;

/// Names the built-in routes, the pricing table and stored events already use.
pub const RESERVED_NAMES: [&str; 6] = ["openai", "anthropic", "gemini", "google", "gate", "mcp"];

/// Longest upstream name.
const MAX_NAME: usize = 32;

/// One operator-defined upstream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamedUpstream {
    /// `[a-z][a-z0-9-]*`, at most 32 characters; the cost events' `provider`.
    pub name: String,
    /// No trailing slash and no version segment: the proxy appends the route's path.
    pub base_url: String,
    /// The wire format it speaks, which decides the routes that reach it.
    pub format: Provider,
    /// The header the provider key goes in, lower case, when not the format's own
    /// (`authorization` as a bearer token, `x-api-key`, `x-goog-api-key`).
    pub key_header: Option<String>,
}

impl NamedUpstream {
    /// The format's name as the configuration writes it.
    pub fn format_name(&self) -> &'static str {
        format_name(self.format)
    }
}

/// `openai`, `anthropic` or `gemini`.
pub fn format_name(format: Provider) -> &'static str {
    match format {
        Provider::OpenAi => "openai",
        Provider::Anthropic => "anthropic",
        Provider::Google => "gemini",
        // Never an operator-defined upstream's format (see `from_fields`).
        Provider::Bedrock => "bedrock",
        Provider::Vertex => "vertex",
        Provider::Azure => "azure",
    }
}

/// Whether `name` may name an operator-defined upstream.
pub fn is_valid_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes.next().is_some_and(|b| b.is_ascii_lowercase())
        && bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && name.len() <= MAX_NAME
        && !RESERVED_NAMES.contains(&name)
}

/// Parses the environment form (see the module documentation). An empty value is no
/// upstream at all.
pub fn parse(value: &str) -> Result<Vec<NamedUpstream>, String> {
    let mut out: Vec<NamedUpstream> = Vec::new();
    for entry in value.split(';').map(str::trim).filter(|e| !e.is_empty()) {
        let mut fields = BTreeMap::new();
        for field in entry.split(',').map(str::trim).filter(|f| !f.is_empty()) {
            let (k, v) = field.split_once('=').ok_or_else(|| format!("{field:?} is not key=value"))?;
            if fields.insert(k.trim().to_owned(), v.trim().to_owned()).is_some() {
                return Err(format!("{:?} is given twice in {entry:?}", k.trim()));
            }
        }
        let upstream = from_fields(fields)?;
        if out.iter().any(|u| u.name == upstream.name) {
            return Err(format!("upstream {:?} is defined twice", upstream.name));
        }
        out.push(upstream);
    }
    Ok(out)
}

/// The config file's `[upstreams.NAME]` tables in the environment form, so that both
/// sources are read by [`parse`].
pub fn from_toml(table: &toml::Table) -> Result<String, String> {
    let mut entries = Vec::with_capacity(table.len());
    for (name, value) in table {
        let fields = value.as_table().ok_or_else(|| format!("upstreams.{name} must be a table"))?;
        let mut entry = format!("name={name}");
        for (k, v) in fields {
            let v = v.as_str().ok_or_else(|| format!("upstreams.{name}.{k} must be a string"))?;
            if v.contains([',', ';']) {
                return Err(format!("upstreams.{name}.{k} may not contain ',' or ';'"));
            }
            entry.push_str(&format!(",{k}={v}"));
        }
        entries.push(entry);
    }
    Ok(entries.join(";"))
}

fn from_fields(mut fields: BTreeMap<String, String>) -> Result<NamedUpstream, String> {
    let name = fields.remove("name").ok_or("every upstream needs name=")?;
    if !is_valid_name(&name) {
        return Err(format!(
            "upstream name {name:?} must be 1-{MAX_NAME} of a-z 0-9 - starting with a letter, and not one of {}",
            RESERVED_NAMES.join(", ")
        ));
    }
    let format = match fields.remove("format").as_deref() {
        Some("openai") => Provider::OpenAi,
        Some("anthropic") => Provider::Anthropic,
        Some("gemini") => Provider::Google,
        _ => return Err(format!("upstream {name}: format must be openai, anthropic or gemini")),
    };
    let base_url =
        fields.remove("base_url").ok_or_else(|| format!("upstream {name}: base_url is required"))?;
    let base_url = match url::Url::parse(&base_url) {
        Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() && u.query().is_none() => {
            base_url.trim_end_matches('/').to_owned()
        }
        _ => return Err(format!("upstream {name}: base_url must be an http(s) URL without a query")),
    };
    let key_header = match fields.remove("key_header") {
        None => None,
        Some(h) if is_header_name(&h) => Some(h.to_ascii_lowercase()),
        Some(h) => return Err(format!("upstream {name}: key_header {h:?} is not a header name")),
    };
    if let Some(unknown) = fields.keys().next() {
        return Err(format!("upstream {name}: unknown field {unknown:?} (base_url, format, key_header)"));
    }
    Ok(NamedUpstream { name, base_url, format, key_header })
}

/// An HTTP token of at most 64 characters.
fn is_header_name(h: &str) -> bool {
    (1..=64).contains(&h.len()) && h.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_environment_form_reads_every_field() {
        let u = parse(
            "name=openrouter,format=openai,base_url=https://openrouter.ai/api/ ; \
             name=azure,format=openai,base_url=https://x.openai.azure.com/openai,key_header=Api-Key",
        )
        .unwrap();
        assert_eq!(u.len(), 2);
        assert_eq!(u[0].base_url, "https://openrouter.ai/api");
        assert_eq!(u[0].key_header, None);
        assert_eq!(u[1].key_header.as_deref(), Some("api-key"));
        assert!(parse("").unwrap().is_empty());
    }

    #[test]
    fn bad_entries_say_what_is_wrong() {
        for (bad, says) in [
            ("name=openai,format=openai,base_url=http://x", "must be"),
            ("name=Bad,format=openai,base_url=http://x", "must be"),
            ("name=x,format=cohere,base_url=http://x", "format"),
            ("name=x,format=openai", "base_url"),
            ("name=x,format=openai,base_url=ftp://x", "base_url"),
            ("name=x,format=openai,base_url=http://x,colour=red", "unknown field"),
            ("name=x,format=openai,base_url=http://x;name=x,format=gemini,base_url=http://y", "twice"),
            ("name=x,format=openai,base_url=http://x,key_header=a b", "key_header"),
        ] {
            let err = parse(bad).unwrap_err();
            assert!(err.contains(says), "{bad}: {err}");
        }
    }

    #[test]
    fn the_file_form_becomes_the_environment_form() {
        let table: toml::Table =
            "[vllm]\nbase_url = \"http://127.0.0.1:8000\"\nformat = \"openai\"\n".parse().unwrap();
        let u = parse(&from_toml(&table).unwrap()).unwrap();
        assert_eq!(u[0].name, "vllm");
        assert_eq!(u[0].format, Provider::OpenAi);
    }
}
