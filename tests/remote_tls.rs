//! The cloud remotes speak TLS with ring as rustls's crypto provider
//! (Cargo.toml: object_store without aws-lc-rs; remote::install_tls_provider).
//! Without a provider, reqwest cannot build a client and no request leaves:
//! this checks that an https:// S3 endpoint gets a TLS ClientHello, from a
//! `storefs push` against a loopback listener that only reads it.

mod common;

use std::io::Read;
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use common::Env;

#[test]
fn an_https_remote_opens_a_tls_handshake() {
    let env = Env::new();
    let src = env.path("src");
    std::fs::create_dir(&src).unwrap();
    std::fs::write(src.join("a"), b"a\n").unwrap();
    env.ok([
        "snapshot".as_ref(),
        src.as_os_str(),
        "--ref".as_ref(),
        "s".as_ref(),
    ]);
    env.ok(["remote", "add", "tls", "s3://bucket/prefix"]);

    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        if let Ok((mut conn, _)) = listener.accept() {
            conn.set_read_timeout(Some(Duration::from_secs(30)))
                .unwrap();
            let mut head = [0u8; 3];
            let _ = tx.send(conn.read_exact(&mut head).map(|()| head).ok());
        }
    });
    let mut child = Command::new(env!("CARGO_BIN_EXE_storefs"))
        .arg("--store")
        .arg(&env.store)
        .args(["push", "tls", "s"])
        .env_remove("STOREFS_STORE")
        .env("AWS_ENDPOINT_URL", format!("https://127.0.0.1:{port}"))
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_REGION", "us-east-1")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let head = rx.recv_timeout(Duration::from_secs(60));
    // It retries for minutes against a server that never answers: enough.
    let _ = child.kill();
    let out = child.wait_with_output().unwrap();
    let head = head.ok().flatten();
    assert_eq!(
        head.map(|h| h[..2].to_vec()),
        Some(vec![0x16, 0x03]),
        "no TLS handshake record reached the endpoint: {}",
        common::stderr(&out)
    );
}
