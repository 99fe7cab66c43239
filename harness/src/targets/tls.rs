//! TLS to a target (`https://`, `store+https://`, `idem+https://`): one
//! rustls client configuration for every HTTP use of the harness (reqwest
//! takes it preconfigured, the exact-bytes writer of `wire.rs` and the
//! proxy's upstream client use the same), and the name of a certificate
//! the harness refused.
//!
//! Why these choices: rustls with ring needs no OpenSSL at build time and
//! no C toolchain beyond ring's own. The roots are the system's
//! (`rustls-native-certs`: `/etc/ssl/certs` and `SSL_CERT_FILE`), not a
//! snapshot compiled in (`webpki-roots`): a staging server signed by a
//! company CA that the machine trusts is trusted here too, the way curl
//! trusts it; `--cacert PEM` adds a private CA on top. Only HTTP/1.1 is
//! offered (ALPN), as over plain TCP.
//!
//! A certificate the harness does not trust is never a verdict: it is
//! [`TargetError::Certificate`](crate::targets::TargetError) (exit 2),
//! naming the certificate (subject, issuer, validity, names) read in a
//! second handshake that only looks at it ([`name_certificate`]) and sends
//! nothing.

use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

/// The largest `--cacert` file read.
const MAX_CACERT_BYTES: u64 = 1024 * 1024;
/// The longest subject or issuer a refusal quotes (a hostile target's
/// certificate can hold any text; reports quote it inert).
const MAX_NAME_CHARS: usize = 200;

/// ring's provider: rustls 0.23.48 deprecates it for lacking the
/// post-quantum hybrid key exchange, which only aws-lc-rs offers; aws-lc-rs
/// needs cmake and a C build the machines of this project should not
/// need. The classical groups it offers are what a staging server speaks.
#[allow(deprecated)]
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The client configuration trusting the system's roots and the
/// certificates of `cacert` (a PEM file of one or more certificates).
/// A file that cannot be read or holds no certificate is an error naming
/// it; a system without roots is not (a private CA may be all there is).
///
/// As curl with `--cacert`, a server that presents one of `cacert`'s
/// certificates itself is trusted once its name and dates hold
/// ([`CacertVerifier`]): the common self-signed certificate (`openssl req
/// -x509`, CA:TRUE) included, which webpki alone refuses as a CA used as an
/// end entity.
pub fn client_config(cacert: Option<&Path>) -> Result<Arc<ClientConfig>, String> {
    let mut roots = RootCertStore::empty();
    let native = rustls_native_certs::load_native_certs();
    let (_added, _ignored) = roots.add_parsable_certificates(native.certs);
    let mut given = Vec::new();
    if let Some(path) = cacert {
        for cert in read_pem_certificates(path)? {
            roots
                .add(cert.clone())
                .map_err(|e| format!("--cacert {}: {e}", path.display()))?;
            given.push(cert);
        }
    }
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?;
    let mut config = if given.is_empty() {
        builder.with_root_certificates(roots).with_no_client_auth()
    } else {
        let chain = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider())
            .build()
            .map_err(|e| format!("TLS: {e}"))?;
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(CacertVerifier { chain, given }))
            .with_no_client_auth()
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The verifier with `--cacert`: webpki's chain to the system's roots and
/// `--cacert`'s certificates first; where it refuses, a server
/// certificate that is byte for byte one of `--cacert`'s is trusted as
/// curl trusts it, after the checks that still apply to it (the host's
/// name, its dates). The handshake's signatures are always webpki's.
#[derive(Debug)]
struct CacertVerifier {
    chain: Arc<WebPkiServerVerifier>,
    given: Vec<CertificateDer<'static>>,
}

impl ServerCertVerifier for CacertVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let refused = match self.chain.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        ) {
            Ok(verified) => return Ok(verified),
            Err(e) => e,
        };
        if !self.given.iter().any(|c| c.as_ref() == end_entity.as_ref()) {
            return Err(refused);
        }
        let parsed = rustls::server::ParsedCertificate::try_from(end_entity)?;
        rustls::client::verify_server_name(&parsed, server_name)?;
        within_dates(end_entity, now)?;
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.chain.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.chain.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.chain.supported_verify_schemes()
    }
}

