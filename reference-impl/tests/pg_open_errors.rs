//! Opening a PostgreSQL store that cannot be opened: the error carries the server's own reason.
//!
//! Issue 41: a missing database and an unknown user both read `db error`
//! and a wrong port `error connecting to server`, with the user name
//! hidden. Against the real PostgreSQL of `REQKEY_POSTGRES_URL` (default
//! `postgres://postgres@127.0.0.1:5432/test`); a server that does not
//! answer fails the test.

#![cfg(feature = "postgres")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use reqkey_reference::store::PostgresStore;

/// `(user, host:port)` of the test server.
fn server() -> (String, String) {
    let url = std::env::var("REQKEY_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
    let rest = url.split_once("://").unwrap().1;
    let (authority, _) = rest.split_once('/').unwrap_or((rest, ""));
    let (user, host) = authority
        .rsplit_once('@')
        .unwrap_or(("postgres", authority));
    let user = user.split(':').next().unwrap_or("postgres");
    (user.to_owned(), host.to_owned())
}

async fn open_error(url: &str) -> String {
    match PostgresStore::connect(url).await {
        Ok(_) => panic!("{url} opened"),
        Err(e) => e.to_string(),
    }
}

#[tokio::test]
async fn open_errors_name_the_server_reason_and_the_user_but_never_the_password() {
    let (user, host) = server();
    // The test server itself is up: otherwise every message below would
    // be a connection error and prove nothing.
    let up = format!("postgres://{user}@{host}/test");
    assert!(
        PostgresStore::connect(&up).await.is_ok(),
        "{up} does not answer"
    );

    let missing_db = open_error(&format!(
        "postgres://{user}:hunter2@{host}/reqkey_no_such_db"
    ))
    .await;
    assert!(
        missing_db.contains(r#"database "reqkey_no_such_db" does not exist"#),
        "{missing_db}"
    );
    assert!(
        missing_db.contains(&format!("postgres://{user}:***@{host}/")),
        "{missing_db}"
    );
    assert!(!missing_db.contains("hunter2"), "{missing_db}");

    let unknown_user = open_error(&format!("postgres://reqkey_no_such_user@{host}/test")).await;
    assert!(
        unknown_user.contains(r#"role "reqkey_no_such_user" does not exist"#),
        "{unknown_user}"
    );
    assert!(
        unknown_user.contains(&format!("postgres://reqkey_no_such_user@{host}/test")),
        "the user name is shown when there is no password: {unknown_user}"
    );

    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    let wrong_port = open_error(&format!("postgres://{user}@127.0.0.1:{port}/test")).await;
    assert!(
        wrong_port.to_lowercase().contains("connection refused"),
        "{wrong_port}"
    );
    assert!(
        wrong_port.contains(&format!("127.0.0.1:{port}")),
        "{wrong_port}"
    );
}
