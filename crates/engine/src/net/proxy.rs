//! The egress proxy: which targets go through it (`HTTPS_PROXY`, `HTTP_PROXY`,
//! `NO_PROXY`) and the TCP connector that opens an HTTP `CONNECT` tunnel through it,
//! over which awc then speaks TLS (or plain HTTP) to the target as if directly.
//!
//! `NO_PROXY` is a comma-separated list: `*` (no proxy at all), a host name (itself
//! and its subdomains; a leading `.` is the same), an IP address or a CIDR range; a
//! `:port` suffix is ignored.

use std::net::IpAddr;
use std::sync::Arc;

use actix_tls::connect::{
    ConnectError, ConnectInfo, Connection, ConnectorService, Resolver, ResolverService,
};
use actix_web::dev::Service;
use actix_web::http::Uri;
use base64::Engine;
use futures_util::future::LocalBoxFuture;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The longest answer head a proxy may send to `CONNECT`.
const MAX_HEAD: usize = 8 * 1024;

/// One proxy: where it listens, and its `Proxy-Authorization` when its URL has a user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyAddr {
    pub host: String,
    pub port: u16,
    authorization: Option<String>,
}

impl ProxyAddr {
    /// `http://[user:pass@]host[:port]` (a bare `host:port` is read as http).
    pub fn parse(value: &str) -> Option<ProxyAddr> {
        let value = value.trim();
        let with_scheme = if value.contains("://") { value.to_owned() } else { format!("http://{value}") };
        let url = url::Url::parse(&with_scheme).ok()?;
        if url.scheme() != "http" {
            return None;
        }
        let host = url.host_str()?.trim_start_matches('[').trim_end_matches(']').to_owned();
        let authorization = (!url.username().is_empty()).then(|| {
            let user = percent(url.username());
            let pass = percent(url.password().unwrap_or(""));
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pass}"))
        });
        Some(ProxyAddr { host, port: url.port().unwrap_or(80), authorization })
    }

    fn describe(&self) -> String {
        let auth = if self.authorization.is_some() { " (with credentials)" } else { "" };
        format!("{}:{}{auth}", self.host, self.port)
    }
}

/// Percent-decodes a URL's user or password (`+` stays a plus sign).
fn percent(s: &str) -> String {
    url::form_urlencoded::parse(format!("x={}", s.replace('+', "%2B")).as_bytes())
        .next()
        .map(|(_, v)| v.into_owned())
        .unwrap_or_default()
}

/// One `NO_PROXY` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Bypass {
    All,
    Domain(String),
    Net(ipnet::IpNet),
}

/// The proxy settings of the process.
#[derive(Debug, Default)]
pub struct Proxies {
    https: Option<ProxyAddr>,
    http: Option<ProxyAddr>,
    no_proxy: Vec<Bypass>,
}

impl Proxies {
    /// From the environment, lower-case names first, as curl reads them.
    pub fn from_env(var: impl Fn(&str) -> Option<String>) -> Proxies {
        let get =
            |lower: &str, upper: &str| var(lower).or_else(|| var(upper)).filter(|v| !v.trim().is_empty());
        let proxy = |lower: &str, upper: &str| {
            let value = get(lower, upper)?;
            let parsed = ProxyAddr::parse(&value);
            if parsed.is_none() {
                tracing::warn!(variable = upper, "not an http:// proxy URL; ignored");
            }
            parsed
        };
        Proxies {
            https: proxy("https_proxy", "HTTPS_PROXY"),
            http: proxy("http_proxy", "HTTP_PROXY"),
            no_proxy: get("no_proxy", "NO_PROXY").map(|v| parse_no_proxy(&v)).unwrap_or_default(),
        }
    }

    /// The proxy a connection to `uri` goes through, if any.
    pub fn for_uri(&self, uri: &Uri) -> Option<&ProxyAddr> {
        let proxy = match uri.scheme_str() {
            Some("https" | "wss") => self.https.as_ref(),
            _ => self.http.as_ref(),
        }?;
        let host = uri.host()?.trim_start_matches('[').trim_end_matches(']');
        (!self.bypassed(host)).then_some(proxy)
    }

    fn bypassed(&self, host: &str) -> bool {
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        let ip = host.parse::<IpAddr>().ok();
        self.no_proxy.iter().any(|rule| match rule {
            Bypass::All => true,
            Bypass::Domain(d) => {
                host == *d || host.strip_suffix(d.as_str()).is_some_and(|p| p.ends_with('.'))
            }
            Bypass::Net(net) => ip.is_some_and(|ip| net.contains(&ip)),
        })
    }

    pub fn describe_https(&self) -> Option<String> {
        self.https.as_ref().map(ProxyAddr::describe)
    }

    pub fn describe_http(&self) -> Option<String> {
        self.http.as_ref().map(ProxyAddr::describe)
    }

    pub fn describe_no_proxy(&self) -> String {
        if self.no_proxy.is_empty() {
            return "none".to_owned();
        }
        let parts: Vec<String> = self
            .no_proxy
            .iter()
            .map(|b| match b {
                Bypass::All => "*".to_owned(),
                Bypass::Domain(d) => d.clone(),
                Bypass::Net(n) => n.to_string(),
            })
            .collect();
        parts.join(",")
    }
}

fn parse_no_proxy(value: &str) -> Vec<Bypass> {
    value
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .map(|entry| {
            if entry == "*" {
                return Bypass::All;
            }
            if let Ok(net) = entry.parse::<ipnet::IpNet>() {
                return Bypass::Net(net);
            }
            let bare = entry.trim_start_matches('[');
            let host = match bare.split_once(']') {
                Some((ip, _)) => ip,
                None if bare.matches(':').count() == 1 => bare.split(':').next().unwrap_or(bare),
                None => bare,
            };
            match host.parse::<IpAddr>() {
                Ok(ip) => Bypass::Net(ipnet::IpNet::from(ip)),
                Err(_) => {
                    Bypass::Domain(host.trim_start_matches("*.").trim_start_matches('.').to_ascii_lowercase())
                }
            }
        })
        .collect()
}

