//! Operational metrics, kept in one Prometheus registry and exported at
//! `/health/metrics` as Prometheus text or as JSON.

use prometheus::{Encoder, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry, TextEncoder};

pub mod budget;

#[derive(Clone)]
pub struct Metrics {
    pub registry: Registry,
    /// Budget-actor registry figures, refreshed from the registry at each scrape.
    pub live_actors: IntGauge,
    pub registry_figures: IntGaugeVec,
    /// Proxied requests by provider and outcome (`ok`, `upstream_error`, `denied`,
    /// `cancelled`, `failed`).
    pub proxy_requests: IntCounterVec,
    /// Proxied calls charged at an estimate, by reason (`unknown_model`, `no_usage`,
    /// `cancelled`, `stream_error`).
    pub proxy_estimated: IntCounterVec,
    /// Proxied calls that settled above what they had reserved (a prompt's non-text
    /// parts or provider-run tools the estimate could not bound), and by how much.
    pub proxy_over_reservation: IntCounterVec,
    /// Distinct (provider, model) pairs the price table does not know, counted when this
    /// process first sees each (the log names the model; see `pricing::unpriced`).
    pub unpriced_models: IntCounterVec,
    /// The accounting writer: `commits`, `events` committed, `commit_microseconds`
    /// spent committing (its rate over one second is the writer's busy fraction: near
    /// 1 it is the bottleneck), `failed_commits`.
    pub accounting: IntCounterVec,
    /// Commit jobs waiting for the accounting writer (refreshed at each scrape).
    pub accounting_queue: IntGauge,
    /// Admission figures of the budget actors: refusals, mailbox waits, busiest entities.
    pub budget: budget::BudgetMetrics,
    /// Webhook delivery attempts by outcome (`delivered`, `retry`, `failed`).
    pub webhook_attempts: IntCounterVec,
    /// Enabled webhook endpoints whose last attempt failed (see `failingSince`).
    pub webhook_endpoints_failing: IntGauge,
    /// Budget leases (shared budgets): room this instance holds per budget entity.
    pub lease_held: IntGaugeVec,
    /// Budget lease operations: `grown`, `refused`, `returned`, `reaped`.
    pub lease_operations: IntCounterVec,
    /// OpenTelemetry spans exported, and dropped (`queue_full`, `export_failed`).
    pub otel_spans: crate::telemetry::SpanCounters,
    /// OpenTelemetry metric exports by outcome (`ok`, `failed`).
    pub otel_metric_exports: IntCounterVec,
}

impl Metrics {
    #[expect(clippy::expect_used, reason = "metric names and labels are constants; an invalid one is a bug")]
    pub fn new() -> Self {
        let registry =
            Registry::new_custom(Some("spendgate".to_owned()), None).expect("valid registry prefix");
        let live_actors =
            IntGauge::new("live_budget_actors", "Budget actors currently running").expect("valid gauge");
        registry.register(Box::new(live_actors.clone())).expect("unique gauge");
        let registry_gauges = IntGaugeVec::new(
            Opts::new("budget_registry", "Budget actor registry: restarts, passivations, reaped reservations, load failures, mailbox wait (ns)"),
            &["figure"],
        )
        .expect("valid gauge");
        registry.register(Box::new(registry_gauges.clone())).expect("unique gauge");
        let proxy_requests = IntCounterVec::new(
            Opts::new("proxy_requests_total", "Proxied requests by provider and outcome"),
            &["provider", "outcome"],
        )
        .expect("valid counter");
        registry.register(Box::new(proxy_requests.clone())).expect("unique counter");
        let proxy_estimated = IntCounterVec::new(
            Opts::new("proxy_estimated_total", "Proxied calls charged at their estimate, by reason"),
            &["reason"],
        )
        .expect("valid counter");
        registry.register(Box::new(proxy_estimated.clone())).expect("unique counter");
        let proxy_over_reservation = IntCounterVec::new(
            Opts::new(
                "proxy_over_reservation_total",
                "Proxied calls that settled above their reservation (calls), and the excess (microdollars)",
            ),
            &["measure"],
        )
        .expect("valid counter");
        registry.register(Box::new(proxy_over_reservation.clone())).expect("unique counter");
        let unpriced_models = IntCounterVec::new(
            Opts::new(
                "unpriced_models_total",
                "Models missing from the price table (charged at the provider's fallback price), counted once per model per process",
            ),
            &["provider"],
        )
        .expect("valid counter");
        registry.register(Box::new(unpriced_models.clone())).expect("unique counter");
        let accounting = IntCounterVec::new(
            Opts::new(
                "accounting_total",
                "Accounting writer: commits, events, commit_microseconds, failed_commits",
            ),
            &["figure"],
        )
        .expect("valid counter");
        registry.register(Box::new(accounting.clone())).expect("unique counter");
        let accounting_queue =
            IntGauge::new("accounting_queue_depth", "Commit jobs waiting for the accounting writer")
                .expect("valid gauge");
        registry.register(Box::new(accounting_queue.clone())).expect("unique gauge");
        let budget = budget::BudgetMetrics::register(&registry);
        let webhook_attempts = IntCounterVec::new(
            Opts::new("webhook_attempts_total", "Webhook delivery attempts by outcome"),
            &["outcome"],
        )
        .expect("valid counter");
        registry.register(Box::new(webhook_attempts.clone())).expect("unique counter");
        let webhook_endpoints_failing = IntGauge::new(
            "webhook_endpoints_failing",
            "Enabled webhook endpoints whose last delivery attempt failed",
        )
        .expect("valid gauge");
        registry.register(Box::new(webhook_endpoints_failing.clone())).expect("unique gauge");
        let lease_held = IntGaugeVec::new(
            Opts::new(
                "budget_lease_microdollars",
                "Room of a budget this instance holds in its lease (shared budgets), per budget entity",
            ),
            &["org_id", "entity_type", "entity_id"],
        )
        .expect("valid gauge");
        registry.register(Box::new(lease_held.clone())).expect("unique gauge");
        let lease_operations = IntCounterVec::new(
            Opts::new(
                "budget_lease_operations_total",
                "Budget lease operations: grown (one conditional update), refused, returned (unused room), reaped (of a dead instance)",
            ),
            &["operation"],
        )
        .expect("valid counter");
        registry.register(Box::new(lease_operations.clone())).expect("unique counter");
        let otel_exported =
            IntCounter::new("otel_exported_spans_total", "OpenTelemetry spans the collector accepted")
                .expect("valid counter");
        registry.register(Box::new(otel_exported.clone())).expect("unique counter");
        let otel_dropped = IntCounterVec::new(
            Opts::new(
                "otel_dropped_spans_total",
                "OpenTelemetry spans dropped: queue_full (the export queue was full), export_failed (the collector did not take them)",
            ),
            &["reason"],
        )
        .expect("valid counter");
        registry.register(Box::new(otel_dropped.clone())).expect("unique counter");
        let otel_metric_exports = IntCounterVec::new(
            Opts::new("otel_metric_exports_total", "OpenTelemetry metric exports by outcome: ok, failed"),
            &["outcome"],
        )
        .expect("valid counter");
        registry.register(Box::new(otel_metric_exports.clone())).expect("unique counter");
        Metrics {
            lease_held,
            lease_operations,
            otel_metric_exports,
            otel_spans: crate::telemetry::SpanCounters { exported: otel_exported, dropped: otel_dropped },
            budget,
            registry,
            webhook_attempts,
            webhook_endpoints_failing,
            live_actors,
            registry_figures: registry_gauges,
            proxy_requests,
            proxy_estimated,
            proxy_over_reservation,
            unpriced_models,
            accounting,
            accounting_queue,
        }
    }

