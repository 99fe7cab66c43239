//! TLS in the tests: a self-signed CA the tests make (rcgen), a server
//! certificate it signs, and a TLS front that terminates TLS on an
//! ephemeral port and passes the bytes to a plain reference server, the
//! way a load balancer terminates TLS in front of a staging deployment.
//!
//! The reference servers speak plain HTTP (their accept loop and its bounds
//! are one code path); HTTPS is the front's job here and a deployment's
//! job elsewhere.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// A CA, and a server certificate it signed for some names.
pub struct Pki {
    /// The CA's certificate, as `--cacert` takes it.
    pub ca_pem: PathBuf,
    pub server: Arc<rustls::ServerConfig>,
}

/// A fresh CA named `ca_name` and a server certificate for `names` (DNS
/// names or IP addresses), its files under a fresh directory.
pub fn pki(ca_name: &str, names: &[&str]) -> Pki {
    let dir = std::env::temp_dir().join(format!(
        "reqkey-tls-{}-{}",
        std::process::id(),
        rand_suffix()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, ca_name);
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    let leaf_key = KeyPair::generate().unwrap();
    let mut leaf_params =
        CertificateParams::new(names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>()).unwrap();
    leaf_params.distinguished_name.push(
        DnType::CommonName,
        names.first().copied().unwrap_or("server"),
    );
    let leaf = leaf_params.signed_by(&leaf_key, &issuer).unwrap();
    let ca_pem = dir.join("ca.pem");
    std::fs::write(&ca_pem, ca_cert.pem()).unwrap();
    let chain = vec![CertificateDer::from(leaf.der().to_vec())];
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der()));
    #[allow(deprecated)]
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let server = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .unwrap();
    Pki {
        ca_pem,
        server: Arc::new(server),
    }
}

/// The common self-signed certificate (`openssl req -x509 -newkey rsa:2048
/// -nodes -subj /CN=localhost -addext subjectAltName=DNS:localhost`): one
/// certificate, CA:TRUE, that the server presents itself and `--cacert`
/// names (curl trusts it so).
pub fn self_signed(names: &[&str]) -> Pki {
    let dir = std::env::temp_dir().join(format!(
        "reqkey-tls-self-{}-{}",
        std::process::id(),
        rand_suffix()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let key = KeyPair::generate().unwrap();
    let mut params =
        CertificateParams::new(names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(
        DnType::CommonName,
        names.first().copied().unwrap_or("server"),
    );
    let cert = params.self_signed(&key).unwrap();
    let pem = dir.join("self.pem");
    std::fs::write(&pem, cert.pem()).unwrap();
    let chain = vec![CertificateDer::from(cert.der().to_vec())];
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    #[allow(deprecated)]
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let server = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .unwrap();
    Pki {
        ca_pem: pem,
        server: Arc::new(server),
    }
}

fn rand_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos() as u64);
    nanos ^ (N.fetch_add(1, Ordering::Relaxed) << 32)
}

/// A TLS front on `127.0.0.1:PORT`: every connection's TLS is terminated
/// and its bytes copied to and from `backend`. It runs on a thread of its
/// own for as long as the test process.
pub struct Front {
    pub port: u16,
}

pub fn front(config: Arc<rustls::ServerConfig>, backend: SocketAddr) -> Front {
    front_watching(config, backend, None).0
}

/// [`front`], counting the connections whose first 64 KiB from the client
/// hold `needle` (a credential the tests prove was sent).
pub fn front_watching(
    config: Arc<rustls::ServerConfig>,
    backend: SocketAddr,
    needle: Option<Vec<u8>>,
) -> (Front, Arc<std::sync::atomic::AtomicUsize>) {
    let seen = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = Arc::clone(&seen);
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            let acceptor = tokio_rustls::TlsAcceptor::from(config);
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    continue;
                };
                let acceptor = acceptor.clone();
                let needle = needle.clone();
                let counted = Arc::clone(&counted);
                tokio::spawn(async move {
                    use tokio::io::{AsyncReadExt, AsyncWriteExt};
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let Ok(plain) = tokio::net::TcpStream::connect(backend).await else {
                        return;
                    };
                    let (mut tls_read, mut tls_write) = tokio::io::split(tls);
                    let (mut plain_read, mut plain_write) = plain.into_split();
                    let up = async move {
                        let mut head = Vec::new();
                        let mut buf = vec![0u8; 16 * 1024];
                        let mut counted_once = false;
                        loop {
                            let n = match tls_read.read(&mut buf).await {
                                Ok(0) | Err(_) => break,
                                Ok(n) => n,
                            };
                            if let (Some(needle), false) = (&needle, counted_once) {
                                if head.len() < 64 * 1024 {
                                    head.extend_from_slice(&buf[..n]);
                                    if head.windows(needle.len()).any(|w| w == needle.as_slice()) {
                                        counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                                        counted_once = true;
                                    }
                                }
                            }
                            if plain_write.write_all(&buf[..n]).await.is_err() {
                                break;
                            }
                        }
                        let _ = plain_write.shutdown().await;
                    };
                    let down = async move {
                        let _ = tokio::io::copy(&mut plain_read, &mut tls_write).await;
                        let _ = tls_write.shutdown().await;
                    };
                    tokio::join!(up, down);
                });
            }
        });
    });
    (Front { port }, seen)
}

/// The socket address of a `reqkey serve ...` base (`http://ADDR`,
/// `idem+http://ADDR`).
pub fn backend_of(base: &str) -> SocketAddr {
    base.rsplit("://").next().unwrap().parse().unwrap()
}