/// Whether `now` falls within the certificate's validity.
fn within_dates(der: &[u8], now: UnixTime) -> Result<(), rustls::Error> {
    use rustls::CertificateError as C;
    use x509_parser::prelude::FromDer;
    let (_, cert) = x509_parser::prelude::X509Certificate::from_der(der)
        .map_err(|_| rustls::Error::InvalidCertificate(C::BadEncoding))?;
    let now = i64::try_from(now.as_secs()).unwrap_or(i64::MAX);
    let validity = cert.validity();
    if now < validity.not_before.timestamp() {
        return Err(rustls::Error::InvalidCertificate(C::NotValidYet));
    }
    if now > validity.not_after.timestamp() {
        return Err(rustls::Error::InvalidCertificate(C::Expired));
    }
    Ok(())
}

/// The certificates of a PEM file (bounded), at least one.
fn read_pem_certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    use std::io::Read as _;
    let shown = path.display();
    let file = std::fs::File::open(path).map_err(|e| format!("--cacert {shown}: {e}"))?;
    let mut bytes = Vec::new();
    file.take(MAX_CACERT_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("--cacert {shown}: {e}"))?;
    if bytes.len() as u64 > MAX_CACERT_BYTES {
        return Err(format!(
            "--cacert {shown}: larger than {MAX_CACERT_BYTES} bytes"
        ));
    }
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("--cacert {shown}: not PEM certificates: {e}"))?;
    if certs.is_empty() {
        return Err(format!(
            "--cacert {shown}: no certificate (-----BEGIN CERTIFICATE-----) in it"
        ));
    }
    Ok(certs)
}

/// The configuration with the system's roots only, built once (the
/// default of every target opened without `--cacert`).
pub fn default_config() -> Result<Arc<ClientConfig>, String> {
    static DEFAULT: OnceLock<Result<Arc<ClientConfig>, String>> = OnceLock::new();
    DEFAULT.get_or_init(|| client_config(None)).clone()
}

/// The TLS server name of `host` (a DNS name or an IP address, brackets
/// of an IPv6 literal dropped).
pub fn server_name(host: &str) -> Result<ServerName<'static>, String> {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    ServerName::try_from(bare.to_owned()).map_err(|_| format!("`{host}` is not a TLS server name"))
}

/// A TLS connection to `host` (its name as the certificate must carry it)
/// over `tcp`.
pub async fn connect(
    config: Arc<ClientConfig>,
    host: &str,
    tcp: TcpStream,
) -> std::io::Result<TlsStream<TcpStream>> {
    let name = server_name(host).map_err(std::io::Error::other)?;
    TlsConnector::from(config).connect(name, tcp).await
}

/// The `HOST` of `HOST:PORT` (an IPv6 literal keeps its brackets).
pub fn host_of(authority: &str) -> &str {
    match authority.rsplit_once(':') {
        Some((host, port)) if port.bytes().all(|b| b.is_ascii_digit()) => host,
        _ => authority,
    }
}

