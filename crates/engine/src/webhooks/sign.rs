//! Signing secrets and the `X-Service-Signature` header.
//!
//! `X-Service-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<raw body>">`;
//! during the 24 hours after a rotation a second `v1=` carries the signature with the
//! previous secret, so a receiver that still holds either secret accepts the call.

use hmac::{Hmac, Mac};
use rand::RngCore;
use sha2::Sha256;

/// How long the previous secret still signs after a rotation.
pub const ROTATION_OVERLAP_MS: i64 = 24 * 3_600_000;

/// `whsec_` + 64 hex characters (32 random bytes).
pub fn new_secret() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    format!("whsec_{}", hex::encode(bytes))
}

/// Hex HMAC-SHA256 of `"<t>.<body>"` under `secret` (the whole `whsec_…` string is the key).
pub fn signature(secret: &str, timestamp: i64, body: &[u8]) -> String {
    // HMAC takes keys of any length; this cannot fail.
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(secret.as_bytes()) else {
        return String::new();
    };
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    hex::encode(mac.finalize().into_bytes())
}

/// The header value: the current secret's signature, then the previous secret's
/// while it is still valid.
pub fn header(secrets: &[&str], timestamp: i64, body: &[u8]) -> String {
    let mut value = format!("t={timestamp}");
    for secret in secrets {
        value.push_str(",v1=");
        value.push_str(&signature(secret, timestamp, body));
    }
    value
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_vector_and_rotation() {
        // python3 -c 'import hmac,hashlib;print(hmac.new(b"whsec_k",b"1700000000.{}",hashlib.sha256).hexdigest())'
        assert_eq!(
            signature("whsec_k", 1_700_000_000, b"{}"),
            "8b20524faff2b12e1089e404a8cf60fbe577e5320e899ebff7329ebbcb9ada22"
        );
        let h = header(&["whsec_a", "whsec_b"], 5, b"x");
        let parts: Vec<&str> = h.split(',').collect();
        assert_eq!(parts.len(), 3);
        assert_eq!(parts[0], "t=5");
        assert_eq!(parts[2], format!("v1={}", signature("whsec_b", 5, b"x")));
        let s = new_secret();
        assert!(s.starts_with("whsec_") && s.len() == 70, "{s}");
        assert!(s[6..].bytes().all(|b| b.is_ascii_hexdigit()));
    }
}
