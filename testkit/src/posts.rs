//! [`receive_posts`]: a loopback HTTP/1.1 server that hands each request's body to a closure and
//! answers `200` — what an OTLP/HTTP collector looks like to an exporter.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;

/// Serve on a free loopback port until the process ends: each request (connections kept
/// alive) is read whole and `on_request(path, body)` called, then answered `200` with no body.
/// Its address.
pub fn receive_posts(on_request: impl Fn(&str, Vec<u8>) + Send + Sync + 'static) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    let address = listener.local_addr().expect("the bound address");
    let on_request = Arc::new(on_request);
    std::thread::spawn(move || {
        for connection in listener.incoming().flatten() {
            let on_request = on_request.clone();
            std::thread::spawn(move || serve(connection, &*on_request));
        }
    });
    address
}

/// Answer one connection's requests until it closes.
fn serve(connection: TcpStream, on_request: &dyn Fn(&str, Vec<u8>)) {
    let Ok(mut writer) = connection.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(connection);
    while let Some((path, length)) = head(&mut reader) {
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        on_request(&path, body);
        let answer =
            "HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n";
        if writer.write_all(answer.as_bytes()).is_err() {
            return;
        }
    }
}

/// A request's path and `content-length`, read up to the blank line; `None` at the end.
fn head(reader: &mut impl BufRead) -> Option<(String, usize)> {
    let (mut path, mut length) = (String::new(), 0);
    let mut line = String::new();
    loop {
        line.clear();
        if reader.read_line(&mut line).ok()? == 0 {
            return None;
        }
        let trimmed = line.trim_end();
        if trimmed.is_empty() {
            return Some((path, length));
        }
        if path.is_empty() {
            path = trimmed.split(' ').nth(1).unwrap_or_default().to_owned();
        } else if let Some((name, value)) = trimmed.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse().unwrap_or(0);
        }
    }
}
