//! "Dual" endpoints accept either an API key (`X-Service-Key`) or a dashboard
//! session. A request that sends the key header is judged by the key alone (a bad
//! key is 401 even beside a valid cookie); otherwise the session decides, and the
//! endpoint checks the session's role.

use std::future::Future;
use std::pin::Pin;

use actix_web::dev::Payload;
use actix_web::{FromRequest, HttpRequest};

use super::identity::KEY_HEADER;
use super::keys::KeyAuth;
use super::session::SessionAuth;
use crate::error::ApiError;
use crate::plans::Role;

/// Who called a Dual endpoint.
#[derive(Debug, Clone)]
pub enum DualAuth {
    Key(KeyAuth),
    Session(Box<SessionAuth>),
}

impl DualAuth {
    pub fn org_id(&self) -> &str {
        match self {
            DualAuth::Key(k) => &k.org_id,
            DualAuth::Session(s) => &s.org.id,
        }
    }

    /// A key passes (it acts for its organization); a session needs `min`.
    pub fn require(&self, min: Role) -> Result<(), ApiError> {
        match self {
            DualAuth::Key(_) => Ok(()),
            DualAuth::Session(s) => s.require(min),
        }
    }
}

impl FromRequest for DualAuth {
    type Error = ApiError;
    type Future = Pin<Box<dyn Future<Output = Result<Self, ApiError>>>>;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        if req.headers().contains_key(KEY_HEADER) {
            let key = KeyAuth::from_request(req, payload);
            Box::pin(async move { Ok(DualAuth::Key(key.await?)) })
        } else {
            let session = SessionAuth::from_request(req, payload);
            Box::pin(async move { Ok(DualAuth::Session(Box::new(session.await?))) })
        }
    }
}
