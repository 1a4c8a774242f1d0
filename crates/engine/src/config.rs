//! Configuration: an optional `spendgate.toml`, overridden by `SPENDGATE_<NAME>`
//! environment variables, overridden by command-line flags. Everything is validated
//! at start; a bad value stops the process with a message naming the setting and
//! where it came from.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::plans::Plan;

/// The validated configuration of one process.
#[derive(Debug, Clone)]
pub struct Config {
    pub database_url: String,
    pub control_addr: SocketAddr,
    pub proxy_addr: SocketAddr,
    /// TLS on the control plane's listener (`control_tls_cert` / `control_tls_key`).
    pub control_tls: Option<TlsFiles>,
    /// TLS on the proxy's listener (`proxy_tls_cert` / `proxy_tls_key`).
    pub proxy_tls: Option<TlsFiles>,
    pub upstream_openai: String,
    pub upstream_anthropic: String,
    pub upstream_gemini: String,
    pub processor_url: String,
    pub internal_secret: Option<String>,
    pub cron_secret: Option<String>,
    /// Encrypts provider credentials and processor keys at rest (AES-256-GCM under its
    /// SHA-256). On SQLite an unset one is generated at start (`crate::secret_key`);
    /// while it is unset, credential endpoints and processor connections are refused.
    pub secret_key: Option<String>,
    /// How often the service syncs processor revenue itself; `None` = never.
    pub revenue_sync_interval: Option<Duration>,
    pub dev: bool,
    pub default_plan: Plan,
    pub open_signup: bool,
    /// Requests per minute per client IP on the proxy (0 = off).
    pub rate_limit_ip_per_minute: u32,
    /// Requests per minute per API key (0 = off).
    pub rate_limit_key_per_minute: u32,
    /// Sign-in attempts (login, signup) per minute per client IP (0 = off).
    pub rate_limit_auth_ip_per_minute: u32,
    /// Sign-in attempts (login, signup) per minute per email (0 = off).
    pub rate_limit_auth_email_per_minute: u32,
    /// Proxies whose `X-Forwarded-For` decides the client address (per-IP limits).
    pub trusted_proxies: crate::client_ip::TrustedProxies,
    pub db_max_connections: usize,
    /// HTTP worker threads per listener.
    pub workers: usize,
    /// Actor arbiters (threads) the budget actors are spread over.
    pub arbiters: usize,
    /// How long a reservation may wait for its budget actors (and a proxied call for
    /// room among the unsettled calls) before it is answered 503.
    pub admission_deadline: Duration,
    /// Reservations that may wait for one budget entity before new ones are answered 503.
    pub max_waiting_reservations: usize,
    /// Proxied calls admitted and not yet recorded (their cost event not committed) at
    /// once; further calls wait in admission, so memory stays bounded when the proxy
    /// outpaces the accounting writer.
    pub max_unsettled_calls: usize,
    /// The fewest output tokens worth forwarding a call clamped by an `exactCeiling`
    /// budget for; with less room the call is refused.
    pub min_clamped_output_tokens: u32,
    /// Pending actions one organization may hold (each is a live actor with a timer).
    pub max_pending_actions: i64,
    /// Tools (tool costs) one organization may hold.
    pub max_tool_costs: i64,
    /// Raw cost events older than this many days are deleted in the background (the
    /// rollups stay); `None` keeps them forever.
    pub cost_event_retention_days: Option<i64>,
    pub actor_idle_timeout: Duration,
    pub actor_restart_backoff: Duration,
    pub session_ttl: Duration,
    pub pricing_file: Option<PathBuf>,
    pub build_sha: String,
    /// Longest wait for upstream response headers, and between two chunks of a stream.
    pub upstream_timeout: Duration,
    pub upstream_connect_timeout: Duration,
    /// Reservations are also held in the database so that several instances on one
    /// PostgreSQL never together pass a strict budget (default: on for PostgreSQL).
    pub shared_budgets: bool,
    /// With shared budgets, each instance admits calls against a slice of a budget's
    /// room it leases from the database (default: on); off, every call is arbitrated
    /// by the database alone.
    pub budget_leases: bool,
    /// A lease unused this long returns its free room to its budget.
    pub budget_lease_idle: Duration,
    /// How long the accounting writer waits for more proxied calls before committing
    /// one (0 = never waits). Acknowledged ingest never waits: it commits at once.
    pub accounting_linger: Duration,
    /// How often committed cost events are folded into the rollups (see `db::fold`);
    /// every rollup read folds what is pending first anyway.
    pub rollup_fold_interval: Duration,
    /// A proxied call's answer ends only once its cost event is committed.
    pub durable_answers: bool,
    /// Budget actors start on the proxy worker thread that first needs them (no thread
    /// hop for that worker's reservations) instead of on the actor arbiters.
    pub budget_actors_on_workers: bool,
    /// Governed (proxied) requests per calendar month, per tier; `None` = unlimited.
    /// Free hard-blocks at its cap; paid tiers are alerted once per month.
    pub governed_request_caps: [Option<i64>; 4],
    /// Where a blocked Free organization is told to upgrade, and to self-host.
    pub upgrade_url: Option<String>,
    pub self_host_url: Option<String>,
    /// Webhook delivery: retry schedule, timeouts, leases and retention.
    pub webhooks: WebhookSettings,
    /// The control plane's public base URL (thin webhook payloads link to it).
    pub public_url: Option<String>,
    /// The proxy's public base URL, as agents reach it (the dashboard's first-call
    /// snippets show it); `None`: `http://` and the address the proxy listens on.
    pub proxy_public_url: Option<String>,
    /// Operator-defined upstreams (see `crate::upstreams`).
    pub upstreams: Vec<crate::upstreams::NamedUpstream>,
    /// OpenTelemetry export (see `crate::telemetry`); off without an endpoint.
    pub otel: OtelSettings,
}

