//! Quoting untrusted input in messages. A config value, an annotation or a name quoted in an
//! error goes into the runtime's log, pod events and the kubelet's log: it is cut to a bounded
//! length, and characters that could break or forge a log line are escaped.

use serde_json::Value;

/// Characters (after escaping) of the input a quote shows before it is cut.
const SHOWN: usize = 80;

/// The longest [`quote`] or [`quote_value`] result, in characters: the shown part, the quotes,
/// the ellipsis, and the original length.
pub const QUOTE_MAX: usize = SHOWN + 40;

/// `text` in double quotes, escaped, and cut to [`QUOTE_MAX`] characters with the original
/// length when it is longer: `"10.42.0.100/24"`, `"xxxx…" (1048576 bytes)`.
pub fn quote(text: &str) -> String {
    show(text, true)
}

/// A JSON value as it was written: a string as [`quote`] shows it, anything else as its JSON
/// text, bounded the same way.
pub fn quote_value(value: &Value) -> String {
    match value {
        Value::String(s) => quote(s),
        other => show(&other.to_string(), false),
    }
}

/// A library's error message that may quote input at any length, such as serde's
/// `invalid type: string "xxxx…", expected a sequence at line 1 column 9`: each `"…"` or
/// `` `…` `` run in it is cut to [`QUOTE_MAX`] characters, control characters are escaped,
/// and the whole is cut at 1024 characters.
pub fn shorten(message: &str) -> String {
    const MAX: usize = 1024;
    let mut out = String::new();
    let mut rest = message;
    while let Some(start) = rest.find(['"', '`']) {
        out.push_str(&rest[..start]);
        let close = char::from(rest.as_bytes()[start]);
        let body = &rest[start + 1..];
        // serde writes a string as Rust's `{:?}` does: `\"` does not close it.
        let mut escaped = false;
        let end = body.char_indices().find_map(|(i, c)| {
            let closes = c == close && !escaped;
            escaped = close == '"' && c == '\\' && !escaped;
            closes.then_some(i)
        });
        let (run, after) = match end {
            Some(i) => (&body[..i], &body[i + 1..]),
            None => (body, ""),
        };
        out.push(close);
        for (shown, c) in run.chars().enumerate() {
            if shown == SHOWN {
                out.push('…');
                break;
            }
            out.push(c);
        }
        out.push(close);
        rest = after;
    }
    out.push_str(rest);
    let mut cut = String::with_capacity(out.len().min(MAX + 4));
    for c in out.chars() {
        let piece = escape(c, false);
        if cut.len() + piece.len() > MAX {
            cut.push('…');
            break;
        }
        cut.push_str(&piece);
    }
    cut
}

fn show(text: &str, quoted: bool) -> String {
    let mut out = String::with_capacity(text.len().min(SHOWN) + 2);
    if quoted {
        out.push('"');
    }
    let mut shown = 0;
    let mut cut = false;
    for c in text.chars() {
        let piece = escape(c, quoted);
        let width = piece.chars().count();
        if shown + width > SHOWN {
            cut = true;
            break;
        }
        shown += width;
        out.push_str(&piece);
    }
    if cut {
        out.push('…');
    }
    if quoted {
        out.push('"');
    }
    if cut {
        out.push_str(&format!(" ({} bytes)", text.len()));
    }
    out
}

/// One character as a quote shows it. Inside quotes a `"` or `\` is escaped too, so the quote
/// cannot be closed early.
fn escape(c: char, quoted: bool) -> std::borrow::Cow<'static, str> {
    match c {
        '"' if quoted => "\\\"".into(),
        '\\' if quoted => "\\\\".into(),
        '\n' => "\\n".into(),
        '\r' => "\\r".into(),
        '\t' => "\\t".into(),
        c if c.is_control() || is_invisible(c) => format!("\\u{{{:x}}}", c as u32).into(),
        c => String::from(c).into(),
    }
}

