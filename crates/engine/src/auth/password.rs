//! Password hashing (argon2id with the crate's recommended parameters).

use argon2::password_hash::rand_core::OsRng;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::Argon2;

pub const MIN_PASSWORD_LEN: usize = 8;
pub const MAX_PASSWORD_LEN: usize = 256;

pub fn hash(password: &str) -> Result<String, String> {
    let salt = SaltString::generate(&mut OsRng);
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| e.to_string())
}

/// Constant-time verification (argon2 compares digests in constant time).
pub fn verify(password: &str, stored: &str) -> bool {
    PasswordHash::new(stored)
        .is_ok_and(|h| Argon2::default().verify_password(password.as_bytes(), &h).is_ok())
}

/// Hashing is CPU-heavy (tens of milliseconds): keep it off the async workers.
pub async fn hash_blocking(password: String) -> Result<String, String> {
    tokio::task::spawn_blocking(move || hash(&password)).await.map_err(|e| e.to_string())?
}

pub async fn verify_blocking(password: String, stored: String) -> bool {
    tokio::task::spawn_blocking(move || verify(&password, &stored)).await.unwrap_or(false)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    #[test]
    fn hash_and_verify() {
        let h = super::hash("correct horse").unwrap();
        assert!(super::verify("correct horse", &h));
        assert!(!super::verify("wrong horse", &h));
        assert!(!super::verify("x", "not a hash"));
    }
}