/// OpenTelemetry export: where, what, and the bounds of the span queue. The endpoint
/// is spendgate's `otel_endpoint`, else the standard `OTEL_EXPORTER_OTLP_ENDPOINT`;
/// the batch bounds come from the standard `OTEL_BSP_*` variables. The exporter itself
/// reads `OTEL_EXPORTER_OTLP_HEADERS` and `OTEL_EXPORTER_OTLP_TIMEOUT`, and the
/// resource `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES`.
#[derive(Debug, Clone)]
pub struct OtelSettings {
    /// OTLP/HTTP base URL (`/v1/traces` and `/v1/metrics` are appended); `None`: off.
    pub endpoint: Option<String>,
    /// Export prompt and completion bodies on the spans (off: never).
    pub capture_content: bool,
    /// Spans waiting for export; past it new spans are dropped and counted.
    pub queue_size: usize,
    /// Spans per export request.
    pub batch_size: usize,
    /// Longest a span waits in the queue before its batch is sent.
    pub batch_delay: Duration,
}

/// How webhook endpoint actors deliver (see `crate::webhooks`).
#[derive(Debug, Clone)]
pub struct WebhookSettings {
    /// Delay after the first failed attempt; doubles per attempt (with jitter).
    pub retry_base: Duration,
    /// The longest delay between two attempts.
    pub retry_max: Duration,
    /// Attempts before a delivery is marked `failed`.
    pub max_attempts: u32,
    /// Per-attempt timeout.
    pub timeout: Duration,
    /// How often an endpoint actor looks for due deliveries without being woken.
    pub poll: Duration,
    /// An instance's claim on an endpoint lasts this long unless renewed.
    pub lease: Duration,
    /// Delivered (and finally failed) deliveries and their outbox rows are kept this long.
    pub retention: Duration,
}

/// One setting's raw value and where it came from, for error messages.
#[derive(Debug, Clone)]
struct Raw {
    value: String,
    origin: String,
}

