//! Decoding configs with errors that name the key, show the value and say what was expected:
//! `ipam.routes[0].gw: "10.42.0.100/24" is not an IP address (a gateway takes no prefix
//! length)`.
//!
//! serde_json's own errors point at a line and a column, which help nobody with a config
//! written on one line (a NAD's). Here the JSON is read into a [`Value`] first, then decoded by a
//! small deserializer over that value whose errors collect the key path on their way up.

use std::fmt;
use std::net::IpAddr;

use ipnet::IpNet;
use serde::de::{self, DeserializeOwned, DeserializeSeed, IntoDeserializer, Unexpected, Visitor};
use serde::Deserialize;
use serde_json::Value;

use crate::quote::{quote, quote_value};

/// Why a config could not be decoded, and where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecodeError {
    /// From the config's top level down.
    path: Vec<Segment>,
    /// The offending value, already quoted.
    value: Option<String>,
    problem: Problem,
}

/// A step of a key path: a key of an object, or an index of a list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Segment {
    Key(String),
    Index(usize),
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Problem {
    /// Not JSON: serde_json's reason, and the text just before where it stopped, if any.
    Syntax {
        reason: String,
        after: Option<String>,
    },
    /// A value of the wrong type or out of range: what the key takes.
    Expected(String),
    /// A required key is absent.
    Missing(&'static str),
    /// Any other reason a type gave.
    Other(String),
    /// More values than [`MAX_VALUES`].
    TooManyValues,
}

impl DecodeError {
    /// `value` (at the path so far) is not what the key takes: `expected` says what is.
    pub fn expected(value: &Value, expected: impl Into<String>) -> DecodeError {
        DecodeError {
            path: Vec::new(),
            value: Some(quote_value(value)),
            problem: Problem::Expected(expected.into()),
        }
    }

    /// The same error, for a value that sits at `key` inside the one decoded.
    pub fn under_key(mut self, key: &str) -> DecodeError {
        self.path.insert(0, Segment::Key(key.to_owned()));
        self
    }

    /// The key path, as the message shows it (`ipam.ranges[0][1].gateway`).
    pub fn path(&self) -> String {
        show_path(&self.path)
    }

    fn at(mut self, segment: Segment, value: &Value) -> DecodeError {
        if self.value.is_none() {
            self.value = Some(quote_value(value));
        }
        self.path.insert(0, segment);
        self
    }

    fn with_value(mut self, value: &Value) -> DecodeError {
        if self.value.is_none() {
            self.value = Some(quote_value(value));
        }
        self
    }

    fn syntax(e: &serde_json::Error, bytes: &[u8]) -> DecodeError {
        let position = format!(" at line {} column {}", e.line(), e.column());
        let text = e.to_string();
        let reason = text.strip_suffix(&position).unwrap_or(&text).to_owned();
        DecodeError {
            path: Vec::new(),
            value: None,
            problem: Problem::Syntax {
                reason,
                after: text_before(bytes, e.line(), e.column()),
            },
        }
    }
}

/// A key path as messages show it: `ipam.ranges[0][1].gateway`, a key that is not a plain
/// name quoted in brackets.
pub(crate) fn show_path(path: &[Segment]) -> String {
    let mut out = String::new();
    for segment in path {
        match segment {
            Segment::Index(i) => out.push_str(&format!("[{i}]")),
            Segment::Key(k) if is_plain_key(k) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(k);
            }
            Segment::Key(k) => out.push_str(&format!("[{}]", quote(k))),
        }
    }
    out
}

