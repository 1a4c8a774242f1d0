//! A test certificate authority (made with rcgen at test time) and a TLS front for
//! the mock upstream: it terminates TLS with a certificate for `localhost` and
//! 127.0.0.1 signed by that CA and pipes the plain bytes to the mock, so everything
//! the mock can do works over HTTPS.

use std::path::PathBuf;
use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// A CA whose certificate is written to `ca_file` (PEM), for `SSL_CERT_FILE`.
pub struct TestCa {
    pub ca_file: PathBuf,
    cert: rcgen::Certificate,
    key: KeyPair,
    _dir: tempfile::TempDir,
}

impl TestCa {
    pub fn new() -> TestCa {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, "spendgate test CA");
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let key = KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let ca_file = dir.path().join("test-ca.pem");
        std::fs::write(&ca_file, cert.pem()).unwrap();
        TestCa { ca_file, cert, key, _dir: dir }
    }

    /// A server certificate for `localhost` and 127.0.0.1 signed by this CA, written
    /// as PEM to `cert` and `key` (replacing what they held).
    pub fn write_leaf(&self, cert: &std::path::Path, key: &std::path::Path) {
        let params = CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()]).unwrap();
        let key_pair = KeyPair::generate().unwrap();
        let leaf = params.signed_by(&key_pair, &self.cert, &self.key).unwrap();
        std::fs::write(cert, leaf.pem()).unwrap();
        std::fs::write(key, key_pair.serialize_pem()).unwrap();
    }

    /// An HTTPS client that trusts this CA only.
    pub fn client(&self) -> reqwest::Client {
        let pem = std::fs::read(&self.ca_file).unwrap();
        reqwest::Client::builder()
            .tls_built_in_root_certs(false)
            .add_root_certificate(reqwest::Certificate::from_pem(&pem).unwrap())
            .build()
            .unwrap()
    }

    /// A server certificate for `localhost` and 127.0.0.1 and its key.
    fn leaf(&self) -> (CertificateDer<'static>, PrivateKeyDer<'static>) {
        let params = CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()]).unwrap();
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.cert, &self.key).unwrap();
        (cert.der().clone(), PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())))
    }
}

/// A TLS front on `127.0.0.1:0` piping to `backend` (`host:port`); stops when the
/// test process ends (its thread only accepts).
pub struct TlsFront {
    pub port: u16,
}

impl TlsFront {
    pub fn start(ca: &TestCa, backend: &str) -> TlsFront {
        let (cert, key) = ca.leaf();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![cert], key)
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let backend = backend.to_owned();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                while let Ok((tcp, _)) = listener.accept().await {
                    let (acceptor, backend) = (acceptor.clone(), backend.clone());
                    tokio::spawn(async move {
                        let Ok(mut tls) = acceptor.accept(tcp).await else { return };
                        let Ok(mut plain) = tokio::net::TcpStream::connect(&backend).await else { return };
                        let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
                    });
                }
            });
        });
        TlsFront { port }
    }
}