/// A listener's certificate chain and private key, PEM files read at start and again
/// on SIGHUP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// Command-line overrides (the highest-priority source).
#[derive(Debug, Default, Clone)]
pub struct Overrides {
    pub config_file: Option<PathBuf>,
    pub values: BTreeMap<String, String>,
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

pub const DEFAULT_DATABASE_URL: &str = "sqlite://./spendgate.db";

/// The setting names, as used in the file (lower case) and, upper-cased with a
/// `SPENDGATE_` prefix, in the environment.
pub const SETTINGS: &[(&str, &str)] = &[
    ("database_url", "sqlite://PATH (default ./spendgate.db) or postgres://…"),
    ("control_addr", "control-plane listen address (default 127.0.0.1:3000)"),
    ("proxy_addr", "proxy listen address (default 127.0.0.1:8787)"),
    ("proxy_tls_cert", "PEM certificate chain: the proxy serves https (with proxy_tls_key; reloaded on SIGHUP; default plain http)"),
    ("proxy_tls_key", "PEM private key of proxy_tls_cert (PKCS#8, PKCS#1 or SEC1)"),
    ("control_tls_cert", "PEM certificate chain: the control plane serves https (with control_tls_key; reloaded on SIGHUP; default plain http)"),
    ("control_tls_key", "PEM private key of control_tls_cert"),
    ("upstream_openai", "OpenAI base URL (default https://api.openai.com)"),
    ("upstream_anthropic", "Anthropic base URL (default https://api.anthropic.com)"),
    ("upstream_gemini", "Gemini base URL (default https://generativelanguage.googleapis.com)"),
    ("processor_url", "payment-processor API base (default https://api.stripe.com)"),
    ("internal_secret", "shared secret of the /internal routes"),
    ("cron_secret", "bearer secret of scheduler calls"),
    (
        "secret_key",
        "secret (at least 32 characters) that encrypts provider credentials and payment-processor keys at rest; generated beside an SQLite database when unset, required with PostgreSQL",
    ),
    ("revenue_sync_interval_secs", "scheduled processor revenue sync interval, 0 = off (default 3600)"),
    ("dev", "1 = local development mode"),
    (
        "default_plan",
        "tier of new organizations: free, pro, scale, enterprise (default enterprise: no limits, for self-hosting)",
    ),
    ("open_signup", "1 = POST /api/auth/signup stays open after the first user"),
    ("rate_limit_ip_per_minute", "proxy requests per minute per client IP, 0 = off (default 6000)"),
    ("rate_limit_key_per_minute", "requests per minute per API key, 0 = off (default 3000)"),
    (
        "rate_limit_auth_ip_per_minute",
        "sign-in attempts (login, signup) per minute per client IP, 0 = off (default 30)",
    ),
    ("rate_limit_auth_email_per_minute", "sign-in attempts per minute per email, 0 = off (default 10)"),
    (
        "trusted_proxies",
        "comma-separated CIDRs of load balancers whose X-Forwarded-For names the client (default none)",
    ),
    ("db_max_connections", "database pool size (default 16)"),
    ("workers", "HTTP worker threads per listener (default: number of cores)"),
    ("arbiters", "threads the budget actors are spread over (default: number of cores)"),
    (
        "admission_deadline_ms",
        "a reservation (or a proxied call waiting for room) is answered 503 after waiting this long (default 5000)",
    ),
    ("max_waiting_reservations", "reservations waiting for one budget before 503 (default 10000)"),
    ("max_pending_actions", "pending actions per organization; more are 409 limit_exceeded (default 10000)"),
    ("max_tool_costs", "tools per organization; a discovery past it is 409 limit_exceeded (default 10000)"),
    (
        "cost_event_retention_days",
        "delete raw cost events older than this many days, at least 91; rollups stay (default: keep forever)",
    ),
    (
        "max_unsettled_calls",
        "proxied calls admitted and not yet recorded; more wait in admission (default 2048)",
    ),
    (
        "min_clamped_output_tokens",
        "fewest output tokens an exactCeiling budget clamps a call to before refusing it (default 16)",
    ),
    ("actor_idle_timeout_secs", "stop budget actors idle this long (default 600)"),
    ("actor_restart_backoff_ms", "first restart backoff of a failed actor (default 100)"),
    ("session_ttl_hours", "dashboard session lifetime (default 168)"),
    ("pricing_file", "JSON file of model prices that overrides the built-in table"),
    (
        "upstreams",
        "operator-defined upstreams: name=NAME,format=openai|anthropic|gemini,base_url=URL[,key_header=H] entries separated by ';' (file: [upstreams.NAME] tables)",
    ),
    (
        "upstream_timeout_secs",
        "longest wait for upstream response headers and between stream chunks (default 300)",
    ),
    ("upstream_connect_timeout_ms", "upstream connect timeout (default 10000)"),
    (
        "shared_budgets",
        "1 = hold reservations in the database for several instances (default: 1 on PostgreSQL)",
    ),
    (
        "budget_leases",
        "1 = with shared budgets, admit calls against a leased slice of each budget's room; 0 = a database round trip per call (default 1)",
    ),
    ("budget_lease_idle_ms", "a budget lease unused this long returns its free room (default 1000)"),
    (
        "accounting_linger_ms",
        "wait this long to batch proxied calls' cost events into one commit; 0 = off (default 2)",
    ),
    (
        "rollup_fold_ms",
        "fold committed cost events into the rollups this often (default 250; reads fold first anyway)",
    ),
    (
        "durable_answers",
        "1 = a proxied call's answer ends only once its cost event is committed (default 0)",
    ),
    (
        "budget_actors_on_workers",
        "1 = budget actors live on the proxy worker that first needs them; 0 = on the arbiters (default 1)",
    ),
    (
        "governed_requests_free",
        "proxied requests per month on the Free tier, hard cap; 0 = unlimited (default 10000)",
    ),
    (
        "governed_requests_pro",
        "proxied requests per month on Pro before an alert; 0 = unlimited (default 1000000)",
    ),
    (
        "governed_requests_scale",
        "proxied requests per month on Scale before an alert; 0 = unlimited (default 10000000)",
    ),
    ("governed_requests_enterprise", "proxied requests per month on Enterprise; 0 = unlimited (default 0)"),
    ("upgrade_url", "upgrade link shown when the Free cap blocks (default none)"),
    ("self_host_url", "self-hosting link shown when the Free cap blocks (default none)"),
    ("public_url", "public base URL of the control plane, for links in webhook payloads (default http://CONTROL_ADDR)"),
    ("proxy_public_url", "public base URL of the proxy, shown in the dashboard's SDK snippets and the OpenAPI document (default http://PROXY_ADDR)"),
    ("webhook_retry_base_ms", "webhook retry delay after the first failure, doubling per attempt (default 30000)"),
    ("webhook_retry_max_ms", "longest webhook retry delay (default 21600000 = 6 h)"),
    ("webhook_max_attempts", "attempts before a webhook delivery is marked failed (default 20, about 3 days)"),
    ("webhook_timeout_ms", "timeout of one webhook attempt (default 10000)"),
    ("webhook_poll_ms", "how often an endpoint looks for due deliveries when not woken (default 1000)"),
    ("webhook_lease_ms", "an instance's claim on delivering an endpoint's events, renewed while alive (default 15000)"),
    ("webhook_retention_hours", "finished deliveries and their outbox rows are pruned after this (default 72)"),
    (
        "otel_endpoint",
        "OTLP/HTTP base URL to export traces and metrics to (default: OTEL_EXPORTER_OTLP_ENDPOINT, else off)",
    ),
    (
        "otel_capture_content",
        "1 = exported spans carry the prompt and completion bodies (default 0: never)",
    ),
];

impl Config {
    /// Loads file → environment → overrides, then validates.
    pub fn load(overrides: &Overrides) -> Result<Self, ConfigError> {
        let env: BTreeMap<String, String> = std::env::vars().collect();
        Self::load_from(overrides, &env)
    }