/// Format characters that change how a line reads without showing themselves: zero-width
/// ones, bidirectional overrides and isolates, the byte order mark.
fn is_invisible(c: char) -> bool {
    matches!(c as u32, 0x061c | 0x200b..=0x200f | 0x202a..=0x202e | 0x2060..=0x2069 | 0xfeff)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn short_text_is_quoted_whole() {
        assert_eq!(quote("10.42.0.100/24"), r#""10.42.0.100/24""#);
        assert_eq!(quote(""), r#""""#);
        assert_eq!(quote("a\"b\\c"), r#""a\"b\\c""#);
        assert_eq!(
            quote("a\nb\u{1b}[31m\u{202e}"),
            r#""a\nb\u{1b}[31m\u{202e}""#
        );
    }

    #[test]
    fn long_text_is_cut_with_its_length() {
        let q = quote(&"x".repeat(1 << 20));
        assert_eq!(q, format!("\"{}…\" (1048576 bytes)", "x".repeat(SHOWN)));
        // Cut at a character, never inside one.
        let q = quote(&"é".repeat(200));
        assert!(
            q.starts_with("\"éé") && q.ends_with("…\" (400 bytes)"),
            "{q}"
        );
    }

    #[test]
    fn values_show_as_written() {
        assert_eq!(quote_value(&serde_json::json!("x")), r#""x""#);
        assert_eq!(quote_value(&serde_json::json!(-5)), "-5");
        assert_eq!(quote_value(&serde_json::json!([1, "a"])), r#"[1,"a"]"#);
        let big = serde_json::json!(vec![1; 100_000]);
        assert!(quote_value(&big).chars().count() <= QUOTE_MAX);
    }

    #[test]
    fn library_messages_keep_what_was_expected_and_lose_the_long_input() {
        let long = "x".repeat(1 << 16);
        let e = serde_json::from_str::<Vec<u8>>(&format!("\"{long}\"")).unwrap_err();
        let short = shorten(&e.to_string());
        assert!(short.len() < 200, "{short}");
        assert!(
            short.starts_with(&format!("invalid type: string \"{}…\"", "x".repeat(SHOWN))),
            "{short}"
        );
        assert!(
            short.ends_with("expected a sequence at line 1 column 65538"),
            "{short}"
        );
        // An escaped quote does not end the run; a backtick run is cut too.
        let text = format!("a \"{}\\\"{long}\" b `{long}` c\n", "y".repeat(10));
        let short = shorten(&text);
        assert!(short.starts_with("a \"yyyyyyyyyy\\\"xxx"), "{short}");
        assert!(short.ends_with("…` c\\n"), "{short}");
        assert!(shorten(&long).len() <= 1024 + '…'.len_utf8());
        assert_eq!(shorten("plain"), "plain");
    }

    proptest! {
        #[test]
        fn shortened_messages_are_bounded(text in any::<String>()) {
            let short = shorten(&text);
            prop_assert!(short.len() <= 1024 + '…'.len_utf8());
            prop_assert!(!short.chars().any(|c| c.is_control() || is_invisible(c)), "{short:?}");
        }

        #[test]
        fn never_longer_than_the_bound_and_never_raw_control(text in any::<String>()) {
            for q in [quote(&text), quote_value(&Value::Array(vec![Value::String(text.clone())]))] {
                prop_assert!(q.chars().count() <= QUOTE_MAX, "{} chars: {q}", q.chars().count());
                prop_assert!(!q.chars().any(|c| c.is_control() || is_invisible(c)), "{q:?}");
            }
        }

        #[test]
        fn long_text_at_the_bound(text in proptest::collection::vec(any::<char>(), 0..400)) {
            let text: String = text.into_iter().collect();
            let q = quote(&text);
            prop_assert!(q.chars().count() <= QUOTE_MAX);
            prop_assert!(q.starts_with('"'));
        }
    }
}
