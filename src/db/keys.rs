//! API keys.