/// A key shown as is in a path; any other is shown quoted, in brackets.
fn is_plain_key(key: &str) -> bool {
    !key.is_empty()
        && key.len() <= 64
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Up to 24 bytes up to line `line`, column `column` (serde_json counts lines from 1, columns
/// in bytes), quoted; `None` at the very start.
fn text_before(bytes: &[u8], line: usize, column: usize) -> Option<String> {
    let line_start = match line.checked_sub(2) {
        None => 0,
        Some(n) => bytes
            .iter()
            .enumerate()
            .filter(|(_, b)| **b == b'\n')
            .nth(n)
            .map_or(0, |(i, _)| i + 1),
    };
    let end = (line_start + column).min(bytes.len());
    let start = end.saturating_sub(24);
    let text = String::from_utf8_lossy(&bytes[start..end]);
    let text = text.trim_start_matches('\u{fffd}');
    (!text.is_empty()).then(|| quote(text))
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let path = self.path();
        let value = self.value.as_deref().unwrap_or("the value");
        let subject = if path.is_empty() { "the config" } else { &path };
        match &self.problem {
            Problem::Syntax {
                reason,
                after: None,
            } => write!(f, "not valid JSON: {reason}, at the start"),
            Problem::Syntax {
                reason,
                after: Some(after),
            } => write!(f, "not valid JSON: {reason}, after {after}"),
            Problem::Expected(what) => write!(f, "{subject}: {value} is not {what}"),
            Problem::Missing(key) if path.is_empty() => write!(f, "{key}: required, but missing"),
            Problem::Missing(key) => write!(f, "{path}.{key}: required, but missing"),
            Problem::Other(reason) => write!(f, "{subject}: {value}: {reason}"),
            Problem::TooManyValues => write!(
                f,
                "it holds more than {MAX_VALUES} JSON values, more than any network config or annotation"
            ),
        }
    }
}

impl std::error::Error for DecodeError {}

impl de::Error for DecodeError {
    fn custom<T: fmt::Display>(msg: T) -> DecodeError {
        DecodeError {
            path: Vec::new(),
            value: None,
            problem: Problem::Other(msg.to_string()),
        }
    }

    fn invalid_type(_: Unexpected, expected: &dyn de::Expected) -> DecodeError {
        DecodeError {
            path: Vec::new(),
            value: None,
            problem: Problem::Expected(in_words(&expected.to_string())),
        }
    }

    fn invalid_value(unexpected: Unexpected, expected: &dyn de::Expected) -> DecodeError {
        DecodeError::invalid_type(unexpected, expected)
    }

    fn invalid_length(_: usize, expected: &dyn de::Expected) -> DecodeError {
        DecodeError::invalid_type(Unexpected::Other(""), expected)
    }

    fn unknown_variant(_: &str, expected: &'static [&'static str]) -> DecodeError {
        let names: Vec<String> = expected.iter().map(|n| quote(n)).collect();
        DecodeError::invalid_type(
            Unexpected::Other(""),
            &format!("one of {}", names.join(", ")).as_str(),
        )
    }

    fn missing_field(field: &'static str) -> DecodeError {
        DecodeError {
            path: Vec::new(),
            value: None,
            problem: Problem::Missing(field),
        }
    }
}

/// serde's names for what a type takes, as a person writing JSON reads them.
fn in_words(expected: &str) -> String {
    let words = match expected {
        "u8" => "a whole number from 0 to 255",
        "u16" => "a whole number from 0 to 65535",
        "u32" => "a whole number from 0 to 4294967295",
        "u64" | "usize" => "a whole number of 0 or more",
        "i8" | "i16" | "i32" | "i64" | "isize" => "a whole number",
        "f32" | "f64" => "a number",
        "a boolean" => "true or false",
        "a sequence" => "a list",
        "a map" => "an object",
        "a borrowed string" | "a string" => "a string",
        "IP address" => "an IP address",
        "IPv4 or IPv6 network address" => "a CIDR like 10.1.2.0/24",
        other if other.starts_with("struct ") => "an object",
        other => other,
    };
    words.to_owned()
}

/// Decodes a config from its bytes. A config is always a JSON object.
pub fn from_slice<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, DecodeError> {
    from_value(&read(bytes)?)
}

/// Reads a config's bytes as a JSON object, for decoding it as more than one type.
pub fn read(bytes: &[u8]) -> Result<Value, DecodeError> {
    read_object(bytes).map(Value::Object)
}

/// [`read`], for a caller that goes through the keys itself.
pub fn read_object(bytes: &[u8]) -> Result<serde_json::Map<String, Value>, DecodeError> {
    match read_any(bytes)? {
        Value::Object(map) => Ok(map),
        other => Err(DecodeError::expected(&other, "an object")),
    }
}

/// The most JSON values (scalars, lists, objects) a document may hold: a config or an
/// annotation has hundreds, a large conflist a few thousand. Each value read costs about 50
/// bytes however small its text (`0,` is two), so this bounds what reading can take, input
/// size aside, to a few MB.
pub const MAX_VALUES: usize = 100_000;

/// Reads JSON of any shape; a syntax error shows the text before it, not a line and column.
/// A document of more than [`MAX_VALUES`] values is refused before it is read.
pub fn read_any(bytes: &[u8]) -> Result<Value, DecodeError> {
    if count_values(bytes) > MAX_VALUES {
        return Err(DecodeError {
            path: Vec::new(),
            value: None,
            problem: Problem::TooManyValues,
        });
    }
    serde_json::from_slice(bytes).map_err(|e| DecodeError::syntax(&e, bytes))
}

