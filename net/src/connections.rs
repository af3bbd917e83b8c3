//! Accepting connections: how many, from whom, for how long — for the API server, the host's
//! admission server and its admin port alike.
//!
//! Go's `net/http` gives kube-apiserver its connection hygiene: a connection must send its first
//! request's headers within `ReadHeaderTimeout` (32 s), an idle keep-alive connection is closed
//! after `IdleTimeout` (90 s), headers are capped at `MaxHeaderBytes` (1 MiB, answered 431), and
//! the accept loop backs off (5 ms doubling to 1 s) when the process runs out of file
//! descriptors. Without them a client that opens connections and says nothing holds a
//! descriptor each until the process can accept nothing at all. [`serve`] does the same, and
//! bounds how many connections are open at once ([`Limits::max_connections`], and per peer
//! address).
//!
//! # Guarantees
//!
//! - A connection with no request in flight is *idle*; one that has had no request for
//!   [`Limits::first_request_timeout`] since it was accepted (TLS handshake included), or none
//!   for [`Limits::idle_timeout`] since its last response ended, is closed. A connection
//!   serving a request (a long watch included) is never idle.
//! - At the connection cap (the server's, per peer, or the process's: every server of the
//!   process shares its file descriptors), the connection idle the longest is closed to make
//!   room; only when every connection is serving a request is the new one refused (closed at
//!   once). So idle connections, however many, never keep a client with a request out.
//! - Accepted connections have TCP keepalive (probes after 3 minutes idle, as Go's listeners),
//!   so a vanished peer's long request (a watch) does not hold its place forever.
//! - Accept errors back off from 5 ms to 1 s (freeing an idle connection when descriptors ran
//!   out) and are logged at most once a minute, with the count of those not logged.
//! - A connection closed while its client is still sending (a 431 or 413 answered early) is
//!   read and discarded for up to [`LINGER`] after its write side is shut, so the client reads
//!   the answer rather than a reset.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::Body;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tower::ServiceExt as _;

use crate::client_certs::PeerCertificates;

/// How a server treats its connections. The defaults are kube-apiserver's (Go's `net/http` as
/// kube-apiserver configures it), plus caps Go does not have.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Most connections open at once; lowered at start to leave file descriptors for the rest
    /// of the process (see [`Limits::for_this_process`]).
    pub max_connections: usize,
    /// Most connections open at once from one address.
    pub max_per_peer: usize,
    /// Time from accepting a connection to its first request's headers, TLS handshake included
    /// (kube-apiserver's `ReadHeaderTimeout`, 32 s).
    pub first_request_timeout: Duration,
    /// Time a connection may stay without a request in flight (Go's `IdleTimeout` as
    /// kube-apiserver sets it, 90 s).
    pub idle_timeout: Duration,
    /// Largest request head (request line and headers) of HTTP/1.1, and header list of HTTP/2
    /// (`MaxHeaderBytes`, 1 MiB); a larger HTTP/1.1 head is answered 431.
    pub max_header_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 10_000,
            max_per_peer: 10_000,
            first_request_timeout: Duration::from_secs(32),
            idle_timeout: Duration::from_secs(90),
            max_header_bytes: 1 << 20,
        }
    }
}

/// File descriptors kept back from connections for everything else the process opens (guest
/// modules, the data directory, watches on manifest files, outgoing connections).
const RESERVED_DESCRIPTORS: usize = 256;

impl Limits {
    /// For a port few clients use (the admin port: Prometheus, probes, the trigger): 256
    /// connections.
    pub fn small() -> Self {
        Limits {
            max_connections: 256,
            max_per_peer: 256,
            ..Limits::default()
        }
    }

    /// The defaults, with the connection cap lowered to what this process's file-descriptor
    /// limit leaves room for (Linux; elsewhere the defaults).
    pub fn for_this_process() -> Self {
        let mut limits = Limits::default();
        if let Some(open_files) = open_files_limit() {
            let room = open_files.saturating_sub(RESERVED_DESCRIPTORS).max(16);
            limits.max_connections = limits.max_connections.min(room);
            limits.max_per_peer = limits.max_per_peer.min(limits.max_connections);
        }
        limits
    }
}

