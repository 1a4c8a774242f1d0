//! Who is calling: dashboard sessions (cookie) and API keys (`X-Service-Key`).

pub mod dual;
pub mod identity;
pub mod keys;
pub mod password;
pub mod session;
pub mod users;
pub mod validator;

/// The header carrying the shared secret of the proxy's internal routes
/// (`internal_secret`); the control plane sends it when it relays to them.
pub const INTERNAL_SECRET_HEADER: &str = "x-internal-secret";

use sha2::{Digest, Sha256};

/// Lowercase hex SHA-256, used for everything stored as a hash of a secret token
/// (API keys, session tokens, invitation tokens).
pub fn sha256_hex(input: &str) -> String {
    hex::encode(Sha256::digest(input.as_bytes()))
}

/// A random secret of `bytes` bytes, hex encoded.
pub fn random_hex(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    rand::fill(&mut buf[..]);
    hex::encode(buf)
}
