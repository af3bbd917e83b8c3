//! A plain HTTP GET for the tests' servers on loopback (Prometheus, Jaeger, the admin port):
//! HTTP/1.0, so the answer is the body to the end of the connection, never chunked.

use std::io::{Read as _, Write as _};
use std::net::SocketAddr;
use std::time::Duration;

/// The body of `GET path` at `addr` when it answers 200; `None` otherwise (not listening yet,
/// another status, a broken answer).
pub fn get(addr: SocketAddr, path: &str) -> Option<String> {
    let mut stream = std::net::TcpStream::connect(addr).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).ok()?;
    let answer = String::from_utf8(answer).ok()?;
    let (head, body) = answer.split_once("\r\n\r\n")?;
    let status = head.split(' ').nth(1)?;
    (head.starts_with("HTTP/1.") && status == "200").then(|| body.to_owned())
}

/// `text` percent-encoded for a query string.
pub fn encoded(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_query_should_be_encoded_as_a_query_string_wants_it() {
        assert_eq!(
            encoded(r#"sum by (a) (x{b=~"c|d"})"#),
            "sum%20by%20%28a%29%20%28x%7Bb%3D~%22c%7Cd%22%7D%29"
        );
    }
}