/// The soft limit on open files, from `/proc/self/limits`.
fn open_files_limit() -> Option<usize> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line.split_whitespace().nth(3)?.parse().ok()
}

/// How a connection's bytes are carried.
#[derive(Clone)]
pub enum Transport {
    /// TLS with this configuration (HTTP/1.1 or HTTP/2, as ALPN says).
    Tls(Arc<rustls::ServerConfig>),
    /// Plain TCP (the admin port).
    Plain,
}

/// Idle time before TCP keepalive probes start on an accepted connection (Go's default for
/// the listeners of `net/http`, kube-apiserver's among them).
const TCP_KEEPALIVE: Duration = Duration::from_secs(180);

/// Most headers of an HTTP/1.1 request (hyper's default is 100; Go, so kube-apiserver, bounds
/// only their bytes).
const MAX_HEADERS: usize = 4096;

/// How long a connection closed while its client still sends is drained (see the module docs).
pub const LINGER: Duration = Duration::from_secs(1);

/// How long a connection told to close at its idle or header timeout may take to close when
/// no request is in flight (a head still arriving) before it is dropped.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(1);

/// Longest pause of the accept loop after an error (Go's `Serve` backs off the same way).
const MAX_ACCEPT_BACKOFF: Duration = Duration::from_secs(1);
/// First pause after an accept error.
const MIN_ACCEPT_BACKOFF: Duration = Duration::from_millis(5);
/// How often accept errors are logged at most.
const ACCEPT_ERROR_LOG_PERIOD: Duration = Duration::from_secs(60);

/// Serve `app` on `listener` until `stopped` flips, under `limits` (see the module docs).
/// `name` says which server it is in logs.
pub async fn serve(
    name: &'static str,
    listener: TcpListener,
    transport: Transport,
    app: axum::Router,
    limits: Limits,
    mut stopped: tokio::sync::watch::Receiver<bool>,
) {
    let table = Arc::new(Table::new(limits));
    let acceptor = match &transport {
        Transport::Tls(config) => Some(tokio_rustls::TlsAcceptor::from(config.clone())),
        Transport::Plain => None,
    };
    let mut http = auto::Builder::new(TokioExecutor::new());
    // Go counts header bytes, not headers: as many as fit.
    http.http1()
        .max_buf_size(table.limits.max_header_bytes.max(8192))
        .max_headers(MAX_HEADERS);
    http.http2()
        .max_header_list_size(u32::try_from(table.limits.max_header_bytes).unwrap_or(u32::MAX));
    let http = Arc::new(http);
    let mut errors = AcceptErrors::default();
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let (stream, peer) = tokio::select! {
            _ = stopped.changed() => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => {
                    errors.backoff = Duration::ZERO;
                    accepted
                }
                Err(err) => {
                    errors.record(name, &err);
                    if is_out_of_descriptors(&err) {
                        table.evict_idlest(None);
                    }
                    let pause = errors.next_backoff();
                    tokio::select! {
                        _ = stopped.changed() => break,
                        () = tokio::time::sleep(pause) => {}
                    }
                    continue;
                }
            },
        };
        let Some(slot) = table.admit(peer.ip()) else {
            errors.refused(name, peer);
            continue;
        };
        // As Go's net/http (so kube-apiserver) does: without it, Nagle's algorithm meeting the
        // client's delayed ACK stalls small responses by 40 ms.
        if let Err(err) = stream.set_nodelay(true) {
            tracing::debug!(%peer, "setting TCP_NODELAY: {err}");
        }
        // As Go's listener does for kube-apiserver: a peer that vanished (its machine gone, a
        // network cut) is found out, so its watch does not hold a connection forever.
        let keepalive = socket2::TcpKeepalive::new().with_time(TCP_KEEPALIVE);
        if let Err(err) = socket2::SockRef::from(&stream).set_tcp_keepalive(&keepalive) {
            tracing::debug!(%peer, "setting TCP keepalive: {err}");
        }
        let connection = Connection {
            table: table.clone(),
            slot,
            peer,
            http: http.clone(),
            app: app.clone(),
        };
        let acceptor = acceptor.clone();
        connections.spawn(connection.run(Lingering::new(stream), acceptor));
        // Reap finished connections so the set does not grow.
        while connections.try_join_next().is_some() {}
    }
}

