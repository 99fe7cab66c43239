//! HTTPS at every level (issue 48): the reference servers, behind a TLS
//! front whose certificate a CA the test makes signed, certify green over
//! `store+https://`, `https://` and `idem+https://` with `--cacert`; a
//! certificate the harness does not trust (another CA, another host's
//! name) is exit 2 naming the certificate, never a verdict; the common
//! self-signed certificate given with `--cacert` is trusted as curl trusts
//! it (issue 57); and a `--header` credential reaches the server and no
//! output.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;

use common::tls::{backend_of, front, front_watching, pki, self_signed};
use common::{reqkey, text, Served};

fn read_all(dir: &Path) -> String {
    let mut all = String::new();
    for name in ["certificate.md", "report.html", "junit.xml", "results.json"] {
        all.push_str(&std::fs::read_to_string(dir.join(name)).unwrap_or_default());
    }
    all
}

fn out_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("reqkey-tls-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

#[test]
fn the_reference_targets_certify_over_https_with_cacert_at_every_level() {
    let ca = pki("reqkey test CA", &["localhost", "127.0.0.1"]);
    for (serve, scheme) in [
        (&["serve", "store"][..], "store+https"),
        (&["serve", "agent"][..], "https"),
        (&["serve", "idem"][..], "idem+https"),
    ] {
        let served = Served::start(serve);
        let front = front(ca.server.clone(), backend_of(&served.base));
        let target = format!("{scheme}://localhost:{}", front.port);
        let out = out_dir(scheme);
        let o = reqkey(&[
            "certify",
            "--target",
            &target,
            "--cacert",
            ca.ca_pem.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--fuzz-cases",
            "20",
            "-q",
        ]);
        assert_eq!(o.status.code(), Some(0), "{target}: {}", text(&o));
        let certificate = std::fs::read_to_string(out.join("certificate.md")).unwrap();
        assert!(certificate.contains(&target), "{certificate}");
    }
}

#[test]
fn an_untrusted_or_mismatched_certificate_is_exit_2_naming_the_certificate() {
    let served = Served::start(&["serve", "store"]);
    let backend = backend_of(&served.base);
    let theirs = pki("someone else's CA", &["localhost", "127.0.0.1"]);
    let ours = pki("reqkey test CA", &["localhost"]);
    let untrusted = front(theirs.server.clone(), backend);
    let out = out_dir("untrusted");
    let target = format!("store+https://localhost:{}", untrusted.port);
    let o = reqkey(&[
        "certify",
        "--target",
        &target,
        "--cacert",
        ours.ca_pem.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    let said = text(&o);
    assert_eq!(o.status.code(), Some(2), "{said}");
    assert!(said.contains("certificate is refused"), "{said}");
    assert!(said.contains("issuer the harness does not trust"), "{said}");
    assert!(said.contains("issuer `CN=someone else's CA`"), "{said}");
    assert!(said.contains("DNS:localhost"), "{said}");
    let results = std::fs::read_to_string(out.join("results.json")).unwrap();
    assert!(results.contains("\"certificate\""), "{results}");

    // Without --cacert the system's roots do not hold the test's CA either.
    let o = reqkey(&["run", "--target", &target, "scenarios/store"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));

    // A certificate for another host, from a CA the harness trusts.
    let elsewhere = pki("reqkey test CA", &["other.example"]);
    let mismatched = front(elsewhere.server.clone(), backend);
    let target = format!("store+https://127.0.0.1:{}", mismatched.port);
    let o = reqkey(&[
        "run",
        "--target",
        &target,
        "--cacert",
        elsewhere.ca_pem.to_str().unwrap(),
        "scenarios/store",
    ]);
    let said = text(&o);
    assert_eq!(o.status.code(), Some(2), "{said}");
    assert!(said.contains("does not name the host"), "{said}");
    assert!(said.contains("DNS:other.example"), "{said}");

    // TLS to a plain HTTP server is no verdict either, and says why.
    let target = format!("store+https://{}", backend);
    let o = reqkey(&["run", "--target", &target, "scenarios/store"]);
    let said = text(&o);
    assert_eq!(o.status.code(), Some(2), "{said}");
    assert!(said.contains("TLS handshake failed"), "{said}");
}

/// Issue 57: `openssl req -x509` makes a CA:TRUE certificate that the
/// server presents itself; curl trusts it with `--cacert`, webpki alone
/// refused it as `Other(OtherError(CaUsedAsEndEntity))`.
#[test]
fn a_self_signed_certificate_given_with_cacert_is_trusted_as_curl_trusts_it() {
    let served = Served::start(&["serve", "store"]);
    let cert = self_signed(&["localhost"]);
    let tls = front(cert.server.clone(), backend_of(&served.base));
    let target = format!("store+https://localhost:{}", tls.port);
    let scenario = "scenarios/store/cas-mismatch.yaml";
    let o = reqkey(&[
        "run",
        "--target",
        &target,
        "--cacert",
        cert.ca_pem.to_str().unwrap(),
        scenario,
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    // Its name still holds: the same certificate for another host is refused.
    let o = reqkey(&[
        "run",
        "--target",
        &format!("store+https://127.0.0.1:{}", tls.port),
        "--cacert",
        cert.ca_pem.to_str().unwrap(),
        scenario,
    ]);
    let said = text(&o);
    assert_eq!(o.status.code(), Some(2), "{said}");
    assert!(said.contains("does not name the host"), "{said}");
    // Trusting another certificate, the refusal says what it is and the fix.
    let other = self_signed(&["localhost"]);
    let o = reqkey(&[
        "run",
        "--target",
        &target,
        "--cacert",
        other.ca_pem.to_str().unwrap(),
        scenario,
    ]);
    let said = text(&o);
    assert_eq!(o.status.code(), Some(2), "{said}");
    assert!(!said.contains("OtherError"), "{said}");
    assert!(
        said.contains("it is a CA certificate (CA:TRUE) presented as the server's own")
            && said.contains("pass this very certificate with --cacert"),
        "{said}"
    );
}

#[test]
fn a_header_credential_reaches_the_target_and_no_output() {
    const TOKEN: &str = "tok-9f3a7c-never-shown";
    const KEY: &str = "apikey-51d0e2-never-shown";
    let ca = pki("reqkey test CA", &["localhost"]);
    let served = Served::start(&["serve", "agent"]);
    let (front, seen) = front_watching(
        ca.server.clone(),
        backend_of(&served.base),
        Some(format!("authorization: Bearer {TOKEN}").into_bytes()),
    );
    let out = out_dir("header");
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_reqkey"))
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join(".."))
        .env("REQKEY_TEST_API_KEY", KEY)
        .args([
            "certify",
            "--target",
            &format!("https://localhost:{}", front.port),
            "--cacert",
            ca.ca_pem.to_str().unwrap(),
            "--header",
            &format!("Authorization: Bearer {TOKEN}"),
            "-H",
            "X-Api-Key: env:REQKEY_TEST_API_KEY",
            "--out",
            out.to_str().unwrap(),
            "--fuzz-cases",
            "5",
        ])
        .output()
        .unwrap();
    let said = text(&o);
    assert_eq!(o.status.code(), Some(0), "{said}");
    assert!(
        seen.load(std::sync::atomic::Ordering::SeqCst) > 10,
        "the credential did not reach the server"
    );
    let everything = format!("{said}{}", read_all(&out));
    for secret in [TOKEN, KEY] {
        assert!(!everything.contains(secret), "{secret} is in an output");
    }

    // An error quoting the command's arguments shows no credential either.
    let o = reqkey(&[
        "run",
        "--target",
        "https://localhost:1",
        "--header",
        &format!("Authorization: Bearer {TOKEN}"),
        "--header",
        &format!("Bad Name: {KEY}"),
        "scenarios/agent",
    ]);
    let said = text(&o);
    assert_eq!(o.status.code(), Some(2), "{said}");
    assert!(!said.contains(TOKEN) && !said.contains(KEY), "{said}");
}

#[test]
fn the_proxy_forwards_to_an_https_upstream_with_the_credentials() {
    const TOKEN: &str = "tok-proxy-6b2e90-never-shown";
    let ca = pki("reqkey test CA", &["localhost"]);
    let served = Served::start(&["serve", "agent"]);
    let (front, seen) = front_watching(
        ca.server.clone(),
        backend_of(&served.base),
        Some(format!("authorization: Bearer {TOKEN}").into_bytes()),
    );
    // A client that sends one keyed start through the proxy.
    let client = "import os, urllib.request as u\n\
        r = u.Request(os.environ['REQKEY_PROXY_URL'] + '/sessions/tls-s1/start', \
        data=b'{\"input\": \"hi\"}', method='POST', \
        headers={'content-type': 'application/json', 'x-helix-request-key': 'tls-k1'})\n\
        try:\n    u.urlopen(r, timeout=10).read()\nexcept Exception:\n    pass\n";
    let o = reqkey(&[
        "proxy",
        "--target",
        &format!("https://localhost:{}", front.port),
        "--cacert",
        ca.ca_pem.to_str().unwrap(),
        "--header",
        &format!("Authorization: Bearer {TOKEN}"),
        "--plan",
        "delay=0",
        "--",
        "python3",
        "-c",
        client,
    ]);
    let said = text(&o);
    assert!(!said.contains(TOKEN), "{said}");
    assert!(!said.contains("certificate"), "{said}");
    // /health at the start, the forwarded start, the snapshot read after.
    assert!(
        seen.load(std::sync::atomic::Ordering::SeqCst) >= 3,
        "{said}"
    );
}
