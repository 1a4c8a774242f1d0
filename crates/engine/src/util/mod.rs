//! Small shared conventions: prefixed IDs, timestamps, cursor pagination, the JSON
//! body extractor and field validators. One implementation each, used everywhere.

pub mod bounds;
pub mod ids;
pub mod json;
pub mod pagination;
pub mod time;
pub mod validate;
