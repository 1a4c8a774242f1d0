//! Noticing a client that went away while the proxy still waits for the provider's
//! answer head. actix-web notices a closed connection only when it writes to it
//! (actix-web#1313), so without this a client that gave up would keep its upstream call
//! running, and its reservation held, until the provider answered (minutes, for a long
//! generation). Each proxy connection gets a watcher at accept time: a second handle on
//! the same socket (a duplicated descriptor) that only ever peeks, so it never takes a
//! byte from the HTTP dispatcher. A peek that sees end-of-stream (or an error) means
//! the client is gone.
//!
//! A client that half-closes its side right after sending a request counts as gone; no
//! mainstream HTTP client does that. On an https listener the watcher peeks at the TCP
//! socket beneath the TLS session: a client that closes its connection is seen the
//! same way, while one that first sends a TLS `close_notify` alert (bytes, to a peek)
//! makes the watch stand down, and is noticed when its answer is written, as before.
//! Connections of another kind (Unix sockets) get no watcher.

use std::any::Any;
use std::os::fd::AsFd;
use std::rc::Rc;

use actix_web::dev::Extensions;
use actix_web::HttpRequest;

/// The watcher of one connection (see the module documentation).
#[derive(Clone)]
struct PeerWatch(Rc<tokio::net::TcpStream>);

/// The `on_connect` hook of the proxy listener.
pub fn on_connect(io: &dyn Any, ext: &mut Extensions) {
    type Tls = actix_tls::accept::rustls_0_23::TlsStream<actix_web::rt::net::TcpStream>;
    let tcp = match io.downcast_ref::<actix_web::rt::net::TcpStream>() {
        Some(tcp) => tcp,
        None => match io.downcast_ref::<Tls>() {
            Some(tls) => tls.get_ref().0,
            None => return,
        },
    };
    let Ok(fd) = tcp.as_fd().try_clone_to_owned() else { return };
    // The duplicate shares the original's open file description, non-blocking mode
    // included; it is registered with this worker's reactor under its own number.
    match tokio::net::TcpStream::from_std(std::net::TcpStream::from(fd)) {
        Ok(stream) => {
            ext.insert(PeerWatch(Rc::new(stream)));
        }
        Err(e) => tracing::debug!(error = %e, "no peer watch for this connection"),
    }
}

/// Resolves once the client of `req` has closed its connection. Never resolves when
/// the connection has no watcher, or when the client sends more bytes instead (those
/// belong to the dispatcher; the watch then stands down).
pub async fn gone(req: &HttpRequest) {
    let watch = req.conn_data::<PeerWatch>().cloned();
    if let Some(PeerWatch(stream)) = watch {
        let mut byte = [0u8; 1];
        if matches!(stream.peek(&mut byte).await, Ok(0) | Err(_)) {
            return;
        }
    }
    std::future::pending::<()>().await;
}
