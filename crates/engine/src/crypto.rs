//! Secrets at rest (processor keys, provider credentials): AES-256-GCM under the
//! SHA-256 of the `secret_key` setting, a random 96-bit nonce per encryption, and the
//! organization id as associated data (a ciphertext copied to another organization
//! does not decrypt). Stored as `v1:` + hex(nonce ‖ ciphertext).

use aes_gcm::aead::{Aead, KeyInit, Payload};
use aes_gcm::{Aes256Gcm, Nonce};
use rand::RngCore;
use sha2::{Digest, Sha256};

const VERSION: &str = "v1:";
const NONCE_LEN: usize = 12;

#[derive(Debug, thiserror::Error)]
#[error("secret encryption or decryption failed")]
pub struct CryptoError;

fn cipher(secret: &str) -> Aes256Gcm {
    let key = Sha256::digest(secret.as_bytes());
    Aes256Gcm::new(&key)
}

pub fn encrypt(secret: &str, org_id: &str, plaintext: &str) -> Result<String, CryptoError> {
    let mut nonce = [0u8; NONCE_LEN];
    rand::rng().fill_bytes(&mut nonce);
    let sealed = cipher(secret)
        .encrypt(Nonce::from_slice(&nonce), Payload { msg: plaintext.as_bytes(), aad: org_id.as_bytes() })
        .map_err(|_| CryptoError)?;
    let mut out = nonce.to_vec();
    out.extend_from_slice(&sealed);
    Ok(format!("{VERSION}{}", hex::encode(out)))
}

pub fn decrypt(secret: &str, org_id: &str, stored: &str) -> Result<String, CryptoError> {
    let bytes = hex::decode(stored.strip_prefix(VERSION).ok_or(CryptoError)?).map_err(|_| CryptoError)?;
    if bytes.len() <= NONCE_LEN {
        return Err(CryptoError);
    }
    let (nonce, sealed) = bytes.split_at(NONCE_LEN);
    let plain = cipher(secret)
        .decrypt(Nonce::from_slice(nonce), Payload { msg: sealed, aad: org_id.as_bytes() })
        .map_err(|_| CryptoError)?;
    String::from_utf8(plain).map_err(|_| CryptoError)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "0123456789abcdef0123456789abcdef";

    #[test]
    fn round_trips_and_binds_to_org_and_secret() {
        let a = encrypt(SECRET, "org1", "rk_live_secret").ok();
        let b = encrypt(SECRET, "org1", "rk_live_secret").ok();
        assert!(a.is_some() && a != b, "a fresh nonce each time");
        let a = a.unwrap_or_default();
        assert!(!a.contains("rk_live"));
        assert_eq!(decrypt(SECRET, "org1", &a).ok().as_deref(), Some("rk_live_secret"));
        assert!(decrypt(SECRET, "org2", &a).is_err());
        assert!(decrypt("another-secret-of-32-characters!!", "org1", &a).is_err());
        assert!(decrypt(SECRET, "org1", "v1:00").is_err());
    }
}
