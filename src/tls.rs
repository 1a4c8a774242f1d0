//! TLS on the listeners, on the rustls the binary already carries for its outbound
//! calls: a listener given `{surface}_tls_cert` and `{surface}_tls_key` serves https.
//!
//! The certificate is read at start (a bad file stops the start with the reason) and
//! again on SIGHUP: each new handshake takes the certificate current at that moment,
//! while connections already open keep theirs, so a renewal drops no call. A reload
//! that fails (a half-written file, a key that does not match) keeps the certificate
//! in use and says why in the log.

use std::fmt;
use std::io;
use std::sync::{Arc, RwLock};

use rustls::crypto::ring;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::ServerConfig;
use spendgate_engine::config::TlsFiles;

/// One listener's certificate, replaceable while it serves.
pub struct Certificate {
    files: TlsFiles,
    current: RwLock<Arc<CertifiedKey>>,
}

impl fmt::Debug for Certificate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Certificate").field("files", &self.files).finish_non_exhaustive()
    }
}

impl Certificate {
    /// Reads the files; an error names the file and what is wrong with it.
    pub fn load(files: &TlsFiles) -> io::Result<Arc<Self>> {
        let key = read(files)?;
        Ok(Arc::new(Self { files: files.clone(), current: RwLock::new(Arc::new(key)) }))
    }

    /// Reads the files again; on success new handshakes use them.
    pub fn reload(&self) -> io::Result<()> {
        let key = Arc::new(read(&self.files)?);
        *self.current.write().unwrap_or_else(std::sync::PoisonError::into_inner) = key;
        Ok(())
    }

    /// The rustls configuration of a listener serving this certificate.
    pub fn server_config(self: &Arc<Self>) -> io::Result<ServerConfig> {
        let config = ServerConfig::builder_with_provider(Arc::new(ring::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(io::Error::other)?
            .with_no_client_auth()
            .with_cert_resolver(self.clone());
        Ok(config)
    }
}

impl ResolvesServerCert for Certificate {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone())
    }
}

/// The certificate chain and its private key, checked to belong together.
fn read(files: &TlsFiles) -> io::Result<CertifiedKey> {
    let bad = |path: &std::path::Path, what: &str| {
        io::Error::new(io::ErrorKind::InvalidData, format!("{}: {what}", path.display()))
    };
    let chain = CertificateDer::pem_file_iter(&files.cert)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| bad(&files.cert, &format!("not a PEM certificate chain ({e})")))?;
    if chain.is_empty() {
        return Err(bad(&files.cert, "no CERTIFICATE block"));
    }
    let key = PrivateKeyDer::from_pem_file(&files.key)
        .map_err(|e| bad(&files.key, &format!("not a PEM private key ({e})")))?;
    let signing = ring::default_provider()
        .key_provider
        .load_private_key(key)
        .map_err(|e| bad(&files.key, &format!("unusable private key ({e})")))?;
    let certified = CertifiedKey::new(chain, signing);
    certified.keys_match().map_err(|e| bad(&files.key, &format!("does not match the certificate ({e})")))?;
    Ok(certified)
}

/// Reloads every certificate on each SIGHUP, for as long as the process runs.
pub fn reload_on_sighup(certificates: Vec<Arc<Certificate>>) -> io::Result<()> {
    if certificates.is_empty() {
        return Ok(());
    }
    let mut hangups = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?;
    actix_web::rt::spawn(async move {
        while hangups.recv().await.is_some() {
            for certificate in &certificates {
                match certificate.reload() {
                    Ok(()) => {
                        tracing::info!(cert = %certificate.files.cert.display(), "TLS certificate reloaded")
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "TLS certificate not reloaded; the previous one stays in use")
                    }
                }
            }
        }
    });
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_or_foreign_file_is_refused_with_its_name() {
        let dir = tempfile::tempdir().unwrap();
        let cert = dir.path().join("cert.pem");
        let key = dir.path().join("key.pem");
        std::fs::write(&cert, "not pem").unwrap();
        std::fs::write(&key, "not pem").unwrap();
        let e = Certificate::load(&TlsFiles { cert: cert.clone(), key }).unwrap_err().to_string();
        assert!(e.contains("cert.pem") && e.contains("CERTIFICATE"), "{e}");
    }

    #[test]
    fn a_key_of_another_certificate_is_refused_and_a_reload_keeps_the_old_one() {
        let dir = tempfile::tempdir().unwrap();
        let files = TlsFiles { cert: dir.path().join("cert.pem"), key: dir.path().join("key.pem") };
        let a = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
        let b = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
        std::fs::write(&files.cert, a.cert.pem()).unwrap();
        std::fs::write(&files.key, a.key_pair.serialize_pem()).unwrap();
        let certificate = Certificate::load(&files).unwrap();
        let first = certificate.current.read().unwrap().clone();

        std::fs::write(&files.key, b.key_pair.serialize_pem()).unwrap();
        let e = certificate.reload().unwrap_err().to_string();
        assert!(e.contains("key.pem") && e.contains("does not match"), "{e}");
        assert!(Arc::ptr_eq(&first, &certificate.current.read().unwrap()), "the old certificate stays");

        std::fs::write(&files.cert, b.cert.pem()).unwrap();
        certificate.reload().unwrap();
        assert!(!Arc::ptr_eq(&first, &certificate.current.read().unwrap()), "the new one is served");
    }
}
