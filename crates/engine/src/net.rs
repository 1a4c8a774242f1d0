//! Outbound HTTP as the operator's machine is set up, for every client the service
//! has (provider upstreams, webhooks, the payment processor), so that a company's own
//! certificate authority or egress proxy works the same for all three:
//!
//! - Trust: the bundled Mozilla roots, plus the system trust store, plus the
//!   certificates named by `SSL_CERT_FILE` / `SSL_CERT_DIR` (read by
//!   `rustls-native-certs`, which takes them instead of the system store when set).
//! - Proxies: `HTTPS_PROXY` for `https://` targets, `HTTP_PROXY` for `http://` ones
//!   (lower-case forms first), both reached with an HTTP `CONNECT` tunnel, so the
//!   proxy never sees a request or a key in clear; `NO_PROXY` lists the hosts that are
//!   connected to directly (see [`proxy`]).

pub mod proxy;

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use actix_tls::connect::Resolver;

use proxy::{Proxies, TunnelConnector};

/// How one client connects.
pub struct Options {
    /// TCP connect (and proxy tunnel) timeout.
    pub connect_timeout: Duration,
    /// How long an idle pooled connection is kept.
    pub keep_alive: Duration,
    /// Whole-request timeout; `None` when the caller times the request itself.
    pub timeout: Option<Duration>,
    /// The resolver of direct connections. A custom one (the webhooks' checked
    /// resolver) also vets a proxied target's name before the tunnel is asked for.
    pub resolver: Option<Resolver>,
}

impl Options {
    pub fn new(connect_timeout: Duration) -> Options {
        Options { connect_timeout, keep_alive: Duration::from_secs(30), timeout: None, resolver: None }
    }
}

/// A client with the shared trust and proxy settings. `awc::Client` is not `Send`:
/// build one per thread.
pub fn client(options: &Options) -> awc::Client {
    let settings = settings();
    let tcp = TunnelConnector::new(
        options.resolver.clone().unwrap_or_default(),
        options.resolver.is_some(),
        Arc::clone(&settings.proxies),
    );
    let mut connector = awc::Connector::new()
        .connector(tcp)
        .timeout(options.connect_timeout)
        .conn_keep_alive(options.keep_alive)
        .limit(0);
    if let Some(tls) = &settings.tls {
        connector = connector.rustls_0_23(Arc::clone(tls));
    }
    let builder = awc::Client::builder().connector(connector).disable_redirects().no_default_headers();
    match options.timeout {
        Some(t) => builder.timeout(t).finish(),
        None => builder.disable_timeout().finish(),
    }
}

/// Writes the trust and proxy settings in force to the log (once, at start).
pub fn log_settings() {
    let s = settings();
    tracing::info!(
        trust = %s.trust,
        https_proxy = s.proxies.describe_https().as_deref().unwrap_or("none"),
        http_proxy = s.proxies.describe_http().as_deref().unwrap_or("none"),
        no_proxy = %s.proxies.describe_no_proxy(),
        "outbound connections"
    );
}

struct Settings {
    tls: Option<Arc<rustls::ClientConfig>>,
    trust: String,
    proxies: Arc<Proxies>,
}

/// Read once per process: the environment does not change under a running service.
fn settings() -> &'static Settings {
    static SETTINGS: OnceLock<Settings> = OnceLock::new();
    SETTINGS.get_or_init(|| {
        let (roots, trust) = roots();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map(|b| b.with_root_certificates(roots).with_no_client_auth());
        let tls = match tls {
            Ok(mut tls) => {
                tls.alpn_protocols = vec![b"http/1.1".to_vec()];
                Some(Arc::new(tls))
            }
            Err(e) => {
                tracing::error!(error = %e, "TLS setup failed; HTTPS connections will fail");
                None
            }
        };
        let env = |name: &str| std::env::var(name).ok();
        Settings { tls, trust, proxies: Arc::new(Proxies::from_env(env)) }
    })
}

/// The bundled roots plus the native ones; a summary for the log.
fn roots() -> (rustls::RootCertStore, String) {
    let mut roots = rustls::RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.to_vec() };
    let bundled = roots.len();
    let native = rustls_native_certs::load_native_certs();
    for e in &native.errors {
        tracing::warn!(error = %e, "could not read part of the system trust store");
    }
    let (added, ignored) = roots.add_parsable_certificates(native.certs);
    if ignored > 0 {
        tracing::warn!(ignored, "certificates of the system trust store could not be parsed");
    }
    let source = match (std::env::var("SSL_CERT_FILE"), std::env::var("SSL_CERT_DIR")) {
        (Ok(f), Ok(d)) => format!("SSL_CERT_FILE={f}, SSL_CERT_DIR={d}"),
        (Ok(f), Err(_)) => format!("SSL_CERT_FILE={f}"),
        (Err(_), Ok(d)) => format!("SSL_CERT_DIR={d}"),
        (Err(_), Err(_)) => "the system store".to_owned(),
    };
    (roots, format!("{bundled} bundled roots + {added} from {source}"))
}