/// Why rustls refused a certificate or the handshake failed, in words,
/// with what to do about it (never a debug string: issue 57 met
/// `Other(OtherError(CaUsedAsEndEntity))`).
pub fn reason(e: &rustls::Error) -> String {
    use rustls::CertificateError as C;
    let text = match e {
        rustls::Error::InvalidCertificate(c) => match c {
            C::UnknownIssuer => {
                "it is signed by an issuer the harness does not trust: pass the issuing CA's \
                 certificate (PEM) with --cacert, or the server's own certificate when it is \
                 self-signed"
            }
            C::NotValidForName | C::NotValidForNameContext { .. } => {
                return format!(
                    "it does not name the host the target names{}: name in --target a host the \
                     certificate is for, or serve a certificate for this host",
                    match c {
                        C::NotValidForNameContext { presented, .. } if !presented.is_empty() => {
                            format!(
                                " (it is for {})",
                                presented
                                    .iter()
                                    .take(8)
                                    .map(|n| n.chars().take(MAX_NAME_CHARS).collect::<String>())
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            )
                        }
                        _ => String::new(),
                    }
                );
            }
            C::Expired | C::ExpiredContext { .. } => {
                "it has expired: renew the server's certificate (or check this machine's clock)"
            }
            C::NotValidYet | C::NotValidYetContext { .. } => {
                "it is not valid yet: check the clocks of this machine and the server"
            }
            C::BadEncoding => {
                "it is not a well-formed X.509 certificate: serve a PEM/DER certificate"
            }
            C::BadSignature => {
                "its signature does not verify: it was not issued by the CA that names it, or it \
                 is damaged"
            }
            C::UnsupportedSignatureAlgorithmContext { .. }
            | C::UnsupportedSignatureAlgorithmForPublicKeyContext { .. } => {
                "it is signed with an algorithm the harness does not verify (it takes RSA \
                 PKCS#1 and PSS, ECDSA P-256 and P-384, Ed25519): reissue it with one of them"
            }
            C::InvalidPurpose | C::InvalidPurposeContext { .. } => {
                "it is not issued for TLS servers (its extended key usage lacks serverAuth): \
                 reissue it for server authentication"
            }
            C::UnhandledCriticalExtension => {
                "it carries a critical extension the harness does not understand: reissue it \
                 without it"
            }
            C::Revoked => "it is revoked: serve a current certificate",
            C::Other(other) if format!("{other:?}").contains("CaUsedAsEndEntity") => {
                "it is a CA certificate (CA:TRUE) presented as the server's own, and not the one \
                 --cacert gives: pass this very certificate with --cacert (it is then trusted \
                 as curl --cacert trusts it), or serve a certificate that CA issued"
            }
            other => {
                return format!(
                    "it is refused ({other}): check the certificate the server presents and \
                     the --cacert given"
                )
            }
        },
        rustls::Error::NoCertificatesPresented => {
            "the server presented no certificate: configure one for TLS"
        }
        rustls::Error::AlertReceived(alert) => {
            return format!(
                "the server ended the handshake with the TLS alert {alert:?}: check that it \
                 serves this host name over TLS 1.2 or 1.3"
            )
        }
        rustls::Error::PeerIncompatible(_) => {
            "the server and the harness share no TLS version or cipher suite (the harness \
             offers TLS 1.2 and 1.3 with ring's suites)"
        }
        rustls::Error::InvalidMessage(_) | rustls::Error::InappropriateMessage { .. } => {
            "what answered does not speak TLS: is the target serving TLS on that port? (use \
             idem+http://, store+http:// or http:// for plain HTTP)"
        }
        other => {
            return format!(
                "{other}: is the target serving TLS on that port, with a certificate --cacert \
                 or the system trusts?"
            )
        }
    };
    text.to_owned()
}

/// Is `e` the harness refusing the target's certificate (rather than a
/// handshake that failed for another reason)?
pub fn is_certificate_refusal(e: &rustls::Error) -> bool {
    matches!(
        e,
        rustls::Error::InvalidCertificate(_) | rustls::Error::NoCertificatesPresented
    )
}

/// Reads the certificate `authority` (`HOST:PORT`) presents under the
/// name `host`, in a handshake that checks nothing and sends no request,
/// and names it: subject, issuer, validity and the names it is for.
/// `None` when no certificate could be read (bounded by `timeout`).
pub async fn name_certificate(authority: &str, timeout: Duration) -> Option<String> {
    let seen = Arc::new(Capture::default());
    let mut config = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .ok()?
        .dangerous()
        .with_custom_certificate_verifier(seen.clone())
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let host = host_of(authority).to_owned();
    let probe = async {
        let tcp = TcpStream::connect(authority).await.ok()?;
        let _ = connect(Arc::new(config), &host, tcp).await;
        Some(())
    };
    let _ = tokio::time::timeout(timeout, probe).await;
    let der = seen
        .end_entity
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone()?;
    Some(describe(&der))
}

