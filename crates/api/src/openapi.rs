//! `GET /api/openapi.json`: serves the document assembled by the binary crate
//! (`spendgate::openapi`, above both surfaces: it gathers every endpoint's part), which
//! the wiring hands in as [`Document`], serialized once at start.

use actix_web::http::header::{ContentType, HOST};
use actix_web::{get, web, HttpRequest, HttpResponse};
use utoipa::OpenApi;

/// The document itself.
#[utoipa::path(get, path = "/api/openapi.json", tag = "meta", security(()),
    responses((status = 200, description = "This OpenAPI 3.1 document", content_type = "application/json")))]
#[get("/openapi.json")]
async fn get_openapi(document: web::Data<Document>, req: HttpRequest) -> HttpResponse {
    let host = req.headers().get(HOST).and_then(|h| h.to_str().ok());
    HttpResponse::Ok().content_type(ContentType::json()).body(document.json(host))
}

/// The assembled OpenAPI document, as app data of the control plane: its JSON text,
/// written once, and where in it the proxy's address stands.
pub struct Document {
    /// The JSON text, cut at each place the proxy's base URL stands (as a JSON string).
    pieces: Vec<String>,
    /// That URL as a JSON string.
    proxy_url: String,
    /// The proxy listens on every interface (`0.0.0.0`, `[::]`) at this port and no
    /// `proxy_public_url` names it: the URL names the host the document was asked on,
    /// as the dashboard's snippets do.
    any_host_port: Option<u16>,
}

impl Document {
    /// `document` names the proxy by `proxy_url` (see `spendgate::openapi::served`).
    pub fn new(
        document: &utoipa::openapi::OpenApi,
        proxy_url: &str,
        any_host_port: Option<u16>,
    ) -> serde_json::Result<Self> {
        let json = serde_json::to_string(document)?;
        let proxy_url = serde_json::to_string(proxy_url)?;
        Ok(Self { pieces: json.split(&proxy_url).map(str::to_owned).collect(), proxy_url, any_host_port })
    }

    /// The JSON text as served to a request with this `Host` header.
    fn json(&self, host: Option<&str>) -> String {
        match (self.any_host_port, host.and_then(hostname)) {
            (Some(port), Some(host)) => {
                let scheme = if self.proxy_url.starts_with("\"https:") { "https" } else { "http" };
                self.pieces.join(&format!("\"{scheme}://{host}:{port}\""))
            }
            _ => self.pieces.join(&self.proxy_url),
        }
    }
}

/// The host name of a `Host` header (its port left off), when it is a plain DNS name
/// or IP address: nothing else goes into the document.
fn hostname(header: &str) -> Option<&str> {
    if let Some(rest) = header.strip_prefix('[') {
        let end = rest.find(']')?;
        let ip = &rest[..end];
        let plain = !ip.is_empty() && ip.chars().all(|c| c.is_ascii_hexdigit() || matches!(c, ':' | '.'));
        return plain.then(|| &header[..end + 2]);
    }
    let host = header.split(':').next()?;
    let plain = !host.is_empty() && host.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-'));
    plain.then_some(host)
}

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(get_openapi);
}

#[derive(OpenApi)]
#[openapi(paths(get_openapi))]
pub struct ApiDoc;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_plain_host_name_is_taken_from_the_host_header() {
        assert_eq!(hostname("gateway.example.com:3000"), Some("gateway.example.com"));
        assert_eq!(hostname("10.0.0.7"), Some("10.0.0.7"));
        assert_eq!(hostname("[::1]:3000"), Some("[::1]"));
        assert_eq!(hostname("evil\".example.com"), None);
        assert_eq!(hostname("a b"), None);
        assert_eq!(hostname("[::1"), None);
        assert_eq!(hostname("[x]"), None);
        assert_eq!(hostname("a[b"), None);
        assert_eq!(hostname(""), None);
    }

    #[test]
    fn a_wildcard_proxy_is_named_by_the_host_asked() {
        let mut doc = utoipa::openapi::OpenApi::default();
        doc.info.description = Some("http://0.0.0.0:8787".to_owned());
        let fixed = Document::new(&doc, "http://0.0.0.0:8787", None).unwrap();
        assert!(fixed.json(Some("example.com")).contains("\"http://0.0.0.0:8787\""));
        let any = Document::new(&doc, "http://0.0.0.0:8787", Some(8787)).unwrap();
        assert!(any.json(Some("example.com:3000")).contains("\"http://example.com:8787\""));
        assert!(any.json(Some("bad\"host")).contains("\"http://0.0.0.0:8787\""));
        assert!(any.json(None).contains("\"http://0.0.0.0:8787\""));
        doc.info.description = Some("https://0.0.0.0:8787".to_owned());
        let tls = Document::new(&doc, "https://0.0.0.0:8787", Some(8787)).unwrap();
        assert!(tls.json(Some("example.com")).contains("\"https://example.com:8787\""));
    }
}
