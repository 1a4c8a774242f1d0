//! The integration suite: one binary, one module per area. Every test starts a real
//! server process on ephemeral ports against its own fresh database.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly by design")]

mod support;

mod actions;
mod admission;
mod auth;
mod budgets;
mod clouds_azure;
mod clouds_bedrock;
mod cluster;
mod cost_events;
mod customers;
mod dashboard;
mod exact_ceiling;
mod health;
mod ingest;
mod keys;
mod leases;
mod margins;
mod margins_more;
mod mcp_gateway;
mod mock_selftest;
mod model_prices;
mod openapi;
mod orgs;
mod otel;
mod outbound;
mod pricing;
mod provider_credentials;
mod proxy;
mod proxy_contract;
mod proxy_money;
mod proxy_responses;
mod rollups;
mod sdk_python;
mod tls;
mod tool_costs;
mod upstreams;
mod webhooks;