/// A certificate (DER) as one line: subject, issuer, validity, names.
pub fn describe(der: &[u8]) -> String {
    use x509_parser::prelude::{FromDer, GeneralName, X509Certificate};
    let Ok((_, cert)) = X509Certificate::from_der(der) else {
        return "a certificate that is not X.509 DER".to_owned();
    };
    let cut = |s: String| -> String {
        let mut t: String = s.chars().take(MAX_NAME_CHARS).collect();
        if t.len() < s.len() {
            t.push('…');
        }
        t
    };
    let names: Vec<String> = cert
        .subject_alternative_name()
        .ok()
        .flatten()
        .map(|san| {
            san.value
                .general_names
                .iter()
                .take(8)
                .map(|n| match n {
                    GeneralName::DNSName(d) => format!("DNS:{d}"),
                    GeneralName::IPAddress(ip) => match ip.len() {
                        4 => format!("IP:{}.{}.{}.{}", ip[0], ip[1], ip[2], ip[3]),
                        _ => "IP:(v6)".to_owned(),
                    },
                    other => format!("{other:?}"),
                })
                .collect()
        })
        .unwrap_or_default();
    let validity = cert.validity();
    format!(
        "subject `{}`, issuer `{}`, valid {} to {}{}",
        cut(cert.subject().to_string()),
        cut(cert.issuer().to_string()),
        validity.not_before,
        validity.not_after,
        if names.is_empty() {
            String::new()
        } else {
            format!(", for {}", cut(names.join(" ")))
        }
    )
}

/// A verifier that keeps the end-entity certificate and accepts it: used
/// only by [`name_certificate`], whose connection carries nothing.
#[derive(Debug, Default)]
struct Capture {
    end_entity: Mutex<Option<Vec<u8>>>,
}

impl ServerCertVerifier for Capture {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        *self
            .end_entity
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(end_entity.to_vec());
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Ok(HandshakeSignatureValid::assertion())
    }

    fn verify_tls13_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Ok(HandshakeSignatureValid::assertion())
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        provider()
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// The rustls error somewhere in `e`'s chain of causes (an I/O error's
/// inner error included), if any.
pub fn rustls_cause<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a rustls::Error> {
    // An I/O error's `source` skips the error it wraps (and connectors
    // wrap I/O errors in I/O errors), so the inner one is walked too.
    let mut stack: Vec<&(dyn std::error::Error + 'static)> = vec![e];
    // Bounded: a chain of causes is finite and short.
    for _ in 0..64 {
        let c = stack.pop()?;
        if let Some(r) = c.downcast_ref::<rustls::Error>() {
            return Some(r);
        }
        if let Some(inner) = c
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
        {
            stack.push(inner);
        }
        if let Some(next) = c.source() {
            stack.push(next);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cacert_that_is_no_certificate_is_refused_by_name() {
        let dir = std::env::temp_dir().join(format!("reqkey-tls-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let empty = dir.join("empty.pem");
        let _ = std::fs::write(&empty, "not a certificate\n");
        let e = client_config(Some(&empty)).err().unwrap_or_default();
        assert!(
            e.contains("empty.pem") && e.contains("no certificate"),
            "{e}"
        );
        let e = client_config(Some(&dir.join("missing.pem")))
            .err()
            .unwrap_or_default();
        assert!(e.contains("missing.pem"), "{e}");
        assert!(client_config(None).is_ok());
    }

    #[test]
    fn hosts_and_server_names() {
        assert_eq!(host_of("example.test:443"), "example.test");
        assert_eq!(host_of("[::1]:8443"), "[::1]");
        assert!(server_name("127.0.0.1").is_ok());
        assert!(server_name("[::1]").is_ok());
        assert!(server_name("bad host").is_err());
    }
}
