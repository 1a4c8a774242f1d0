//! Accounting: how cost events come to be and how they reach storage. Below both HTTP
//! surfaces: the control plane's ingest, the proxy's calls and its MCP tool events all
//! build their events here ([`event`]), name the budgets they count against here
//! ([`targets`]), and hand them to the one group-commit [`writer`].

pub mod event;
pub mod targets;
pub mod writer;

pub use writer::{AccountingWriter, OnCommit, WriterMetrics, MAX_BATCH_EVENTS};
