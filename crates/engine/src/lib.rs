//! spendgate's engine: everything below the two HTTP surfaces. Configuration, the
//! database (schema, queries, change feeds, the outbox), pricing and provider usage,
//! accounting, budgets and their leases, authentication, telemetry, webhooks and
//! margins, and the shared state ([`state::AppState`]) the surfaces are handed.
//!
//! The proxy (`spendgate-proxy`) and the control plane (`spendgate-api`) build on this
//! crate and never on each other; the `spendgate` binary wires them together.

pub mod accounting;
pub mod actions;
pub mod auth;
pub mod binding_cache;
pub mod budgets;
pub mod changes;
pub mod client_ip;
pub mod cloud_credentials;
pub mod config;
pub mod credentials;
pub mod crypto;
pub mod customers;
pub mod db;
pub mod error;
pub mod idempotency;
pub mod instances;
pub mod leases;
pub mod margins;
pub mod mcp_servers;
pub mod metrics;
pub mod model_prices;
pub mod net;
pub mod openapi;
pub mod outbox;
pub mod periods;
pub mod plan_usage;
pub mod plans;
pub mod policy;
pub mod pricing_report;
pub mod processor;
pub mod ratelimit;
pub mod retention;
pub mod secret_key;
pub mod state;
pub mod telemetry;
pub mod tool_costs;
pub mod unit_economics;
pub mod upstreams;
pub mod util;
pub mod webhooks;

/// The current API version (see Versioning in the spec).
pub const API_VERSION: &str = "2026-04-01";

/// The header that asks for an API version and answers with the one served.
pub const SERVICE_VERSION: actix_web::http::header::HeaderName =
    actix_web::http::header::HeaderName::from_static("service-version");