/// Whether an accept error means the process (or system) is out of file descriptors.
fn is_out_of_descriptors(err: &std::io::Error) -> bool {
    // EMFILE (24) and ENFILE (23) on Linux and the BSDs.
    matches!(err.raw_os_error(), Some(23 | 24))
}

/// The accept loop's error state: its backoff and its rate-limited log.
#[derive(Default)]
struct AcceptErrors {
    backoff: Duration,
    last_logged: Option<Instant>,
    unlogged: u64,
}

impl AcceptErrors {
    fn next_backoff(&mut self) -> Duration {
        self.backoff = if self.backoff.is_zero() {
            MIN_ACCEPT_BACKOFF
        } else {
            (self.backoff * 2).min(MAX_ACCEPT_BACKOFF)
        };
        self.backoff
    }

    /// Log `what` unless something was logged within the period; count it otherwise.
    fn log(&mut self, what: impl FnOnce(u64) -> String) {
        let now = Instant::now();
        if self
            .last_logged
            .is_some_and(|at| now.duration_since(at) < ACCEPT_ERROR_LOG_PERIOD)
        {
            self.unlogged += 1;
            return;
        }
        let message = what(self.unlogged);
        tracing::warn!("{message}");
        self.last_logged = Some(now);
        self.unlogged = 0;
    }

    fn record(&mut self, name: &str, err: &std::io::Error) {
        self.log(|unlogged| {
            format!(
                "{name}: accepting a connection: {err}; retrying with backoff ({unlogged} more such errors since the last report)"
            )
        });
    }

    fn refused(&mut self, name: &str, peer: SocketAddr) {
        self.log(|unlogged| {
            format!(
                "{name}: refused a connection from {peer}: every connection allowed is serving a request ({unlogged} more refused since the last report)"
            )
        });
    }
}

/// The open connections, for the caps and for choosing which idle one to close.
struct Table {
    limits: Limits,
    /// When the table was made: the origin of the slots' idle clocks.
    epoch: Instant,
    open: Mutex<Open>,
}

#[derive(Default)]
struct Open {
    next_id: u64,
    slots: HashMap<u64, Arc<Slot>>,
    per_peer: HashMap<IpAddr, usize>,
}

/// One open connection's state, shared by its task and the table.
struct Slot {
    id: u64,
    peer: IpAddr,
    /// Requests in flight (a response counts until its body has been sent or dropped).
    busy: AtomicUsize,
    /// Milliseconds since the table's epoch when the connection last became idle.
    idle_since: AtomicU64,
    /// Whether it has had a request yet.
    used: std::sync::atomic::AtomicBool,
    /// Whether it has been told to close (it is not chosen again).
    closing: std::sync::atomic::AtomicBool,
    /// Told to close (to make room for another).
    close: tokio::sync::Notify,
}

