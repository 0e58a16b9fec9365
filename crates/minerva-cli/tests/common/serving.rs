//! A `minerva serve` for the CLI's tests: on a free loopback port, ready once `/health`
//! answers, stopped with SIGTERM when dropped.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A `minerva serve` that is stopped with SIGTERM when dropped, the test failing or not.
pub struct Server {
    child: Child,
    pub port: u16,
}

impl Drop for Server {
    fn drop(&mut self) {
        // SAFETY: signals our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A GET on the loopback: the status line's code and the body.
pub fn get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let code = text.split_whitespace().nth(1)?.parse().ok()?;
    let body = text.split_once("\r\n\r\n")?.1.to_string();
    Some((code, body))
}

/// Serves `model` on a free port, once `/health` answers.
pub fn serve(model: &str) -> Server {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new(env!("CARGO_BIN_EXE_minerva"))
        .args(["serve", "--model", model, "--port", &port.to_string()])
        .args(["--backend", "cpu"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut server = Server { child, port };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if get(port, "/health").is_some_and(|(code, _)| code == 200) {
            return server;
        }
        if let Ok(Some(status)) = server.child.try_wait() {
            panic!("minerva serve ended before answering: {status}");
        }
        assert!(
            Instant::now() < deadline,
            "minerva serve did not answer /health"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}
