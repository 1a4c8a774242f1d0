//! Field rules shared by several resources: tags, customer identifiers, trimmed
//! names, string lists.

use std::collections::BTreeMap;

use crate::error::Issues;

pub const MAX_TAGS: usize = 10;
pub const MAX_TAG_KEY: usize = 64;
pub const MAX_TAG_VALUE: usize = 256;
pub const RESERVED_TAG_PREFIX: &str = "_svc_";
pub const MAX_CUSTOMER_ID: usize = 256;

pub fn is_tag_key(key: &str) -> bool {
    !key.is_empty()
        && key.len() <= MAX_TAG_KEY
        && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Validates a tags object strictly (control-plane input): every problem is an issue.
/// Reserved `_svc_` keys are refused from callers.
pub fn check_tags(tags: &BTreeMap<String, String>, path: &str, issues: &mut Issues) {
    if tags.len() > MAX_TAGS {
        issues.push(&[path], format!("at most {MAX_TAGS} tags"));
    }
    for (k, v) in tags {
        if !is_tag_key(k) {
            issues.push(&[path, k], "tag key must match [a-zA-Z0-9_-]+ and be at most 64 characters");
        } else if k.starts_with(RESERVED_TAG_PREFIX) {
            issues.push(&[path, k], "tag keys starting with _svc_ are reserved");
        }
        if v.chars().count() > MAX_TAG_VALUE {
            issues.push(&[path, k], "tag value must be at most 256 characters");
        }
    }
}

pub fn is_customer_id(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_CUSTOMER_ID
        && s.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
}

/// Trims and checks a display name's length in characters.
pub fn trimmed_name(raw: &str, min: usize, max: usize) -> Option<String> {
    let t = raw.trim();
    let n = t.chars().count();
    (n >= min && n <= max).then(|| t.to_owned())
}

pub fn is_lower_hex(s: &str, len: usize) -> bool {
    s.len() == len && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

pub fn all_zeros(s: &str) -> bool {
    s.bytes().all(|b| b == b'0')
}

/// A valid 32-lowercase-hex trace id that is not all zeros.
pub fn is_trace_id(s: &str) -> bool {
    is_lower_hex(s, 32) && !all_zeros(s)
}

/// Nesting levels of a JSON value: a scalar is 0, `{}` and `[]` are 1, `{"a": []}` is 2.
pub fn json_depth(value: &serde_json::Value) -> usize {
    let mut deepest = 0;
    let mut stack = vec![(value, 0_usize)];
    while let Some((v, depth)) = stack.pop() {
        let children: Box<dyn Iterator<Item = &serde_json::Value>> = match v {
            serde_json::Value::Array(items) => Box::new(items.iter()),
            serde_json::Value::Object(map) => Box::new(map.values()),
            _ => continue,
        };
        deepest = deepest.max(depth + 1);
        stack.extend(children.map(|c| (c, depth + 1)));
    }
    deepest
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn customer_ids() {
        assert!(is_customer_id("acme.corp:eu-1_x"));
        assert!(!is_customer_id(""));
        assert!(!is_customer_id("a b"));
        assert!(!is_customer_id(&"a".repeat(257)));
        assert!(is_customer_id(&"a".repeat(256)));
    }

    #[test]
    fn tags_rules() {
        let mut issues = Issues::new();
        let mut tags = BTreeMap::new();
        tags.insert("team".to_owned(), "core".to_owned());
        check_tags(&tags, "tags", &mut issues);
        assert!(issues.is_empty());
        tags.insert("bad key".to_owned(), "x".to_owned());
        tags.insert("_svc_x".to_owned(), "x".to_owned());
        tags.insert("long".to_owned(), "v".repeat(257));
        check_tags(&tags, "tags", &mut issues);
        assert!(issues.finish().is_err());
    }

    #[test]
    fn names_are_trimmed() {
        assert_eq!(trimmed_name("  ci  ", 1, 50).as_deref(), Some("ci"));
        assert_eq!(trimmed_name("   ", 1, 50), None);
        assert_eq!(trimmed_name(&"x".repeat(51), 1, 50), None);
    }

    #[test]
    fn json_nesting_depth() {
        use serde_json::json;
        assert_eq!(json_depth(&json!(1)), 0);
        assert_eq!(json_depth(&json!({})), 1);
        assert_eq!(json_depth(&json!({ "a": [1, { "b": [] }] })), 4);
        let mut deep = json!(0);
        for _ in 0..11 {
            deep = json!({ "x": deep });
        }
        assert_eq!(json_depth(&deep), 11);
    }
}
