//! Request rate limits (placeholder: being written).

pub struct RateLimiters {
    pub ip_per_minute: u32,
    pub key_per_minute: u32,
}

impl RateLimiters {
    pub fn new(ip_per_minute: u32, key_per_minute: u32) -> Self {
        Self { ip_per_minute, key_per_minute }
    }
}