impl Table {
    fn new(limits: Limits) -> Self {
        Table {
            limits,
            epoch: Instant::now(),
            open: Mutex::default(),
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// A slot for a new connection from `peer`, making room by closing the idlest connection
    /// (of that peer, when it is the peer's cap that is reached); `None` when there is no room.
    fn admit(&self, peer: IpAddr) -> Option<Arc<Slot>> {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let from_peer = open.per_peer.get(&peer).copied().unwrap_or(0);
        if from_peer >= self.limits.max_per_peer {
            self.evict_locked(&open, Some(peer))?;
        } else if open.slots.len() >= self.limits.max_connections
            || IN_PROCESS.load(Ordering::Acquire) >= process_room()
        {
            self.evict_locked(&open, None)?;
        }
        IN_PROCESS.fetch_add(1, Ordering::AcqRel);
        open.next_id += 1;
        let slot = Arc::new(Slot {
            id: open.next_id,
            peer,
            busy: AtomicUsize::new(0),
            idle_since: AtomicU64::new(self.now_ms()),
            used: false.into(),
            closing: false.into(),
            close: tokio::sync::Notify::new(),
        });
        open.slots.insert(slot.id, slot.clone());
        *open.per_peer.entry(peer).or_insert(0) += 1;
        Some(slot)
    }

    /// Close the connection idle the longest (of `peer`, if given); `None` when none is idle.
    fn evict_idlest(&self, peer: Option<IpAddr>) -> Option<()> {
        let open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        self.evict_locked(&open, peer)
    }

    fn evict_locked(&self, open: &Open, peer: Option<IpAddr>) -> Option<()> {
        let idlest = open
            .slots
            .values()
            .filter(|s| {
                peer.is_none_or(|p| s.peer == p)
                    && s.busy.load(Ordering::Acquire) == 0
                    && !s.closing.load(Ordering::Acquire)
            })
            .min_by_key(|s| s.idle_since.load(Ordering::Relaxed))?;
        // Told once, it closes at its next poll; the slot itself goes when its task ends, so
        // the count stays honest meanwhile (the new connection is let in regardless, and a
        // burst of them each closes another).
        idlest.closing.store(true, Ordering::Release);
        idlest.close.notify_one();
        Some(())
    }

    fn remove(&self, slot: &Slot) {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if open.slots.remove(&slot.id).is_none() {
            return;
        }
        IN_PROCESS.fetch_sub(1, Ordering::AcqRel);
        if let Some(count) = open.per_peer.get_mut(&slot.peer) {
            *count -= 1;
            if *count == 0 {
                open.per_peer.remove(&slot.peer);
            }
        }
    }
}

/// Connections open in this process, over every server in it (`krec dev` runs the API server,
/// the admission server and the admin port in one process, sharing its file descriptors).
static IN_PROCESS: AtomicUsize = AtomicUsize::new(0);

/// How many connections this process's open-files limit leaves room for, over all its servers.
fn process_room() -> usize {
    static ROOM: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *ROOM.get_or_init(|| {
        open_files_limit().map_or(usize::MAX, |open| {
            open.saturating_sub(RESERVED_DESCRIPTORS).max(16)
        })
    })
}

/// Removes its slot from the table when the connection's task ends, however it ends.
struct Admitted {
    table: Arc<Table>,
    slot: Arc<Slot>,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        self.table.remove(&self.slot);
    }
}

/// A request in flight on a slot; the slot is idle again when the last one is dropped.
struct InFlight {
    slot: Arc<Slot>,
    table: Arc<Table>,
}

impl InFlight {
    fn begin(slot: &Arc<Slot>, table: &Arc<Table>) -> Self {
        slot.used.store(true, Ordering::Relaxed);
        slot.busy.fetch_add(1, Ordering::AcqRel);
        InFlight {
            slot: slot.clone(),
            table: table.clone(),
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.slot
            .idle_since
            .store(self.table.now_ms(), Ordering::Relaxed);
        self.slot.busy.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A response body that holds its request's [`InFlight`] until it has been sent or dropped.
struct Tracked {
    body: Body,
    _in_flight: InFlight,
}

impl http_body::Body for Tracked {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// One accepted connection being served.
struct Connection {
    table: Arc<Table>,
    slot: Arc<Slot>,
    peer: SocketAddr,
    http: Arc<auto::Builder<TokioExecutor>>,
    app: axum::Router,
}

impl Connection {
    async fn run(self, stream: Lingering, acceptor: Option<tokio_rustls::TlsAcceptor>) {
        let Connection {
            table,
            slot,
            peer,
            http,
            app,
        } = self;
        let _admitted = Admitted {
            table: table.clone(),
            slot: slot.clone(),
        };
        // Each request carries the client certificates of its connection, if any.
        let service = |peer_certs: Option<PeerCertificates>| {
            let (table, slot) = (table.clone(), slot.clone());
            hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
                let in_flight = InFlight::begin(&slot, &table);
                let app = app.clone();
                if let Some(certs) = &peer_certs {
                    request.extensions_mut().insert(certs.clone());
                }
                async move {
                    let response = app.oneshot(request.map(Body::new)).await?;
                    Ok::<_, std::convert::Infallible>(response.map(|body| {
                        Body::new(Tracked {
                            body,
                            _in_flight: in_flight,
                        })
                    }))
                }
            })
        };
        let limits = &table.limits;
        let served = async {
            match acceptor {
                Some(acceptor) => {
                    let handshake =
                        tokio::time::timeout(limits.first_request_timeout, acceptor.accept(stream));
                    match handshake.await {
                        Ok(Ok(tls)) => {
                            let certs = tls.get_ref().1.peer_certificates().map(|chain| {
                                PeerCertificates(Arc::new(
                                    chain.iter().map(|c| c.clone().into_owned()).collect(),
                                ))
                            });
                            let service = service(certs);
                            serve_connection(&http, TokioIo::new(tls), service, &table, &slot).await
                        }
                        Ok(Err(err)) => tracing::debug!(%peer, "TLS handshake failed: {err}"),
                        Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
                    }
                }
                None => {
                    serve_connection(&http, TokioIo::new(stream), service(None), &table, &slot)
                        .await
                }
            }
        };
        tokio::select! {
            () = served => {}
            () = slot.close.notified() => tracing::debug!(%peer, "closing an idle connection to make room"),
        }
    }
}

/// Serve HTTP on `io` until the client closes, an error, or the connection stays idle too long.
async fn serve_connection<I, S>(
    http: &auto::Builder<TokioExecutor>,
    io: I,
    service: S,
    table: &Table,
    slot: &Slot,
) where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    S: hyper::service::Service<
            hyper::Request<Incoming>,
            Response = hyper::Response<Body>,
            Error = std::convert::Infallible,
        > + Send
        + 'static,
    S::Future: Send + 'static,
{
    let connection = http.serve_connection_with_upgrades(io, service);
    tokio::pin!(connection);
    loop {
        let limit = if slot.used.load(Ordering::Relaxed) {
            table.limits.idle_timeout
        } else {
            table.limits.first_request_timeout
        };
        let idle_for = Duration::from_millis(
            table
                .now_ms()
                .saturating_sub(slot.idle_since.load(Ordering::Relaxed)),
        );
        let busy = slot.busy.load(Ordering::Acquire) > 0;
        if !busy && idle_for >= limit {
            // Idle past its limit: HTTP/1 closes at once, HTTP/2 says GOAWAY first; a request
            // that arrived meanwhile is served to its end. A request head begun and never
            // finished holds hyper's graceful close forever: dropped once nothing is in flight
            // for a grace period, as Go's `ReadHeaderTimeout` closes such a connection.
            connection.as_mut().graceful_shutdown();
            loop {
                tokio::select! {
                    _ = connection.as_mut() => return,
                    () = tokio::time::sleep(SHUTDOWN_GRACE) => {
                        if slot.busy.load(Ordering::Acquire) == 0 {
                            tracing::debug!("closing a connection whose request head never ended");
                            return;
                        }
                    }
                }
            }
        }
        let check_in = if busy { limit } else { limit - idle_for };
        tokio::select! {
            result = connection.as_mut() => {
                if let Err(err) = result {
                    tracing::debug!("connection ended: {err}");
                }
                return;
            }
            () = tokio::time::sleep(check_in) => {}
        }
    }
}

/// A TCP stream that, dropped while its client is still sending, drains what arrives for up to
/// [`LINGER`] after shutting its write side, so that an answer sent early (431, 413) is read
/// rather than lost to a reset.
struct Lingering(Option<TcpStream>);

impl Lingering {
    fn new(stream: TcpStream) -> Self {
        Lingering(Some(stream))
    }

    /// The stream (taken only when dropped).
    fn stream(self: Pin<&mut Self>) -> std::io::Result<Pin<&mut TcpStream>> {
        match self.get_mut().0.as_mut() {
            Some(stream) => Ok(Pin::new(stream)),
            None => Err(std::io::ErrorKind::NotConnected.into()),
        }
    }
}

/// Poll `$call` on the stream of a pinned [`Lingering`].
macro_rules! on_stream {
    ($self:ident, $stream:ident => $call:expr) => {
        match $self.stream() {
            Ok($stream) => $call,
            Err(err) => Poll::Ready(Err(err)),
        }
    };
}

impl Drop for Lingering {
    fn drop(&mut self) {
        let Some(stream) = self.0.take() else { return };
        let mut probe = [0u8; 1];
        // Nothing unread: close at once (the common case).
        if !matches!(stream.try_read(&mut probe), Ok(n) if n > 0) {
            return;
        }
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        handle.spawn(async move {
            use tokio::io::AsyncReadExt as _;
            use tokio::io::AsyncWriteExt as _;
            let mut stream = stream;
            let _ = stream.shutdown().await;
            let mut sink = vec![0u8; 16 << 10];
            let drain = async { while matches!(stream.read(&mut sink).await, Ok(n) if n > 0) {} };
            let _ = tokio::time::timeout(LINGER, drain).await;
        });
    }
}

impl AsyncRead for Lingering {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        on_stream!(self, stream => stream.poll_read(cx, buf))
    }
}

impl AsyncWrite for Lingering {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        on_stream!(self, stream => stream.poll_write(cx, buf))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        on_stream!(self, stream => stream.poll_flush(cx))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        on_stream!(self, stream => stream.poll_shutdown(cx))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        on_stream!(self, stream => stream.poll_write_vectored(cx, bufs))
    }