/// An upper bound on the values in `bytes`: one, plus one per `,` `:` `[` and `{` outside
/// strings. A quick pass over bytes that are not JSON only over-counts.
fn count_values(bytes: &[u8]) -> usize {
    let (mut count, mut in_string, mut escaped) = (1usize, false, false);
    for &b in bytes {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
        } else {
            match b {
                b'"' => in_string = true,
                b',' | b':' | b'[' | b'{' => count += 1,
                _ => {}
            }
        }
    }
    count
}

/// Decodes `T` from a value already read; paths start at `value`.
pub fn from_value<'de, T: Deserialize<'de>>(value: &'de Value) -> Result<T, DecodeError> {
    T::deserialize(ValueDe(value))
}

/// An IP address, IPv4-mapped IPv6 made IPv4. The error is what was expected, naming `noun`
/// (`a gateway`) when a prefix length was given.
pub fn parse_ip(text: &str, noun: &str) -> Result<IpAddr, String> {
    match text.parse::<IpAddr>() {
        Ok(ip) => Ok(ip.to_canonical()),
        Err(_) if text.parse::<IpNet>().is_ok() => {
            Err(format!("an IP address ({noun} takes no prefix length)"))
        }
        Err(_) => Err("an IP address".to_owned()),
    }
}

/// A CIDR (`10.1.2.0/24`); the address keeps any host bits. The error is what was expected,
/// naming `noun` (`a subnet`) when the prefix length is missing.
pub fn parse_cidr(text: &str, noun: &str) -> Result<IpNet, String> {
    if let Ok(net) = text.parse::<IpNet>() {
        return Ok(net);
    }
    let like = "a CIDR like 10.1.2.0/24";
    if text.parse::<IpAddr>().is_ok() {
        return Err(format!("{like} ({noun} needs a prefix length)"));
    }
    match text.split_once('/') {
        Some((addr, len)) if addr.parse::<IpAddr>().is_ok() && len.parse::<u8>().is_ok() => {
            let bits = if addr.contains(':') { 128 } else { 32 };
            Err(format!("{like} (a prefix length is at most {bits})"))
        }
        _ => Err(like.to_owned()),
    }
}

/// For a `deserialize_with`: the IP address of a route's or a range's gateway; `""` and `null`
/// are none, as in the reference.
pub fn gateway<'de, D: de::Deserializer<'de>>(d: D) -> Result<Option<IpAddr>, D::Error> {
    match Option::<String>::deserialize(d)? {
        None => Ok(None),
        Some(s) if s.is_empty() => Ok(None),
        Some(s) => parse_ip(&s, "a gateway")
            .map(Some)
            .map_err(|want| de::Error::invalid_value(Unexpected::Str(&s), &want.as_str())),
    }
}

/// For a `deserialize_with`: a route's destination, a CIDR.
pub fn destination<'de, D: de::Deserializer<'de>>(d: D) -> Result<IpNet, D::Error> {
    let s = String::deserialize(d)?;
    parse_cidr(&s, "a destination")
        .map_err(|want| de::Error::invalid_value(Unexpected::Str(&s), &want.as_str()))
}

/// The deserializer over a borrowed value.
struct ValueDe<'de>(&'de Value);