    /// Copies the budget registry's figures into the gauges (called before a scrape).
    pub fn observe_registry(&self, registry: &actors::registry::BudgetRegistry) {
        let stats = registry.stats();
        self.budget.observe(&stats, &registry.busiest(budget::BUSY_FROM, budget::BUSIEST_ENTITIES));
        let clamp = |v: u128| i64::try_from(v).unwrap_or(i64::MAX);
        self.live_actors.set(i64::try_from(stats.live_actors).unwrap_or(i64::MAX));
        for (figure, value) in [
            ("restarts", i128::from(stats.restarts)),
            ("passivations", i128::from(stats.passivations)),
            ("reaped_reservations", i128::from(stats.reaped)),
            ("load_failures", i128::from(stats.load_failures)),
        ] {
            self.registry_figures.with_label_values(&[figure]).set(i64::try_from(value).unwrap_or(i64::MAX));
        }
        self.registry_figures
            .with_label_values(&["mailbox_wait_mean_ns"])
            .set(clamp(stats.mailbox.mean().as_nanos()));
        self.registry_figures
            .with_label_values(&["mailbox_wait_max_ns"])
            .set(clamp(stats.mailbox.max.as_nanos()));
    }

    /// Prometheus text exposition format.
    pub fn render_text(&self) -> String {
        let mut buf = Vec::new();
        let _ = TextEncoder::new().encode(&self.families(), &mut buf);
        String::from_utf8(buf).unwrap_or_default()
    }

    /// The same samples as JSON: `{ name: value }` for plain series and
    /// `{ name: [{ labels, value }] }` for labelled ones.
    pub fn render_json(&self) -> serde_json::Value {
        let mut out = serde_json::Map::new();
        for family in self.families() {
            let samples: Vec<serde_json::Value> = family
                .get_metric()
                .iter()
                .map(|m| {
                    let labels: serde_json::Map<String, serde_json::Value> = m
                        .get_label()
                        .iter()
                        .map(|l| (l.name().to_owned(), serde_json::Value::from(l.value())))
                        .collect();
                    match family.get_field_type() {
                        prometheus::proto::MetricType::COUNTER => {
                            serde_json::json!({ "labels": labels, "value": m.get_counter().get_value() })
                        }
                        prometheus::proto::MetricType::HISTOGRAM => {
                            let h = m.get_histogram();
                            let buckets: Vec<_> = h
                                .get_bucket()
                                .iter()
                                .map(|b| serde_json::json!({ "le": b.upper_bound(), "count": b.cumulative_count() }))
                                .collect();
                            serde_json::json!({
                                "labels": labels,
                                "count": h.get_sample_count(),
                                "sum": h.get_sample_sum(),
                                "buckets": buckets,
                            })
                        }
                        _ => serde_json::json!({ "labels": labels, "value": m.get_gauge().get_value() }),
                    }
                })
                .collect();
            out.insert(family.name().to_owned(), serde_json::Value::Array(samples));
        }
        serde_json::Value::Object(out)
    }
}

impl Metrics {
    /// Every family: the registry's and the mailbox wait histogram.
    fn families(&self) -> Vec<prometheus::proto::MetricFamily> {
        let mut families = self.registry.gather();
        families.push(self.budget.wait_family());
        families
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}