    fn is_write_vectored(&self) -> bool {
        self.0.as_ref().is_some_and(|s| s.is_write_vectored())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(max: usize, per_peer: usize) -> Limits {
        Limits {
            max_connections: max,
            max_per_peer: per_peer,
            ..Limits::default()
        }
    }

    fn peer(last: u8) -> IpAddr {
        IpAddr::from([127, 0, 0, last])
    }

    #[test]
    fn accept_errors_should_back_off_to_a_second_and_be_logged_once_a_period() {
        let mut errors = AcceptErrors::default();
        let pauses: Vec<Duration> = (0..10).map(|_| errors.next_backoff()).collect();
        assert_eq!(pauses[0], MIN_ACCEPT_BACKOFF);
        assert_eq!(pauses[1], MIN_ACCEPT_BACKOFF * 2);
        assert_eq!(pauses[9], MAX_ACCEPT_BACKOFF);
        let mut logged = 0;
        for _ in 0..1000 {
            errors.log(|_| {
                logged += 1;
                String::new()
            });
        }
        assert_eq!(logged, 1, "one line, the rest counted");
        assert_eq!(errors.unlogged, 999);
    }

    #[tokio::test]
    async fn the_cap_should_close_the_idlest_connection_and_refuse_only_when_all_are_busy() {
        let table = Arc::new(Table::new(limits(2, 2)));
        let first = table.admit(peer(1)).expect("room");
        let second = table.admit(peer(1)).expect("room");
        // The first has served a request and gone idle after the second: the second is idlest.
        drop(InFlight::begin(&first, &table));
        second.idle_since.store(0, Ordering::Relaxed);
        first.idle_since.store(5, Ordering::Relaxed);
        let third = table.admit(peer(2));
        assert!(third.is_some(), "room made");
        let told = tokio::time::timeout(Duration::from_millis(10), second.close.notified()).await;
        assert!(told.is_ok(), "the idlest connection was told to close");
        // Every connection busy: no room.
        table.remove(&second);
        let _first_busy = InFlight::begin(&first, &table);
        let _third_busy = InFlight::begin(third.as_ref().expect("third"), &table);
        assert!(table.admit(peer(3)).is_none());
    }

    #[tokio::test]
    async fn a_peers_cap_should_make_room_among_its_own_connections() {
        let table = Arc::new(Table::new(limits(10, 1)));
        let mine = table.admit(peer(1)).expect("room");
        let theirs = table.admit(peer(2)).expect("another peer");
        assert!(table.admit(peer(1)).is_some(), "my idle one goes");
        let told = tokio::time::timeout(Duration::from_millis(10), mine.close.notified()).await;
        assert!(told.is_ok());
        let untouched =
            tokio::time::timeout(Duration::from_millis(10), theirs.close.notified()).await;
        assert!(
            untouched.is_err(),
            "another peer's connection is not closed"
        );
    }
}