impl<'de> de::Deserializer<'de> for ValueDe<'de> {
    type Error = DecodeError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DecodeError> {
        let value = self.0;
        match value {
            Value::Null => visitor.visit_unit(),
            Value::Bool(b) => visitor.visit_bool(*b),
            Value::Number(n) => match (n.as_u64(), n.as_i64(), n.as_f64()) {
                (Some(u), _, _) => visitor.visit_u64(u),
                (None, Some(i), _) => visitor.visit_i64(i),
                (None, None, Some(f)) => visitor.visit_f64(f),
                (None, None, None) => Err(de::Error::custom("a number out of range")),
            },
            Value::String(s) => visitor.visit_borrowed_str(s),
            Value::Array(items) => visitor.visit_seq(Seq {
                items: items.iter(),
                index: 0,
            }),
            Value::Object(map) => visitor.visit_map(Map {
                entries: map.iter(),
                pending: None,
            }),
        }
        .map_err(|e| e.with_value(value))
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DecodeError> {
        match self.0 {
            Value::Null => visitor.visit_none(),
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, DecodeError> {
        visitor.visit_newtype_struct(self)
    }

    /// Only an object: serde would also take a struct's fields in order from a list.
    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DecodeError> {
        match self.0 {
            Value::Object(_) => self.deserialize_any(visitor),
            other => Err(
                <DecodeError as de::Error>::invalid_type(Unexpected::Other(""), &visitor)
                    .with_value(other),
            ),
        }
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DecodeError> {
        let value = self.0;
        match value {
            Value::String(s) => visitor.visit_enum(s.as_str().into_deserializer()),
            Value::Object(map) if map.len() == 1 => {
                visitor.visit_enum(de::value::MapAccessDeserializer::new(Map {
                    entries: map.iter(),
                    pending: None,
                }))
            }
            _ => Err(<DecodeError as de::Error>::invalid_type(
                Unexpected::Other(""),
                &visitor,
            )),
        }
        .map_err(|e| e.with_value(value))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        unit unit_struct seq tuple tuple_struct map identifier ignored_any
    }
}

struct Seq<'de> {
    items: std::slice::Iter<'de, Value>,
    index: usize,
}

impl<'de> de::SeqAccess<'de> for Seq<'de> {
    type Error = DecodeError;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, DecodeError> {
        let Some(item) = self.items.next() else {
            return Ok(None);
        };
        let index = self.index;
        self.index += 1;
        seed.deserialize(ValueDe(item))
            .map(Some)
            .map_err(|e| e.at(Segment::Index(index), item))
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.items.len())
    }
}

struct Map<'de> {
    entries: serde_json::map::Iter<'de>,
    pending: Option<(&'de String, &'de Value)>,
}

