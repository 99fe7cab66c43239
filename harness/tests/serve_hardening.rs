//! `reqkey serve store|agent` as real processes under hostile conditions
//! (issue 15): a flood of idle connections against a process limited to
//! 256 file descriptors (F5), and a `kill -9` in the middle of a run on
//! every durable store (F4).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A bound no correct answer comes near.
const PROMPT: Duration = Duration::from_secs(2);

/// A `reqkey serve ...` process; killed (SIGKILL) when dropped.
struct Served {
    child: Child,
    addr: String,
}

impl Served {
    /// Starts `reqkey ARGS --listen 127.0.0.1:0` with at most `nofile` open
    /// file descriptors, and reads the address from its first line.
    fn start(args: &[&str], nofile: Option<u32>) -> Served {
        let bin = env!("CARGO_BIN_EXE_reqkey");
        let mut command = match nofile {
            Some(n) => {
                let mut c = Command::new("sh");
                c.args(["-c", &format!("ulimit -n {n} && exec \"$@\""), "sh", bin]);
                c
            }
            None => Command::new(bin),
        };
        let mut child = command
            .args(args)
            .args(["--listen", "127.0.0.1:0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let addr = line
            .trim()
            .strip_prefix("listening on http://")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .to_owned();
        Served { child, addr }
    }

    /// `kill -9`, and wait for the process to be gone.
    fn kill9(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Reads until the peer closes or `bound` passes.
async fn read_until_closed(stream: &mut TcpStream, bound: Duration) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + bound;
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => return out,
            Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
        }
    }
}

/// The status of one `GET /health` on a fresh connection, within PROMPT.
async fn health_status(addr: &str) -> Option<u16> {
    let attempt = async {
        let mut s = TcpStream::connect(addr).await.ok()?;
        s.write_all(b"GET /health HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            .await
            .ok()?;
        let bytes = read_until_closed(&mut s, PROMPT).await;
        String::from_utf8_lossy(&bytes)
            .split(' ')
            .nth(1)
            .and_then(|c| c.parse().ok())
    };
    tokio::time::timeout(PROMPT, attempt).await.ok().flatten()
}

/// F5: 600 idle connections to a server limited to 256 descriptors; a
/// fresh client must still be answered promptly.
async fn fresh_client_is_served_through_an_idle_flood(args: &[&str]) {
    let served = Served::start(args, Some(256));
    assert_eq!(health_status(&served.addr).await, Some(200));
    let mut idle = Vec::new();
    for i in 0..600 {
        // A server that stops accepting fills its backlog: connects hang.
        let connect = tokio::time::timeout(PROMPT, TcpStream::connect(&served.addr)).await;
        match connect {
            Ok(Ok(s)) => idle.push(s),
            other => panic!("idle connection {i} could not connect within {PROMPT:?}: {other:?}"),
        }
    }
    let started = Instant::now();
    assert_eq!(
        health_status(&served.addr).await,
        Some(200),
        "no answer to a fresh client after 600 idle connections ({args:?})"
    );
    assert!(started.elapsed() < PROMPT);
    drop(idle);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_store_answers_a_fresh_client_through_600_idle_connections() {
    fresh_client_is_served_through_an_idle_flood(&["serve", "store", "--store", "memory"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_agent_answers_a_fresh_client_through_600_idle_connections() {
    fresh_client_is_served_through_an_idle_flood(&["serve", "agent", "--store", "memory"]).await;
}
