//! The text rules of request fields, as the OpenAPI document states them (`pattern`): one
//! regular expression per rule the handlers check, so a field's annotation and the check it
//! stands for name the same thing.
//!
//! The patterns are ECMA-262 (OpenAPI 3.1) and spell every class out: `\s` differs between
//! ECMAScript, Python and Rust (U+0085, U+001C–U+001F, U+FEFF), and the handlers use Rust's
//! `char::is_whitespace` and `char::is_control`.

/// Holds a character that is not whitespace (Rust's `char::is_whitespace`): the rule of
/// `text.trim().is_empty()` refusing a blank field.
pub const NOT_BLANK: &str =
    r"[^\t-\r \u0085\u00A0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000]";

/// No NUL character (PostgreSQL stores none).
pub const NO_NUL: &str = r"^[^\x00]*$";

/// No control character (`char::is_control`) but tab, line feed and carriage return: a
/// message's text.
pub const MESSAGE_TEXT: &str = r"^[^\x00-\x08\x0B\x0C\x0E-\x1F\x7F-\x9F]*$";

/// [`MESSAGE_TEXT`] that is not blank: one character that is neither whitespace nor control,
/// between any text [`MESSAGE_TEXT`] allows.
pub const MESSAGE_TEXT_NOT_BLANK: &str = concat!(
    r"^[^\x00-\x08\x0B\x0C\x0E-\x1F\x7F-\x9F]*",
    r"[^\x00-\x20\x7F-\x9F\u00A0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000]",
    r"[^\x00-\x08\x0B\x0C\x0E-\x1F\x7F-\x9F]*$"
);

/// A cursor: base64url without padding ([`super::cursor`]); the daemon refuses one it did not
/// give out, which no pattern can say.
pub const CURSOR: &str = r"^[A-Za-z0-9_-]*$";

/// A tenant's name: `crate::keys::check_tenant`.
pub const TENANT: &str = r"^[A-Za-z0-9._-]{1,64}$";

/// An `http` or `https` URL (any case: the URL parser lowers the scheme).
pub const HTTP_URL: &str = r"^[Hh][Tt][Tt][Pp][Ss]?://";

/// Standard base64 with its padding, as `base64::engine::general_purpose::STANDARD` decodes it:
/// the last symbol of a padded group carries no stray bits.
pub const BASE64: &str = concat!(
    r"^(?:[A-Za-z0-9+/]{4})*",
    r"(?:[A-Za-z0-9+/][AQgw]==|[A-Za-z0-9+/]{2}[AEIMQUYcgkosw048]=)?$"
);

/// A decimal amount without sign or exponent (`"12.50"`), as a `f64` parses it: the Managed
/// Agents API's costs.
pub const DECIMAL: &str = r"^[0-9]+(\.[0-9]+)?$";

/// A custom tool's name (the Managed Agents API's; `crate::mcp::client::ClientTools::compile`).
pub const TOOL_NAME: &str = r"^[a-zA-Z0-9_-]{1,64}$";

/// An agent's MCP server's name (the Managed Agents API's; `crate::managed::profile`): letters,
/// digits and `-`, single `_` between them, so `mcp__NAME__TOOL` reads back.
pub const MCP_SERVER_NAME: &str = r"^[a-zA-Z0-9-]+(_[a-zA-Z0-9-]+)*$";

/// Every pattern above: the document's annotations write them out (an attribute takes only a
/// literal), and `http::openapi`'s test holds each of the document's patterns to this list.
pub const PATTERNS: [&str; 11] = [
    NOT_BLANK,
    NO_NUL,
    MESSAGE_TEXT,
    MESSAGE_TEXT_NOT_BLANK,
    CURSOR,
    TENANT,
    HTTP_URL,
    BASE64,
    DECIMAL,
    TOOL_NAME,
    MCP_SERVER_NAME,
];

#[cfg(test)]
mod tests {
    use super::*;

    /// `text` against `pattern`, as a JSON Schema validator (a client's) reads it.
    fn validator(pattern: &str) -> impl Fn(&str) -> bool {
        let schema = serde_json::json!({"type": "string", "pattern": pattern});
        let validator = jsonschema::validator_for(&schema).expect("the pattern compiles");
        move |text| validator.is_valid(&serde_json::json!(text))
    }

    fn fits(pattern: &str, text: &str) -> bool {
        validator(pattern)(text)
    }

    /// Each pattern against Rust's own view of the characters it is about, read by a JSON
    /// Schema validator as a client's would read it.
    #[test]
    fn the_patterns_say_what_the_checks_do() {
        let (not_blank, message_text, no_nul) = (
            validator(NOT_BLANK),
            validator(MESSAGE_TEXT),
            validator(NO_NUL),
        );
        let chars = (0..=0x3100)
            .chain([0xFEFF, 0x10FFFF])
            .filter_map(char::from_u32);
        for c in chars {
            let blank = c.to_string().trim().is_empty();
            assert_eq!(not_blank(&c.to_string()), !blank, "{c:?}");
            let allowed = !c.is_control() || matches!(c, '\n' | '\r' | '\t');
            assert_eq!(message_text(&format!("a{c}b")), allowed, "{c:?}");
            assert_eq!(no_nul(&format!("a{c}b")), c != '\0', "{c:?}");
        }
        for (text, ok) in [
            ("hi", true),
            (" \n hi\t", true),
            (" \u{3000}\n", false),
            ("", false),
            ("hi\u{7}", false),
            ("\u{85}", false),
        ] {
            assert_eq!(fits(MESSAGE_TEXT_NOT_BLANK, text), ok, "{text:?}");
        }
        use base64::Engine;
        for text in [
            "", "AA==", "AB==", "AAA=", "AAB=", "AAAA", "QUJD", "QQ", "QQ=", "A===",
        ] {
            let decodes = base64::engine::general_purpose::STANDARD
                .decode(text)
                .is_ok();
            assert_eq!(fits(BASE64, text), decodes, "{text:?}");
        }
        assert!(fits(TENANT, "acme.eu_1-a"));
        assert!(!fits(TENANT, "a/b"));
        assert!(!fits(TENANT, &"a".repeat(65)));
        assert!(fits(CURSOR, &super::super::cursor::before_message(7)));
        assert!(fits(HTTP_URL, "HTTPS://example.com/x"));
        assert!(!fits(HTTP_URL, "ftp://example.com/x"));
    }
}
