//! Gateway sessions: the `Mcp-Session-Id` an agent sees is the gateway's own (128
//! random bits, hex), bound to the key that opened the session and to the server; the
//! server's own id stays here. Another key presenting it, or the same id sent to
//! another server, finds nothing (404).
//!
//! Kept in this process's memory, bounded and expiring after an hour unused. Several
//! instances behind one address would need the mapping shared (a table, or sticky
//! routing on the session id).

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use moka::sync::Cache;
use rand::RngCore;

use spendgate_engine::auth::identity::KeyIdentity;
use spendgate_engine::mcp_servers::Server;

const CAPACITY: u64 = 100_000;
const IDLE: Duration = Duration::from_secs(3600);

/// One agent's session with one server.
#[derive(Debug)]
pub struct Session {
    /// The gateway's id, as the agent sees it.
    pub id: String,
    pub key_id: String,
    /// The server's bare id.
    pub server_id: String,
    /// The server's `Mcp-Session-Id`.
    pub upstream_id: String,
}

static SESSIONS: LazyLock<Cache<String, Arc<Session>>> =
    LazyLock::new(|| Cache::builder().max_capacity(CAPACITY).time_to_idle(IDLE).build());

/// Opens a session for the server's id `upstream_id`; returns the gateway's id.
pub fn open(key: &KeyIdentity, server: &Server, upstream_id: &str) -> String {
    let mut bytes = [0u8; 16];
    rand::rng().fill_bytes(&mut bytes);
    let id = hex::encode(bytes);
    let session = Session {
        id: id.clone(),
        key_id: key.key_id.clone(),
        server_id: server.id.clone(),
        upstream_id: upstream_id.to_owned(),
    };
    SESSIONS.insert(id.clone(), Arc::new(session));
    id
}

/// The session `id` when it was opened by `key` with `server`.
pub fn find(id: &str, key: &KeyIdentity, server: &Server) -> Option<Arc<Session>> {
    SESSIONS.get(id).filter(|s| s.key_id == key.key_id && s.server_id == server.id)
}

/// Forgets a session.
pub fn end(id: &str) {
    SESSIONS.invalidate(id);
}