    pub fn load_from(overrides: &Overrides, env: &BTreeMap<String, String>) -> Result<Self, ConfigError> {
        let mut raw: BTreeMap<String, Raw> = BTreeMap::new();

        let explicit =
            overrides.config_file.clone().or_else(|| env.get("SPENDGATE_CONFIG").map(PathBuf::from));
        let file = explicit.clone().unwrap_or_else(|| PathBuf::from("spendgate.toml"));
        if file.exists() {
            read_file(&file, &mut raw)?;
        } else if let Some(path) = explicit {
            return Err(ConfigError(format!("config file {} does not exist", path.display())));
        }

        for (name, _) in SETTINGS {
            let var = format!("SPENDGATE_{}", name.to_uppercase());
            if let Some(v) = env.get(&var) {
                raw.insert(
                    (*name).to_owned(),
                    Raw { value: v.clone(), origin: format!("environment {var}") },
                );
            }
        }
        for (name, v) in &overrides.values {
            raw.insert(
                name.clone(),
                Raw { value: v.clone(), origin: format!("flag --{}", name.replace('_', "-")) },
            );
        }

        let r = Reader { raw };
        let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2);
        let database_url = r.string("database_url", DEFAULT_DATABASE_URL);
        if crate::db::backend_of(&database_url).is_none() {
            return Err(r.bad("database_url", "sqlite://PATH or postgres://USER@HOST/DB"));
        }
        let dev = r.flag("dev")?;
        let database_url_for_default = database_url.clone();
        let config = Config {
            database_url,
            control_addr: r.addr("control_addr", "127.0.0.1:3000")?,
            proxy_addr: r.addr("proxy_addr", "127.0.0.1:8787")?,
            control_tls: tls_files(&r, "control")?,
            proxy_tls: tls_files(&r, "proxy")?,
            upstream_openai: r.url("upstream_openai", "https://api.openai.com")?,
            upstream_anthropic: r.url("upstream_anthropic", "https://api.anthropic.com")?,
            upstream_gemini: r.url("upstream_gemini", "https://generativelanguage.googleapis.com")?,
            processor_url: r.url("processor_url", "https://api.stripe.com")?,
            internal_secret: r.optional("internal_secret"),
            cron_secret: r.optional("cron_secret"),
            secret_key: match r.optional("secret_key") {
                Some(v) if v.chars().count() < 32 => {
                    return Err(r.bad("secret_key", "at least 32 characters"))
                }
                v => v,
            },
            revenue_sync_interval: match r.number::<u64>("revenue_sync_interval_secs", 3600)? {
                0 => None,
                secs => Some(Duration::from_secs(secs)),
            },
            dev,
            // A self-hosted install limits nobody; an operator who runs spendgate for
            // others sets `default_plan` (and `spendgate org set-plan` per organization).
            default_plan: match r.optional("default_plan") {
                None => Plan::Enterprise,
                Some(v) => {
                    v.parse().map_err(|_| r.bad("default_plan", "one of free, pro, scale, enterprise"))?
                }
            },
            open_signup: r.flag("open_signup")?,
            rate_limit_ip_per_minute: r.number("rate_limit_ip_per_minute", 6000)?,
            rate_limit_key_per_minute: r.number("rate_limit_key_per_minute", 3000)?,
            rate_limit_auth_ip_per_minute: r.number("rate_limit_auth_ip_per_minute", 30)?,
            rate_limit_auth_email_per_minute: r.number("rate_limit_auth_email_per_minute", 10)?,
            trusted_proxies: crate::client_ip::TrustedProxies::parse(&r.string("trusted_proxies", ""))
                .map_err(|e| r.bad("trusted_proxies", &format!("comma-separated CIDRs ({e})")))?,
            db_max_connections: r.positive("db_max_connections", 16)?,
            workers: r.positive("workers", cores)?,
            arbiters: r.positive("arbiters", cores)?,
            admission_deadline: Duration::from_millis(r.number("admission_deadline_ms", 5_000)?),
            max_waiting_reservations: r.positive("max_waiting_reservations", 10_000)?,
            max_unsettled_calls: r.positive("max_unsettled_calls", 2_048)?,
            min_clamped_output_tokens: r.positive("min_clamped_output_tokens", 16)?,
            max_pending_actions: r.positive("max_pending_actions", 10_000)?,
            max_tool_costs: r.positive("max_tool_costs", 10_000)?,
            cost_event_retention_days: match r.optional("cost_event_retention_days") {
                None => None,
                Some(_) => {
                    let days: i64 = r.number("cost_event_retention_days", 0)?;
                    if days < crate::retention::MIN_DAYS {
                        return Err(r.bad("cost_event_retention_days", "a whole number of days, at least 91"));
                    }
                    Some(days)
                }
            },
            actor_idle_timeout: Duration::from_secs(r.positive("actor_idle_timeout_secs", 600)?),
            actor_restart_backoff: Duration::from_millis(r.positive("actor_restart_backoff_ms", 100)?),
            session_ttl: Duration::from_secs(3600 * r.positive::<u64>("session_ttl_hours", 168)?),
            pricing_file: r.optional("pricing_file").map(PathBuf::from),
            build_sha: option_env!("SPENDGATE_BUILD_SHA").unwrap_or("dev").to_owned(),
            upstream_timeout: Duration::from_secs(r.positive("upstream_timeout_secs", 300)?),
            upstream_connect_timeout: Duration::from_millis(
                r.positive("upstream_connect_timeout_ms", 10_000)?,
            ),
            shared_budgets: match r.optional("shared_budgets") {
                None => crate::db::backend_of(&database_url_for_default)
                    .is_some_and(|b| b == crate::db::Backend::Postgres),
                Some(_) => r.flag("shared_budgets")?,
            },
            budget_leases: match r.optional("budget_leases") {
                None => true,
                Some(_) => r.flag("budget_leases")?,
            },
            budget_lease_idle: Duration::from_millis(r.positive("budget_lease_idle_ms", 1_000)?),
            accounting_linger: Duration::from_millis(r.number("accounting_linger_ms", 2)?),
            rollup_fold_interval: Duration::from_millis(r.positive("rollup_fold_ms", 250)?),
            durable_answers: match r.optional("durable_answers") {
                None => false,
                Some(_) => r.flag("durable_answers")?,
            },
            budget_actors_on_workers: match r.optional("budget_actors_on_workers") {
                None => true,
                Some(_) => r.flag("budget_actors_on_workers")?,
            },
            governed_request_caps: [
                cap(r.number("governed_requests_free", 10_000i64)?),
                cap(r.number("governed_requests_pro", 1_000_000i64)?),
                cap(r.number("governed_requests_scale", 10_000_000i64)?),
                cap(r.number("governed_requests_enterprise", 0i64)?),
            ],
            upgrade_url: r.optional("upgrade_url"),
            self_host_url: r.optional("self_host_url"),
            webhooks: WebhookSettings {
                retry_base: Duration::from_millis(r.positive("webhook_retry_base_ms", 30_000)?),
                retry_max: Duration::from_millis(r.positive("webhook_retry_max_ms", 21_600_000)?),
                max_attempts: r.positive("webhook_max_attempts", 20)?,
                timeout: Duration::from_millis(r.positive("webhook_timeout_ms", 10_000)?),
                poll: Duration::from_millis(r.positive("webhook_poll_ms", 1_000)?),
                lease: Duration::from_millis(r.positive("webhook_lease_ms", 15_000)?),
                retention: Duration::from_secs(3600 * r.positive::<u64>("webhook_retention_hours", 72)?),
            },
            public_url: match r.optional("public_url") {
                None => None,
                Some(_) => Some(r.url("public_url", "")?),
            },
            proxy_public_url: match r.optional("proxy_public_url") {
                None => None,
                Some(_) => Some(r.url("proxy_public_url", "")?),
            },
            upstreams: crate::upstreams::parse(&r.string("upstreams", ""))
                .map_err(|e| r.bad("upstreams", &format!("valid upstream entries ({e})")))?,
            otel: otel_settings(&r, env)?,
        };
        if let Some(path) = &config.pricing_file {
            if !path.exists() {
                return Err(r.bad("pricing_file", "an existing JSON file"));
            }
        }
        Ok(config)
    }
}

