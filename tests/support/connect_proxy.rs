//! A tiny HTTP `CONNECT` proxy on loopback that records every tunnel target it is
//! asked for (`host:port`), answers 200 and pipes bytes both ways.

use std::sync::{Arc, Mutex, PoisonError};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

pub struct ConnectProxy {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    targets: Arc<Mutex<Vec<String>>>,
}

impl ConnectProxy {
    pub fn start() -> ConnectProxy {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let targets = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&targets);
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                while let Ok((client, _)) = listener.accept().await {
                    tokio::spawn(tunnel(client, Arc::clone(&seen)));
                }
            });
        });
        ConnectProxy { url, targets }
    }

    /// Every `CONNECT` target asked for so far.
    pub fn targets(&self) -> Vec<String> {
        self.targets.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

async fn tunnel(mut client: tokio::net::TcpStream, seen: Arc<Mutex<Vec<String>>>) {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match client.read(&mut byte).await {
            Ok(1) => head.push(byte[0]),
            _ => return,
        }
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    let mut words = head.split_whitespace();
    let (Some("CONNECT"), Some(target)) = (words.next(), words.next()) else {
        let _ = client.write_all(b"HTTP/1.1 405 Method Not Allowed\r\ncontent-length: 0\r\n\r\n").await;
        return;
    };
    seen.lock().unwrap_or_else(PoisonError::into_inner).push(target.to_owned());
    let Ok(mut upstream) = tokio::net::TcpStream::connect(target).await else {
        let _ = client.write_all(b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\n\r\n").await;
        return;
    };
    if client.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n").await.is_err() {
        return;
    }
    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
}
