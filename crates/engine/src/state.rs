//! Process-wide shared state handed to every handler.

use std::sync::Arc;

use crate::accounting::AccountingWriter;
use crate::auth::validator::KeyValidator;
use crate::budgets::BudgetService;
use crate::config::Config;
use crate::db::Pool;
use crate::metrics::Metrics;
use crate::ratelimit::RateLimiters;
use spendgate_llm::pricing::unpriced::UnpricedModels;
use spendgate_llm::pricing::PricingTable;

/// Shared, cheaply cloneable application state.
#[derive(Clone)]
pub struct AppState(Arc<Inner>);

pub struct Inner {
    pub config: Config,
    pub pool: Pool,
    pub keys: KeyValidator,
    pub budgets: BudgetService,
    pub actions: crate::actions::ActionService,
    pub writer: AccountingWriter,
    pub rate_limits: RateLimiters,
    /// Webhook subscriptions (what the outbox keeps) and the endpoint actors' wake-up.
    pub outbox: crate::outbox::Outbox,
    pub metrics: Metrics,
    /// Model prices: the built-in table with the operator's file over it.
    pub pricing: Arc<PricingTable>,
    /// Models missing from `pricing` that this process has seen (first-seen log and metric).
    pub unpriced: UnpricedModels,
    /// Configured tool costs (MCP tool events without an explicit cost).
    pub tool_costs: crate::tool_costs::ToolCostCache,
    /// Each organization's runtime prices and `unpricedModels` setting.
    pub model_prices: crate::model_prices::PriceCache,
    /// Decrypted provider credentials per (organization, upstream).
    pub credentials: crate::credentials::CredentialCache,
    /// MCP servers per (organization, name), headers decrypted.
    pub mcp_servers: crate::mcp_servers::ServerCache,
    /// Active status of customer bindings, for the gate.
    pub bindings: crate::binding_cache::BindingCache,
    /// Governed-request counters per organization (plan caps).
    pub plan_usage: crate::plan_usage::PlanUsage,
    /// Room for proxied calls admitted and not yet recorded (`max_unsettled_calls`).
    pub unsettled: Arc<tokio::sync::Semaphore>,
    /// Identifies this process in shared reservations.
    pub instance_id: String,
    pub started_at_ms: i64,
    /// The proxy listener's bound address (known after bind; port 0 resolves then).
    pub proxy_bound: std::sync::OnceLock<std::net::SocketAddr>,
    /// OpenTelemetry export, when an endpoint is configured (`crate::telemetry`).
    pub telemetry: Option<Arc<crate::telemetry::Telemetry>>,
}

impl AppState {
    /// Builds the state and starts the background parts (accounting writer, budget
    /// actors). Must run inside the actix system.
    pub fn new(config: Config, pool: Pool) -> Result<Self, String> {
        let metrics = Metrics::new();
        let pricing = PricingTable::load(config.pricing_file.as_deref(), &config.named_formats())?;
        let unpriced = UnpricedModels::new(metrics.unpriced_models.clone());
        let outbox = crate::outbox::Outbox::new();
        let instance_id = crate::util::ids::new_id();
        let leases = (config.shared_budgets && config.budget_leases).then(|| {
            crate::leases::LeaseBook::new(
                pool.clone(),
                instance_id.clone(),
                config.budget_lease_idle,
                &metrics,
            )
        });
        let budgets = BudgetService::start(
            pool.clone(),
            outbox.clone(),
            actors::registry::RegistryConfig {
                arbiters: config.arbiters,
                admission_deadline: config.admission_deadline,
                max_waiting_reservations: config.max_waiting_reservations,
                idle_timeout: config.actor_idle_timeout,
                restart_backoff: config.actor_restart_backoff,
                ..actors::registry::RegistryConfig::default()
            },
            leases,
        )?;
        let actions = crate::actions::ActionService::start(pool.clone(), outbox.clone(), budgets.clone())?;
        let on_commit = {
            let budgets = budgets.clone();
            Box::new(move |changes: &[crate::db::cost_events::SpendChange], settled| {
                budgets.spend_committed(changes);
                budgets.settle_committed(settled, changes);
            })
        };
        let writer = AccountingWriter::start(
            pool.clone(),
            outbox.clone(),
            on_commit,
            config.accounting_linger,
            crate::accounting::WriterMetrics(metrics.accounting.clone()),
        );
        let keys = KeyValidator::new(pool.clone());
        let rate_limits =
            RateLimiters::new(config.rate_limit_ip_per_minute, config.rate_limit_key_per_minute)
                .with_auth(config.rate_limit_auth_ip_per_minute, config.rate_limit_auth_email_per_minute);
        let unsettled = Arc::new(tokio::sync::Semaphore::new(config.max_unsettled_calls));
        let telemetry = crate::telemetry::Telemetry::start(
            &config.otel,
            metrics.otel_spans.clone(),
            metrics.otel_metric_exports.clone(),
        )?;
        Ok(AppState(Arc::new(Inner {
            config,
            pool,
            keys,
            budgets,
            actions,
            writer,
            rate_limits,
            outbox,
            metrics,
            pricing: Arc::new(pricing),
            unpriced,
            tool_costs: crate::tool_costs::ToolCostCache::default(),
            model_prices: crate::model_prices::PriceCache::default(),
            credentials: crate::credentials::CredentialCache::default(),
            mcp_servers: crate::mcp_servers::ServerCache::default(),
            bindings: crate::binding_cache::BindingCache::default(),
            plan_usage: crate::plan_usage::PlanUsage::default(),
            unsettled,
            instance_id,
            started_at_ms: crate::util::time::now_ms(),
            proxy_bound: std::sync::OnceLock::new(),
            telemetry,
        })))
    }
}

impl AppState {
    /// Where this process's proxy listens: the bound address when this process runs
    /// the proxy, else the configured one.
    pub fn proxy_addr(&self) -> std::net::SocketAddr {
        self.proxy_bound.get().copied().unwrap_or(self.config.proxy_addr)
    }

    /// The proxy's base URL as agents should call it: the configured
    /// `proxy_public_url`, else `http://` (`https://` when the proxy serves TLS) and
    /// [`Self::proxy_addr`].
    pub fn proxy_public_url(&self) -> String {
        let scheme = if self.config.proxy_tls.is_some() { "https" } else { "http" };
        self.config.proxy_public_url.clone().unwrap_or_else(|| format!("{scheme}://{}", self.proxy_addr()))
    }
}

impl std::ops::Deref for AppState {
    type Target = Inner;

    fn deref(&self) -> &Inner {
        &self.0
    }
}