/// A surface's `{surface}_tls_cert` and `{surface}_tls_key`: both or neither, each an
/// existing file (their contents are checked when the listener is bound).
fn tls_files(r: &Reader, surface: &str) -> Result<Option<TlsFiles>, ConfigError> {
    let (cert_name, key_name) = (format!("{surface}_tls_cert"), format!("{surface}_tls_key"));
    let existing = |name: &str, value: String| {
        let path = PathBuf::from(value);
        if path.is_file() {
            Ok(path)
        } else {
            Err(r.bad(name, "an existing PEM file"))
        }
    };
    match (r.optional(&cert_name), r.optional(&key_name)) {
        (None, None) => Ok(None),
        (Some(cert), Some(key)) => {
            Ok(Some(TlsFiles { cert: existing(&cert_name, cert)?, key: existing(&key_name, key)? }))
        }
        (Some(_), None) => {
            Err(r.bad(&key_name, &format!("a PEM private key file, since {cert_name} is set")))
        }
        (None, Some(_)) => {
            Err(r.bad(&cert_name, &format!("a PEM certificate file, since {key_name} is set")))
        }
    }
}

/// The OpenTelemetry settings: spendgate's own, then the standard variables.
fn otel_settings(r: &Reader, env: &BTreeMap<String, String>) -> Result<OtelSettings, ConfigError> {
    let endpoint = match r.optional("otel_endpoint") {
        Some(_) => Some(r.url("otel_endpoint", "")?),
        None => match env.get("OTEL_EXPORTER_OTLP_ENDPOINT").map(|v| v.trim()).filter(|v| !v.is_empty()) {
            None => None,
            Some(v) => match url::Url::parse(v) {
                Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => {
                    Some(v.trim_end_matches('/').to_owned())
                }
                _ => {
                    return Err(ConfigError(format!(
                        "invalid OTEL_EXPORTER_OTLP_ENDPOINT: expected an http(s) URL, got {v:?}"
                    )))
                }
            },
        },
    };
    // The exporter's client is built without TLS (see Cargo.toml): an https endpoint
    // would fail every export, so it is refused here, where the operator sees it.
    if endpoint.as_deref().is_some_and(|e| e.starts_with("https:")) {
        return Err(ConfigError(
            "OpenTelemetry export speaks plain HTTP (OTLP/HTTP without TLS): point otel_endpoint or OTEL_EXPORTER_OTLP_ENDPOINT at an http:// Collector beside spendgate, which can forward over TLS".to_owned(),
        ));
    }
    let standard = |name: &str, default: u64| -> Result<u64, ConfigError> {
        match env.get(name).map(|v| v.trim()).filter(|v| !v.is_empty()) {
            None => Ok(default),
            Some(v) => match v.parse::<u64>() {
                Ok(n) if n > 0 => Ok(n),
                _ => Err(ConfigError(format!("invalid {name}: expected a positive integer, got {v:?}"))),
            },
        }
    };
    let queue_size = usize::try_from(standard("OTEL_BSP_MAX_QUEUE_SIZE", 2048)?).unwrap_or(usize::MAX);
    let batch_size = usize::try_from(standard("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512)?).unwrap_or(usize::MAX);
    Ok(OtelSettings {
        endpoint,
        capture_content: r.flag("otel_capture_content")?,
        queue_size,
        batch_size: batch_size.min(queue_size),
        batch_delay: Duration::from_millis(standard("OTEL_BSP_SCHEDULE_DELAY", 5000)?),
    })
}

/// A cap setting: 0 (or less) means unlimited.
fn cap(value: i64) -> Option<i64> {
    (value > 0).then_some(value)
}

impl Config {
    /// The upstream names a stored credential or a price may be keyed on: the three
    /// built-in ones, then the operator's.
    pub fn configured_upstream_names(&self) -> Vec<&str> {
        ["openai", "anthropic", "gemini"]
            .into_iter()
            // An operator-defined upstream of a cloud's name (configured before the
            // clouds were built in) keeps the name, and its plain-key credential.
            .chain(crate::cloud_credentials::CLOUDS.into_iter().filter(|c| self.upstream(c).is_none()))
            .chain(self.upstreams.iter().map(|u| u.name.as_str()))
            .collect()
    }

    /// The operator-defined upstreams' names and wire formats, which the pricing file
    /// may key prices on.
    pub fn named_formats(&self) -> Vec<(&str, spendgate_llm::pricing::Provider)> {
        self.upstreams.iter().map(|u| (u.name.as_str(), u.format)).collect()
    }

    /// The operator-defined upstream of that name.
    pub fn upstream(&self, name: &str) -> Option<&crate::upstreams::NamedUpstream> {
        self.upstreams.iter().find(|u| u.name == name)
    }

    /// The governed-request cap of a tier per calendar month.
    pub fn governed_request_cap(&self, plan: Plan) -> Option<i64> {
        let index = match plan {
            Plan::Free => 0,
            Plan::Pro => 1,
            Plan::Scale => 2,
            Plan::Enterprise => 3,
        };
        self.governed_request_caps[index]
    }
}

fn read_file(path: &Path, raw: &mut BTreeMap<String, Raw>) -> Result<(), ConfigError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| ConfigError(format!("cannot read config file {}: {e}", path.display())))?;
    let table: toml::Table = text
        .parse()
        .map_err(|e| ConfigError(format!("config file {} is not valid TOML: {e}", path.display())))?;
    for (key, value) in table {
        if let (true, toml::Value::Table(upstreams)) = (key == "upstreams", &value) {
            let value = crate::upstreams::from_toml(upstreams)
                .map_err(|e| ConfigError(format!("config file {}: {e}", path.display())))?;
            raw.insert(key, Raw { value, origin: format!("config file {}", path.display()) });
            continue;
        }
        if !SETTINGS.iter().any(|(n, _)| *n == key) {
            return Err(ConfigError(format!("config file {}: unknown setting {key:?}", path.display())));
        }
        let value = match value {
            toml::Value::String(s) => s,
            toml::Value::Integer(i) => i.to_string(),
            toml::Value::Boolean(b) => if b { "1" } else { "0" }.to_owned(),
            other => {
                return Err(ConfigError(format!(
                    "config file {}: setting {key:?} must be a string, integer or boolean, got {other}",
                    path.display()
                )))
            }
        };
        raw.insert(key, Raw { value, origin: format!("config file {}", path.display()) });
    }
    Ok(())
}