impl<'de> de::MapAccess<'de> for Map<'de> {
    type Error = DecodeError;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, DecodeError> {
        let Some((key, value)) = self.entries.next() else {
            return Ok(None);
        };
        self.pending = Some((key, value));
        seed.deserialize(de::value::BorrowedStrDeserializer::<DecodeError>::new(key))
            .map(Some)
            .map_err(|e| e.at(Segment::Key(key.clone()), &Value::String(key.clone())))
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(
        &mut self,
        seed: V,
    ) -> Result<V::Value, DecodeError> {
        let (key, value) = self
            .pending
            .take()
            .ok_or_else(|| <DecodeError as de::Error>::custom("a value without its key"))?;
        seed.deserialize(ValueDe(value))
            .map_err(|e| e.at(Segment::Key(key.clone()), value))
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.entries.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    fn values_in(v: &Value) -> usize {
        1 + match v {
            Value::Array(items) => items.iter().map(values_in).sum(),
            Value::Object(map) => map.values().map(values_in).sum(),
            _ => 0,
        }
    }

    fn any_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            ".{0,12}".prop_map(Value::from),
        ];
        leaf.prop_recursive(4, 64, 8, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..8).prop_map(Value::from),
                proptest::collection::btree_map(".{0,8}", inner, 0..8)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn the_count_never_falls_short(v in any_json()) {
            let text = serde_json::to_vec(&v).unwrap_or_default();
            prop_assert!(count_values(&text) >= values_in(&v));
        }
    }

    #[test]
    fn a_document_of_too_many_values_is_refused_before_it_is_read() {
        let fits = format!("[{}0]", "0,".repeat(MAX_VALUES - 2));
        assert!(read_any(fits.as_bytes()).is_ok());
        let over = format!("[{}0]", "0,".repeat(MAX_VALUES));
        let e = read_any(over.as_bytes()).unwrap_err();
        assert!(
            e.to_string().contains("more than 100000 JSON values"),
            "{e}"
        );
        // Commas and brackets inside strings are text, not values.
        let text = format!("[\"{}\"]", ",[{:".repeat(MAX_VALUES));
        assert!(read_any(text.as_bytes()).is_ok());
    }

    #[derive(Debug, Deserialize)]
    #[serde(rename_all = "camelCase")]
    #[allow(dead_code)]
    struct Conf {
        #[serde(default)]
        mtu: u32,
        #[serde(default)]
        flag: bool,
        #[serde(default)]
        ipam: Option<Ipam>,
        #[serde(default)]
        caps: BTreeMap<String, bool>,
    }

    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    struct Ipam {
        #[serde(default)]
        routes: Vec<crate::Route>,
        #[serde(default)]
        ranges: Vec<Vec<Range>>,
    }

    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    struct Range {
        #[serde(default, deserialize_with = "gateway")]
        gateway: Option<IpAddr>,
    }

    fn err(json: &str) -> String {
        from_slice::<Conf>(json.as_bytes()).unwrap_err().to_string()
    }

    #[test]
    fn errors_name_the_path_the_value_and_what_is_expected() {
        let cases = [
            (
                r#"{"ipam":{"routes":[{"dst":"0.0.0.0/0","gw":"10.42.0.100/24"}]}}"#,
                r#"ipam.routes[0].gw: "10.42.0.100/24" is not an IP address (a gateway takes no prefix length)"#,
            ),
            (
                r#"{"ipam":{"routes":[{"dst":"10.1.0.0"}]}}"#,
                r#"ipam.routes[0].dst: "10.1.0.0" is not a CIDR like 10.1.2.0/24 (a destination needs a prefix length)"#,
            ),
            (
                r#"{"ipam":{"routes":[{"gw":"10.1.0.1"}]}}"#,
                "ipam.routes[0].dst: required, but missing",
            ),
            (
                r#"{"ipam":{"ranges":[[{},{"gateway":"x"}]]}}"#,
                r#"ipam.ranges[0][1].gateway: "x" is not an IP address"#,
            ),
            (
                r#"{"mtu":-5}"#,
                "mtu: -5 is not a whole number from 0 to 4294967295",
            ),
            (
                r#"{"mtu":"1400"}"#,
                r#"mtu: "1400" is not a whole number from 0 to 4294967295"#,
            ),
            (r#"{"flag":"yes"}"#, r#"flag: "yes" is not true or false"#),
            (r#"{"ipam":[1]}"#, "ipam: [1] is not an object"),
            (r#"{"ipam":{"routes":{}}}"#, "ipam.routes: {} is not a list"),
            (
                r#"{"caps":{"a.b":1}}"#,
                r#"caps["a.b"]: 1 is not true or false"#,
            ),
            ("[]", "the config: [] is not an object"),
            (
                "",
                "not valid JSON: EOF while parsing a value, at the start",
            ),
            (
                r#"{"mtu":1400,"flag":tru"#,
                r#"not valid JSON: EOF while parsing a value, after "{\"mtu\":1400,\"flag\":tru""#,
            ),
        ];
        for (json, want) in cases {
            assert_eq!(err(json), want, "{json}");
        }
    }

    #[test]
    fn a_huge_value_is_quoted_short() {
        let big = "x".repeat(1 << 20);
        let e = err(&format!(r#"{{"mtu":"{big}"}}"#));
        assert!(e.len() < 200, "{} bytes: {e}", e.len());
        assert!(
            e.starts_with("mtu: \"xxx") && e.contains("(1048576 bytes)"),
            "{e}"
        );
        let key = "k".repeat(1 << 20);
        let e = err(&format!(r#"{{"caps":{{"{key}":1}}}}"#));
        assert!(e.len() < 300, "{} bytes: {e}", e.len());
        // A syntax error near the end of a huge config shows only what is just before it.
        let e = err(&format!(r#"{{"ipam":"{big}"#));
        assert!(e.len() < 200, "{} bytes: {e}", e.len());
    }

    #[test]
    fn ip_and_cidr_say_what_they_expect() {
        assert_eq!(
            parse_ip("::ffff:10.1.2.3", "x"),
            Ok("10.1.2.3".parse().unwrap())
        );
        assert_eq!(
            parse_ip("10.1.2.3/24", "a gateway").unwrap_err(),
            "an IP address (a gateway takes no prefix length)"
        );
        assert_eq!(parse_ip("nope", "a gateway").unwrap_err(), "an IP address");
        assert_eq!(
            parse_cidr("10.1.2.0", "a subnet").unwrap_err(),
            "a CIDR like 10.1.2.0/24 (a subnet needs a prefix length)"
        );
        assert_eq!(
            parse_cidr("10.1.2.0/33", "a subnet").unwrap_err(),
            "a CIDR like 10.1.2.0/24 (a prefix length is at most 32)"
        );
        assert_eq!(
            parse_cidr("fd00::/129", "a subnet").unwrap_err(),
            "a CIDR like 10.1.2.0/24 (a prefix length is at most 128)"
        );
        assert_eq!(
            parse_cidr("10.1.2.3/24", "a subnet").unwrap().prefix_len(),
            24
        );
    }
}