/// awc's TCP connector: direct, or through the proxy's `CONNECT` tunnel.
#[derive(Clone)]
pub struct TunnelConnector {
    direct: ConnectorService,
    /// Vets a proxied target's name first (a custom resolver refuses some addresses).
    check: Option<ResolverService>,
    proxies: Arc<Proxies>,
}

impl TunnelConnector {
    pub fn new(resolver: Resolver, check: bool, proxies: Arc<Proxies>) -> TunnelConnector {
        let direct = actix_tls::connect::Connector::new(resolver.clone()).service();
        TunnelConnector { direct, check: check.then(|| resolver.service()), proxies }
    }
}

impl Service<ConnectInfo<Uri>> for TunnelConnector {
    type Response = Connection<Uri, TcpStream>;
    type Error = ConnectError;
    type Future = LocalBoxFuture<'static, Result<Self::Response, Self::Error>>;

    actix_web::dev::always_ready!();

    fn call(&self, req: ConnectInfo<Uri>) -> Self::Future {
        let Some(proxy) = self.proxies.for_uri(req.request()).cloned() else {
            return Box::pin(self.direct.call(req));
        };
        let check = self.check.clone();
        Box::pin(async move {
            if let Some(check) = check {
                check.call(ConnectInfo::new(req.request().clone())).await?;
            }
            let stream = tunnel(&proxy, req.hostname(), req.port()).await?;
            Ok(Connection::new(req.request().clone(), stream))
        })
    }
}

/// Connects to the proxy and asks it for a tunnel to `host:port`.
pub async fn tunnel(proxy: &ProxyAddr, host: &str, port: u16) -> Result<TcpStream, ConnectError> {
    let mut stream = TcpStream::connect((proxy.host.as_str(), proxy.port)).await.map_err(ConnectError::Io)?;
    let _ = stream.set_nodelay(true);
    let authority = if host.contains(':') { format!("[{host}]:{port}") } else { format!("{host}:{port}") };
    let mut head = format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n");
    if let Some(auth) = &proxy.authorization {
        head.push_str(&format!("Proxy-Authorization: Basic {auth}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).await.map_err(ConnectError::Io)?;
    let answer = read_head(&mut stream).await?;
    let status = answer.split_whitespace().nth(1).unwrap_or("");
    if status != "200" {
        let line = answer.lines().next().unwrap_or("").to_owned();
        return Err(refused(format!("the proxy {} refused CONNECT {authority}: {line}", proxy.describe())));
    }
    Ok(stream)
}

/// The proxy's answer head. The target speaks only after the client, so nothing
/// follows the head before we write.
async fn read_head(stream: &mut TcpStream) -> Result<String, ConnectError> {
    let mut buf = Vec::with_capacity(256);
    let mut chunk = [0u8; 512];
    loop {
        let n = stream.read(&mut chunk).await.map_err(ConnectError::Io)?;
        if n == 0 {
            return Err(refused("the proxy closed the connection during CONNECT".to_owned()));
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            if end + 4 != buf.len() {
                return Err(refused("the proxy sent data after its CONNECT answer".to_owned()));
            }
            return Ok(String::from_utf8_lossy(&buf).into_owned());
        }
        if buf.len() > MAX_HEAD {
            return Err(refused("the proxy's CONNECT answer is too long".to_owned()));
        }
    }
}

fn refused(message: String) -> ConnectError {
    ConnectError::Io(std::io::Error::other(message))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn proxies(pairs: &[(&str, &str)]) -> Proxies {
        let pairs: Vec<(String, String)> =
            pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        Proxies::from_env(|name| pairs.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()))
    }

    fn via(p: &Proxies, uri: &str) -> Option<String> {
        p.for_uri(&uri.parse().unwrap()).map(|a| format!("{}:{}", a.host, a.port))
    }

    #[test]
    fn scheme_picks_the_proxy_and_no_proxy_bypasses() {
        let p = proxies(&[
            ("HTTPS_PROXY", "http://user:p%40s+s@10.0.0.1:3128"),
            ("http_proxy", "proxy.local:8080"),
            ("NO_PROXY", "internal.example, .corp.example ,192.168.0.0/16,127.0.0.1:9000,[::1]"),
        ]);
        assert_eq!(via(&p, "https://api.openai.com/v1"), Some("10.0.0.1:3128".into()));
        assert_eq!(via(&p, "http://vllm:8000/v1"), Some("proxy.local:8080".into()));
        for direct in [
            "https://internal.example/x",
            "https://a.internal.example/x",
            "https://b.corp.example/x",
            "https://192.168.4.5/x",
            "https://127.0.0.1/x",
            "http://[::1]:80/x",
        ] {
            assert_eq!(via(&p, direct), None, "{direct}");
        }
        assert_eq!(via(&p, "https://notinternal.example/x"), Some("10.0.0.1:3128".into()));
        let auth = p.https.as_ref().unwrap().authorization.clone().unwrap();
        assert_eq!(base64::engine::general_purpose::STANDARD.decode(auth).unwrap(), b"user:p@s+s");
    }

    #[test]
    fn star_and_nothing() {
        assert_eq!(via(&proxies(&[("HTTPS_PROXY", "http://p:1"), ("no_proxy", "*")]), "https://x/"), None);
        assert_eq!(via(&proxies(&[]), "https://x/"), None);
        assert_eq!(via(&proxies(&[("HTTPS_PROXY", "socks5://p:1")]), "https://x/"), None);
    }
}