struct Reader {
    raw: BTreeMap<String, Raw>,
}

impl Reader {
    fn bad(&self, name: &str, expected: &str) -> ConfigError {
        match self.raw.get(name) {
            Some(raw) => ConfigError(format!(
                "invalid setting {name} (SPENDGATE_{}) from {}: expected {expected}, got {:?}",
                name.to_uppercase(),
                raw.origin,
                raw.value
            )),
            None => ConfigError(format!("invalid setting {name}: expected {expected}")),
        }
    }

    fn optional(&self, name: &str) -> Option<String> {
        self.raw.get(name).map(|r| r.value.trim().to_owned()).filter(|v| !v.is_empty())
    }

    fn string(&self, name: &str, default: &str) -> String {
        self.optional(name).unwrap_or_else(|| default.to_owned())
    }

    fn flag(&self, name: &str) -> Result<bool, ConfigError> {
        match self.optional(name).as_deref() {
            None => Ok(false),
            Some("1" | "true" | "yes" | "on") => Ok(true),
            Some("0" | "false" | "no" | "off") => Ok(false),
            Some(_) => Err(self.bad(name, "1 or 0")),
        }
    }

    fn addr(&self, name: &str, default: &str) -> Result<SocketAddr, ConfigError> {
        self.string(name, default).parse().map_err(|_| self.bad(name, "HOST:PORT, e.g. 127.0.0.1:3000"))
    }

