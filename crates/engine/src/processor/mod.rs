//! The payment processor (Stripe's REST API): a small typed client over awc, the
//! objects margins read from it, and the encryption of stored processor keys.
//!
//! No SDK crate: the maintained Stripe crates bring their own HTTP stack (hyper or
//! reqwest), and we need four read-only list calls over the client the rest of the
//! service already uses.

pub mod client;
pub mod types;

pub use client::{ListQuery, ProcessorClient, ProcessorError};

/// Whether `key` may be connected: a restricted key (`rk_`), or in development
/// mode a test secret key (`sk_test_`).
pub fn key_kind_allowed(key: &str, dev: bool) -> bool {
    key.starts_with("rk_") || (dev && key.starts_with("sk_test_"))
}

/// The key as shown after connecting: its mode prefix and last four characters.
pub fn masked_prefix(key: &str) -> String {
    let mode =
        ["rk_live_", "rk_test_", "sk_test_", "rk_"].into_iter().find(|p| key.starts_with(p)).unwrap_or("");
    let tail: String = key.chars().rev().take(4).collect::<Vec<_>>().into_iter().rev().collect();
    format!("{mode}****{tail}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_kinds_and_masks() {
        assert!(key_kind_allowed("rk_live_abc", false));
        assert!(!key_kind_allowed("sk_test_abc", false));
        assert!(key_kind_allowed("sk_test_abc", true));
        assert!(!key_kind_allowed("sk_live_abc", true));
        assert_eq!(masked_prefix("rk_live_51Habcdefgh1234"), "rk_live_****1234");
        assert_eq!(masked_prefix("sk_test_xyz9876"), "sk_test_****9876");
    }
}
