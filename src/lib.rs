//! spendgate: a self-hosted spend-governance gateway for AI agents.
//!
//! [`serve`] wires the pieces: configuration, the database pool (migrated at start),
//! shared state, and the two HTTP listeners — the control plane (`/api/*`, the
//! `spendgate-api` crate) and the proxy (`/v1/*`, `/v1beta/*`, `/health*`, the
//! `spendgate-proxy` crate). The engine below both is re-exported whole, so that the
//! operator commands, tests and benchmarks name its modules as `spendgate::db`.

pub mod cli;
pub mod openapi;
pub mod tls;

use std::io;

use actix_web::{web, App, HttpServer};
pub use spendgate_api as api;
pub use spendgate_engine::*;
pub use spendgate_proxy as proxy;

use spendgate_api::dashboard;
use spendgate_engine::config::Config;
use spendgate_engine::state::AppState;

/// Which listeners a process runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Surface {
    Control,
    Proxy,
}

/// Migrates the database, then serves until SIGINT/SIGTERM.
pub async fn serve(mut config: Config, only: Option<Surface>) -> io::Result<()> {
    // A listener's certificate is checked first: a bad file stops the start at once.
    let proxy_tls = config.proxy_tls.as_ref().map(tls::Certificate::load).transpose()?;
    let control_tls = config.control_tls.as_ref().map(tls::Certificate::load).transpose()?;
    let applied = db::migrate(&config.database_url).await.map_err(io::Error::other)?;
    secret_key::ensure(&mut config)?;
    if !applied.is_empty() {
        tracing::info!(count = applied.len(), "applied migrations");
    }
    let pool =
        db::Pool::connect(&config.database_url, config.db_max_connections).map_err(io::Error::other)?;
    db::rollups::backfill_if_pending(&pool).await.map_err(io::Error::other)?;
    let state = AppState::new(config.clone(), pool).map_err(io::Error::other)?;
    let workers = config.workers;
    state.pool.start_maintenance();
    db::fold::start(state.pool.clone(), state.writer.committed_sums(), state.config.rollup_fold_interval);
    retention::start(state.pool.clone(), state.config.cost_event_retention_days);
    periods::start(state.pool.clone(), state.outbox.clone(), state.budgets.clone());
    webhooks::start(
        webhooks::Deps {
            pool: state.pool.clone(),
            settings: state.config.webhooks.clone(),
            dev: state.config.dev,
            public_url: state.config.public_url.clone().unwrap_or_else(|| {
                format!("{}://{}", scheme(&state.config.control_tls), state.config.control_addr)
            }),
            outbox: state.outbox.clone(),
            metrics: state.metrics.clone(),
        },
        state.instance_id.clone(),
    );
    changes::start(state.clone());
    state.actions.resume_pending_until_done();
    let leases = state.budgets.leases().cloned();
    let on_beat = {
        let leases = leases.clone();
        move |at: i64| {
            if let Some(leases) = &leases {
                leases.beat(at);
            }
        }
    };
    instances::start(state.pool.clone(), state.instance_id.clone(), state.started_at_ms, on_beat)
        .await
        .map_err(io::Error::other)?;
    if let Some(leases) = &leases {
        leases.start();
    }
    idempotency::start_purger(state.pool.clone());
    margins::scheduler::start(
        state.pool.clone(),
        state.outbox.clone(),
        state.config.clone(),
        state.instance_id.clone(),
    );
    if state.config.shared_budgets {
        db::shared_budgets::start_reaper(state.pool.clone());
    }

    tls::reload_on_sighup(proxy_tls.iter().chain(control_tls.iter()).cloned().collect())?;
    let mut servers = Vec::new();
    let mut ready = Vec::new();
    // The proxy is bound first: the control plane's OpenAPI document names its address.
    let proxy = if only != Some(Surface::Control) {
        let st = state.clone();
        let server = HttpServer::new(move || {
            // The app factory runs on each worker's own arbiter: budget actors first
            // needed by this worker's requests live here, one thread with the requests.
            if st.config.budget_actors_on_workers {
                st.budgets.registry().adopt_current_arbiter();
            }
            App::new()
                .wrap(actix_web::middleware::Condition::new(
                    st.telemetry.is_some(),
                    actix_web::middleware::from_fn(telemetry::governed::span),
                ))
                .app_data(web::Data::new(telemetry::governed::Exporting(st.telemetry.clone())))
                .app_data(web::Data::new(st.clone()))
                .configure(proxy::configure)
        })
        .workers(workers)
        // A client that goes away while its call waits for the provider is noticed.
        .on_connect(proxy::peer::on_connect)
        // Small SSE events must leave at once, not wait for Nagle's algorithm.
        .tcp_nodelay(true)
        .shutdown_timeout(30);
        let server = match &proxy_tls {
            Some(certificate) => server.bind_rustls_0_23(config.proxy_addr, certificate.server_config()?)?,
            None => server.bind(config.proxy_addr)?,
        };
        if let Some(addr) = server.addrs().first() {
            let _ = state.proxy_bound.set(*addr);
        }
        Some(server)
    } else {
        None
    };
    if only != Some(Surface::Proxy) {
        let st = state.clone();
        let document = web::Data::new(openapi::served(&state).map_err(io::Error::other)?);
        let server = HttpServer::new(move || {
            App::new()
                .wrap(actix_web::middleware::Condition::new(
                    st.telemetry.is_some(),
                    actix_web::middleware::from_fn(telemetry::governed::span),
                ))
                .wrap(actix_web::middleware::from_fn(api::service_version))
                .app_data(web::Data::new(telemetry::governed::Exporting(st.telemetry.clone())))
                .app_data(web::Data::new(st.clone()))
                .app_data(document.clone())
                .configure(api::configure)
                .configure(dashboard::configure)
        })
        .workers(workers)
        .tcp_nodelay(true)
        .shutdown_timeout(10);
        let server = match &control_tls {
            Some(certificate) => {
                server.bind_rustls_0_23(config.control_addr, certificate.server_config()?)?
            }
            None => server.bind(config.control_addr)?,
        };
        for addr in server.addrs() {
            ready.push(format!("control={}://{addr}", scheme(&config.control_tls)));
        }
        servers.push(server.run());
    }
    if let Some(server) = proxy {
        for addr in server.addrs() {
            ready.push(format!("proxy={}://{addr}", scheme(&config.proxy_tls)));
        }
        servers.push(server.run());
    }
    // Tests and operators wait for this line: it is printed once every listener is bound.
    net::log_settings();
    for u in &state.config.upstreams {
        tracing::info!(name = %u.name, base_url = %u.base_url, format = u.format_name(), "operator-defined upstream");
    }
    println!("spendgate ready {}", ready.join(" "));
    tracing::info!(listeners = %ready.join(" "), backend = ?state.pool.backend(), "spendgate ready");

    let stopped = futures_util::future::join_all(servers).await;
    if let Some(leases) = &leases {
        // The servers are down: once the calls they settled are committed (a few
        // seconds at most), the leases' room goes back to the budgets.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while state.writer.queued() > 0 && std::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        leases.shutdown().await;
    }
    for result in stopped {
        result?;
    }
    if let Some(telemetry) = state.telemetry.clone() {
        // Waits a few seconds at most for the collector; off the runtime's thread.
        let _ = actix_web::rt::task::spawn_blocking(move || telemetry.shutdown()).await;
    }
    tracing::info!("spendgate stopped");
    Ok(())
}

/// The scheme a listener serves.
fn scheme(tls: &Option<config::TlsFiles>) -> &'static str {
    if tls.is_some() {
        "https"
    } else {
        "http"
    }
}