    fn url(&self, name: &str, default: &str) -> Result<String, ConfigError> {
        let v = self.string(name, default);
        match url::Url::parse(&v) {
            Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => {
                Ok(v.trim_end_matches('/').to_owned())
            }
            _ => Err(self.bad(name, "an http(s) URL")),
        }
    }

    fn number<T: std::str::FromStr>(&self, name: &str, default: T) -> Result<T, ConfigError> {
        match self.optional(name) {
            None => Ok(default),
            Some(v) => v.parse().map_err(|_| self.bad(name, "a non-negative integer")),
        }
    }

    fn positive<T: std::str::FromStr + PartialOrd + Default>(
        &self,
        name: &str,
        default: T,
    ) -> Result<T, ConfigError> {
        let v = self.number(name, default)?;
        if v > T::default() {
            Ok(v)
        } else {
            Err(self.bad(name, "a positive integer"))
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn defaults_follow_the_contract() {
        let c = Config::load_from(&Overrides::default(), &env(&[])).unwrap();
        assert_eq!(c.database_url, "sqlite://./spendgate.db");
        assert_eq!(c.control_addr.to_string(), "127.0.0.1:3000");
        assert_eq!(c.proxy_addr.to_string(), "127.0.0.1:8787");
        assert_eq!(c.upstream_openai, "https://api.openai.com");
        assert!(!c.dev);
        assert_eq!(c.default_plan, Plan::Enterprise, "a self-hosted install has no tier limits");
    }

    #[test]
    fn tls_needs_both_files_and_both_must_exist() {
        let c = Config::load_from(&Overrides::default(), &env(&[])).unwrap();
        assert_eq!((c.proxy_tls, c.control_tls), (None, None), "plain http by default");
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = (dir.path().join("c.pem"), dir.path().join("k.pem"));
        std::fs::write(&cert, "x").unwrap();
        std::fs::write(&key, "x").unwrap();
        let (cert_s, key_s) = (cert.to_str().unwrap(), key.to_str().unwrap());
        let c = Config::load_from(
            &Overrides::default(),
            &env(&[("SPENDGATE_PROXY_TLS_CERT", cert_s), ("SPENDGATE_PROXY_TLS_KEY", key_s)]),
        )
        .unwrap();
        assert_eq!(c.proxy_tls, Some(TlsFiles { cert: cert.clone(), key: key.clone() }));
        assert_eq!(c.control_tls, None);
        let alone = Config::load_from(&Overrides::default(), &env(&[("SPENDGATE_CONTROL_TLS_CERT", cert_s)]));
        assert!(alone.unwrap_err().0.contains("control_tls_key"));
        let missing = Config::load_from(
            &Overrides::default(),
            &env(&[("SPENDGATE_PROXY_TLS_CERT", "/nonexistent.pem"), ("SPENDGATE_PROXY_TLS_KEY", key_s)]),
        );
        assert!(missing.unwrap_err().0.contains("an existing PEM file"));
    }

    #[test]
    fn otel_is_off_unless_an_endpoint_is_configured() {
        let c = Config::load_from(&Overrides::default(), &env(&[])).unwrap();
        assert_eq!(c.otel.endpoint, None);
        assert!(!c.otel.capture_content);
        let c = Config::load_from(
            &Overrides::default(),
            &env(&[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/"),
                ("OTEL_BSP_SCHEDULE_DELAY", "100"),
            ]),
        )
        .unwrap();
        assert_eq!(c.otel.endpoint.as_deref(), Some("http://collector:4318"));
        assert_eq!(c.otel.batch_delay, Duration::from_millis(100));
        // spendgate's own setting wins over the standard variable.
        let c = Config::load_from(
            &Overrides::default(),
            &env(&[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"),
                ("SPENDGATE_OTEL_ENDPOINT", "http://127.0.0.1:4318"),
                ("SPENDGATE_OTEL_CAPTURE_CONTENT", "1"),
            ]),
        )
        .unwrap();
        assert_eq!(c.otel.endpoint.as_deref(), Some("http://127.0.0.1:4318"));
        assert!(c.otel.capture_content);
        for bad in [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4318"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "https://collector:4318"),
            ("SPENDGATE_OTEL_ENDPOINT", "https://collector:4318"),
            ("OTEL_BSP_MAX_QUEUE_SIZE", "0"),
        ] {
            assert!(Config::load_from(&Overrides::default(), &env(&[bad])).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn flags_beat_environment() {
        let mut o = Overrides::default();
        o.values.insert("control_addr".into(), "127.0.0.1:4000".into());
        let c = Config::load_from(&o, &env(&[("SPENDGATE_CONTROL_ADDR", "127.0.0.1:5000")])).unwrap();
        assert_eq!(c.control_addr.port(), 4000);
    }

    #[test]
    fn bad_values_name_the_setting() {
        let err =
            Config::load_from(&Overrides::default(), &env(&[("SPENDGATE_PROXY_ADDR", "nope")])).unwrap_err();
        assert!(err.0.contains("proxy_addr") && err.0.contains("SPENDGATE_PROXY_ADDR"), "{}", err.0);
        let err = Config::load_from(&Overrides::default(), &env(&[("SPENDGATE_DEFAULT_PLAN", "gold")]))
            .unwrap_err();
        assert!(err.0.contains("default_plan"), "{}", err.0);
        let err = Config::load_from(&Overrides::default(), &env(&[("SPENDGATE_DATABASE_URL", "mysql://x")]))
            .unwrap_err();
        assert!(err.0.contains("database_url"), "{}", err.0);
    }

    #[test]
    fn file_values_are_read_and_unknown_keys_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("spendgate.toml");
        std::fs::write(&path, "dev = true\nworkers = 3\n").unwrap();
        let o = Overrides { config_file: Some(path.clone()), values: BTreeMap::new() };
        let c = Config::load_from(&o, &env(&[])).unwrap();
        assert!(c.dev);
        assert_eq!(c.workers, 3);
        std::fs::write(&path, "colour = 1\n").unwrap();
        assert!(Config::load_from(&o, &env(&[])).unwrap_err().0.contains("colour"));
    }

    #[test]
    fn upstreams_come_from_file_tables_or_the_environment_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("spendgate.toml");
        std::fs::write(
            &path,
            "[upstreams.vllm]\nbase_url = \"http://127.0.0.1:8000\"\nformat = \"openai\"\n\
             [upstreams.gw]\nbase_url = \"https://gw.example\"\nformat = \"anthropic\"\n",
        )
        .unwrap();
        let o = Overrides { config_file: Some(path.clone()), values: BTreeMap::new() };
        let c = Config::load_from(&o, &env(&[])).unwrap();
        assert_eq!(
            c.configured_upstream_names(),
            ["openai", "anthropic", "gemini", "bedrock", "vertex", "azure", "gw", "vllm"]
        );
        assert_eq!(c.upstream("gw").unwrap().format, spendgate_llm::pricing::Provider::Anthropic);
        let c = Config::load_from(
            &o,
            &env(&[("SPENDGATE_UPSTREAMS", "name=or,format=openai,base_url=https://openrouter.ai/api")]),
        )
        .unwrap();
        assert_eq!(
            c.configured_upstream_names(),
            ["openai", "anthropic", "gemini", "bedrock", "vertex", "azure", "or"]
        );
        let err = Config::load_from(
            &o,
            &env(&[("SPENDGATE_UPSTREAMS", "name=gemini,format=openai,base_url=http://x")]),
        )
        .unwrap_err();
        assert!(err.0.contains("SPENDGATE_UPSTREAMS") && err.0.contains("gemini"), "{}", err.0);
    }
}
