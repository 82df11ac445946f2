//! SQL text with literals, for the simple query protocol.
//!
//! Every statement this crate sends is one simple query: values are
//! written into the text as quoted literals instead of bound parameters.
//! tokio-postgres 0.7 prepares every parameterised statement under a name
//! ("s0", "s1", ...) in one round trip and executes it in the next; through
//! a transaction-mode pooler (PgBouncer, Neon's -pooler endpoint,
//! Supavisor) those two round trips may reach two different server
//! connections, and a statement prepared on one stays behind on it.  A
//! simple query is one message, one round trip, no server-side state.
//!
//! Quoting: a string is written as `E'...'` with `\` and `'` doubled, which
//! reads the same whatever `standard_conforming_strings` says; a NUL, which
//! no PostgreSQL text can hold, is refused.  The connection's client
//! encoding is UTF-8 (tokio-postgres sets it), as Rust strings are.

use crate::error::Error;
use std::fmt::Write;
use std::time::Duration;

/// A string literal, `E'...'`.
pub fn text(s: &str) -> Result<String, Error> {
    if s.contains('\0') {
        return Err(Error::invalid("a string holds a NUL character"));
    }
    let mut out = String::with_capacity(s.len() + 3);
    out.push_str("E'");
    for c in s.chars() {
        match c {
            '\'' => out.push_str("''"),
            '\\' => out.push_str("\\\\"),
            _ => out.push(c),
        }
    }
    out.push('\'');
    Ok(out)
}

/// A string literal or NULL.
pub fn opt_text(s: Option<&str>) -> Result<String, Error> {
    s.map_or_else(|| Ok("NULL".to_string()), text)
}

/// A jsonb literal.  serde_json escapes control characters, but a `\u0000`
/// in a string is refused by PostgreSQL's jsonb: the server says so.
pub fn jsonb(v: &serde_json::Value) -> Result<String, Error> {
    Ok(format!("{}::jsonb", text(&v.to_string())?))
}

/// An interval literal, in whole microseconds.
pub fn interval(d: Duration) -> String {
    format!("'{} microseconds'::interval", d.as_micros())
}

/// An array constructor of already-quoted elements, cast to `ty[]`.
pub fn array(elems: &[String], ty: &str) -> String {
    if elems.is_empty() {
        return format!("'{{}}'::{}[]", ty);
    }
    let mut out = String::from("ARRAY[");
    for (i, e) in elems.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(e);
    }
    let _ = write!(out, "]::{}[]", ty);
    out
}

/// An array of text literals.
pub fn text_array<S: AsRef<str>>(items: &[S]) -> Result<String, Error> {
    let q = items.iter().map(|s| text(s.as_ref())).collect::<Result<Vec<_>, _>>()?;
    Ok(array(&q, "text"))
}

/// An array of bigints, as one array literal: `'{1,2}'::bigint[]`.
pub fn bigint_array(items: &[i64]) -> String {
    let mut out = String::from("'{");
    for (i, v) in items.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(out, "{}", v);
    }
    out.push_str("}'::bigint[]");
    out
}

/// An array of strings (None: NULL) as one array literal,
/// `E'{"a","b",NULL}'::ty[]`: the server parses one constant however many
/// elements there are (an `ARRAY[...]` of 512 casts took it about 1 ms
/// more per statement).  Each element is double-quoted with `"` and `\`
/// escaped by a backslash, then the whole is quoted as [`text`].
pub fn literal_array<S: AsRef<str>>(items: &[Option<S>], ty: &str) -> Result<String, Error> {
    let mut body = String::from("{");
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            body.push(',');
        }
        match item {
            None => body.push_str("NULL"),
            Some(v) => {
                body.push('"');
                for c in v.as_ref().chars() {
                    if c == '"' || c == '\\' {
                        body.push('\\');
                    }
                    body.push(c);
                }
                body.push('"');
            }
        }
    }
    body.push('}');
    Ok(format!("{}::{}[]", text(&body)?, ty))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting() {
        assert_eq!(text("a'b\\c").unwrap(), "E'a''b\\\\c'");
        assert_eq!(text("é").unwrap(), "E'é'");
        assert!(text("a\0b").is_err());
        assert_eq!(bigint_array(&[]), "'{}'::bigint[]");
        assert_eq!(bigint_array(&[1, -2]), "'{1,-2}'::bigint[]");
        assert_eq!(literal_array(&[Some("a\"b\\c'"), None, Some("NULL")], "text").unwrap(),
                   "E'{\"a\\\\\"b\\\\\\\\c''\",NULL,\"NULL\"}'::text[]");
        assert_eq!(literal_array::<&str>(&[], "jsonb").unwrap(), "E'{}'::jsonb[]");
        assert_eq!(interval(Duration::from_millis(1500)), "'1500000 microseconds'::interval");
    }
}
