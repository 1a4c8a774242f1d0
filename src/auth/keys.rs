//! API-key authentication (placeholder: being written).

use crate::db::Pool;

pub struct KeyValidator {
    #[allow(dead_code)]
    pool: Pool,
}

impl KeyValidator {
    pub fn new(pool: Pool) -> Self {
        Self { pool }
    }
}
