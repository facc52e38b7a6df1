//! Request bodies in protobuf (`application/vnd.kubernetes.protobuf`), which client-go sends for
//! built-in types when a client asks for it (upstream multus's pod status PUT and events, the
//! reference whereabouts' Lease), read into the JSON the rest of the server works on, as
//! kube-apiserver decodes them.
//!
//! The schemas are the Kubernetes API's own `generated.proto` files (`scripts/peers.sh build
//! kube-api-protos`), read at the first such request. A field comes out under its JSON name (the
//! files name fields so); one marked `+optional` is left out when it holds its zero value, as
//! the JSON encoder's `omitempty` leaves it out.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::OnceLock;

use base64::Engine as _;
use serde_json::{Map, Value};

pub(super) const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// What every protobuf body starts with: "k8s" and a zero byte, then a `runtime.Unknown`.
const MAGIC: &[u8] = b"k8s\0";

#[derive(Debug, Clone, PartialEq)]
enum Kind {
    String,
    Bytes,
    Bool,
    Int32,
    Int64,
    /// A message, by its full name (`k8s.io.api.core.v1.Pod`).
    Message(String),
}

#[derive(Debug)]
struct Field {
    name: String,
    kind: Kind,
    repeated: bool,
    /// `map<string, V>`: `kind` is V.
    map: bool,
    /// A Go struct embedded with no JSON name: its fields are this message's in JSON.
    inline: bool,
}

#[derive(Debug, Default)]
struct Message {
    fields: HashMap<u64, Field>,
    /// A wrapper of one `items` list (`+protobuf.nullable=true`), which is that list in JSON.
    list: bool,
    /// The fields marked `+optional`, by JSON name: left out of the JSON when zero.
    optional: HashSet<String>,
}

type Schemas = HashMap<String, Message>;

/// The schemas, read once; the error says how to get them.
fn schemas() -> Result<&'static Schemas, String> {
    static SCHEMAS: OnceLock<Result<Schemas, String>> = OnceLock::new();
    SCHEMAS
        .get_or_init(|| {
            let dir = crate::peers::build("kube-api-protos").map_err(|e| {
                format!(
                    "this test server reads protobuf with the Kubernetes API's .proto files: {e:#}"
                )
            })?;
            let mut schemas = Schemas::new();
            read_dir(&dir, &mut schemas)?;
            let inline = dir.join("inline.txt");
            let inline = std::fs::read_to_string(&inline)
                .map_err(|e| format!("{}: {e}", inline.display()))?;
            for (message, field) in inline.lines().filter_map(|l| l.split_once(' ')) {
                let fields = schemas.get_mut(message).map(|m| m.fields.values_mut());
                for f in fields.into_iter().flatten().filter(|f| f.name == field) {
                    f.inline = true;
                }
            }
            Ok(schemas)
        })
        .as_ref()
        .map_err(Clone::clone)
}

fn read_dir(dir: &Path, schemas: &mut Schemas) -> Result<(), String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            read_dir(&path, schemas)?;
        } else if path.extension().is_some_and(|x| x == "proto") {
            let text =
                std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            parse_proto(&text, schemas);
        }
    }
    Ok(())
}

/// The messages of one generated.proto: one declaration a line, as go-to-protobuf writes them.
fn parse_proto(text: &str, schemas: &mut Schemas) {
    let mut package = String::new();
    let mut current: Option<(String, Message)> = None;
    let mut comments = String::new();
    for line in text.lines().map(str::trim) {
        if let Some(c) = line.strip_prefix("//") {
            comments.push_str(c);
            comments.push('\n');
            continue;
        }
        if let Some(p) = line.strip_prefix("package ") {
            package = p.trim_end_matches(';').trim().to_owned();
        } else if let Some(name) = line
            .strip_prefix("message ")
            .and_then(|l| l.strip_suffix('{'))
        {
            let message = Message {
                list: comments.contains("+protobuf.nullable=true"),
                ..Message::default()
            };
            current = Some((format!("{package}.{}", name.trim()), message));
        } else if line == "}" {
            if let Some((name, mut message)) = current.take() {
                let one_list = message.fields.len() == 1
                    && message
                        .fields
                        .values()
                        .all(|f| f.repeated && f.name == "items");
                message.list &= one_list;
                schemas.insert(name, message);
            }
        } else if let Some((_, message)) = current.as_mut() {
            if let Some((number, field)) = parse_field(line, &package) {
                if comments.contains("+optional") {
                    message.optional.insert(field.name.clone());
                }
                message.fields.insert(number, field);
            }
        }
        if !line.is_empty() {
            comments.clear();
        }
    }
}

/// `optional T name = N;`, `repeated T name = N;` or `map<string, T> name = N;`.
fn parse_field(line: &str, package: &str) -> Option<(u64, Field)> {
    let (decl, number) = line.strip_suffix(';')?.split_once('=')?;
    let number = number.trim().parse().ok()?;
    let (repeated, map, kind, name) = if let Some(rest) = decl.strip_prefix("map<") {
        let (types, name) = rest.split_once('>')?;
        let (_, value) = types.split_once(',')?;
        (true, true, value.trim(), name.trim())
    } else {
        let mut words = decl.split_whitespace();
        let label = words.next()?;
        let kind = words.next()?;
        let name = words.next()?;
        (label == "repeated", false, kind, name)
    };
    let kind = match kind {
        "string" => Kind::String,
        "bytes" => Kind::Bytes,
        "bool" => Kind::Bool,
        "int32" => Kind::Int32,
        "int64" => Kind::Int64,
        full if full.starts_with('.') => Kind::Message(full[1..].to_owned()),
        local => Kind::Message(format!("{package}.{local}")),
    };
    let field = Field {
        name: name.to_owned(),
        kind,
        repeated,
        map,
        inline: false,
    };
    Some((number, field))
}

/// One field's value on the wire.
enum Wire<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    /// A fixed 32- or 64-bit value: no Kubernetes type has one.
    Fixed,
}

fn varint(buf: &mut &[u8]) -> Result<u64, String> {
    prost::encoding::decode_varint(buf).map_err(|e| format!("a bad varint: {e}"))
}

/// The fields of one message, in wire order.
fn fields(mut buf: &[u8]) -> Result<Vec<(u64, Wire<'_>)>, String> {
    let mut out = Vec::new();
    while !buf.is_empty() {
        let key = varint(&mut buf)?;
        let value = match key & 7 {
            0 => Wire::Varint(varint(&mut buf)?),
            1 | 5 => {
                let width = if key & 7 == 1 { 8 } else { 4 };
                buf = buf
                    .get(width..)
                    .ok_or("a fixed-width value runs past the end")?;
                Wire::Fixed
            }
            2 => {
                let len = usize::try_from(varint(&mut buf)?).map_err(|e| e.to_string())?;
                let (bytes, rest) = (buf.get(..len), buf.get(len..));
                buf = rest.ok_or("a length-delimited field runs past the end")?;
                Wire::Bytes(bytes.ok_or("a length-delimited field runs past the end")?)
            }
            other => return Err(format!("wire type {other} is not one Kubernetes uses")),
        };
        out.push((key >> 3, value));
    }
    Ok(out)
}

/// A request body in protobuf, as the object's JSON with its apiVersion and kind.
pub(super) fn to_json(body: &[u8]) -> Result<Value, String> {
    let unknown = body
        .strip_prefix(MAGIC)
        .ok_or("the body does not start with the protobuf envelope's \"k8s\\x00\"")?;
    let (mut api_version, mut kind, mut raw) = (String::new(), String::new(), &[][..]);
    for (number, value) in fields(unknown)? {
        match (number, value) {
            (1, Wire::Bytes(type_meta)) => {
                for (n, v) in fields(type_meta)? {
                    match (n, v) {
                        (1, Wire::Bytes(b)) => api_version = text(b)?,
                        (2, Wire::Bytes(b)) => kind = text(b)?,
                        _ => {}
                    }
                }
            }
            (2, Wire::Bytes(b)) => raw = b,
            _ => {}
        }
    }
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", &api_version));
    // k8s.io/api's packages are named by the group's first label (core for the core group).
    let package = group
        .split('.')
        .next()
        .filter(|g| !g.is_empty())
        .unwrap_or("core");
    let name = format!("k8s.io.api.{package}.{version}.{kind}");
    let schemas = schemas()?;
    if !schemas.contains_key(&name) {
        return Err(format!(
            "no protobuf schema for {api_version} {kind} ({name})"
        ));
    }
    let mut object = Map::new();
    object.insert("apiVersion".into(), api_version.clone().into());
    object.insert("kind".into(), kind.into());
    if let Value::Object(fields) = message(schemas, &name, raw)? {
        object.extend(fields);
    }
    Ok(Value::Object(object))
}

/// An int64 off the wire (two's complement).
fn int64(v: u64) -> i64 {
    v.cast_signed()
}

/// An int32 off the wire: its low 32 bits (a negative one is sign-extended to ten bytes).
fn int32(v: u64) -> i32 {
    u32::try_from(v & 0xffff_ffff).unwrap_or(0).cast_signed()
}

fn text(bytes: &[u8]) -> Result<String, String> {
    String::from_utf8(bytes.to_vec()).map_err(|_| "a string field is not UTF-8".to_owned())
}

/// One message's JSON.
fn message(schemas: &Schemas, name: &str, buf: &[u8]) -> Result<Value, String> {
    match name.strip_prefix("k8s.io.apimachinery.pkg.") {
        Some("apis.meta.v1.Time") => return time(buf, false),
        Some("apis.meta.v1.MicroTime") => return time(buf, true),
        Some("api.resource.Quantity") => {
            let string = fields(buf)?.into_iter().find_map(|(n, v)| match (n, v) {
                (1, Wire::Bytes(b)) => Some(b),
                _ => None,
            });
            return string.map_or(Ok(Value::Null), |b| text(b).map(Value::String));
        }
        Some("util.intstr.IntOrString") => return int_or_string(buf),
        Some("runtime.RawExtension" | "apis.meta.v1.FieldsV1") => {
            let raw = fields(buf)?.into_iter().find_map(|(n, v)| match (n, v) {
                (1, Wire::Bytes(b)) => Some(b),
                _ => None,
            });
            return Ok(raw
                .and_then(|b| serde_json::from_slice(b).ok())
                .unwrap_or(Value::Null));
        }
        Some("apis.meta.v1.Duration") => {
            let nanos = fields(buf)?.into_iter().find_map(|(n, v)| match (n, v) {
                (1, Wire::Varint(v)) => Some(int64(v)),
                _ => None,
            });
            return Ok(Value::String(format!("{}ns", nanos.unwrap_or(0))));
        }
        _ => {}
    }
    let schema = schemas
        .get(name)
        .ok_or_else(|| format!("no protobuf schema for {name}"))?;
    let mut object = Map::new();
    for (number, value) in fields(buf)? {
        let Some(field) = schema.fields.get(&number) else {
            continue;
        };
        if field.map {
            let Wire::Bytes(entry) = value else {
                return Err(format!(
                    "{name}.{}: a map entry is not a message",
                    field.name
                ));
            };
            let (mut key, mut entry_value) = (String::new(), None);
            for (n, v) in fields(entry)? {
                match n {
                    1 => {
                        key = one(schemas, &Kind::String, v)?
                            .as_str()
                            .unwrap_or("")
                            .to_owned()
                    }
                    2 => entry_value = Some(one(schemas, &field.kind, v)?),
                    _ => {}
                }
            }
            let map = object
                .entry(field.name.clone())
                .or_insert_with(|| Value::Object(Map::new()));
            if let Value::Object(map) = map {
                map.insert(key, entry_value.unwrap_or_else(|| zero(&field.kind)));
            }
        } else if field.repeated {
            let list = object
                .entry(field.name.clone())
                .or_insert_with(|| Value::Array(Vec::new()));
            if let Value::Array(list) = list {
                match value {
                    // A packed list of numbers or booleans.
                    Wire::Bytes(mut packed)
                        if matches!(field.kind, Kind::Bool | Kind::Int32 | Kind::Int64) =>
                    {
                        while !packed.is_empty() {
                            list.push(one(
                                schemas,
                                &field.kind,
                                Wire::Varint(varint(&mut packed)?),
                            )?);
                        }
                    }
                    value => list.push(one(schemas, &field.kind, value)?),
                }
            }
        } else {
            match one(schemas, &field.kind, value)? {
                Value::Object(inlined) if field.inline => object.extend(inlined),
                value => {
                    object.insert(field.name.clone(), value);
                }
            }
        }
    }
    object.retain(|name, value| !(schema.optional.contains(name) && is_zero(value)));
    if schema.list {
        return Ok(object.remove("items").unwrap_or(Value::Array(Vec::new())));
    }
    Ok(Value::Object(object))
}

/// One value of `kind`.
fn one(schemas: &Schemas, kind: &Kind, value: Wire<'_>) -> Result<Value, String> {
    Ok(match (kind, value) {
        (Kind::String, Wire::Bytes(b)) => Value::String(text(b)?),
        (Kind::Bytes, Wire::Bytes(b)) => {
            Value::String(base64::engine::general_purpose::STANDARD.encode(b))
        }
        (Kind::Bool, Wire::Varint(v)) => Value::Bool(v != 0),
        // Negative int32s are sign-extended to ten bytes on the wire.
        (Kind::Int32, Wire::Varint(v)) => Value::from(int32(v)),
        (Kind::Int64, Wire::Varint(v)) => Value::from(int64(v)),
        (Kind::Message(name), Wire::Bytes(b)) => message(schemas, name, b)?,
        (kind, _) => return Err(format!("a {kind:?} field has the wrong wire type")),
    })
}

fn zero(kind: &Kind) -> Value {
    match kind {
        Kind::String | Kind::Bytes => Value::String(String::new()),
        Kind::Bool => Value::Bool(false),
        Kind::Int32 | Kind::Int64 => Value::from(0),
        Kind::Message(_) => Value::Object(Map::new()),
    }
}

fn is_zero(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
    }
}

/// `Time` (to the second) or `MicroTime` (to the microsecond), as RFC 3339 in UTC.
fn time(buf: &[u8], micro: bool) -> Result<Value, String> {
    let (mut seconds, mut nanos) = (0i64, 0i32);
    for (n, v) in fields(buf)? {
        match (n, v) {
            (1, Wire::Varint(v)) => seconds = int64(v),
            (2, Wire::Varint(v)) => nanos = int32(v),
            _ => {}
        }
    }
    let at = jiff::Timestamp::new(seconds, if micro { nanos } else { 0 })
        .map_err(|e| format!("a time out of range: {e}"))?;
    let format = if micro {
        "%Y-%m-%dT%H:%M:%S%.6fZ"
    } else {
        "%Y-%m-%dT%H:%M:%SZ"
    };
    Ok(Value::String(at.strftime(format).to_string()))
}

fn int_or_string(buf: &[u8]) -> Result<Value, String> {
    let (mut is_string, mut int, mut string) = (false, 0i32, String::new());
    for (n, v) in fields(buf)? {
        match (n, v) {
            (1, Wire::Varint(v)) => is_string = v == 1,
            (2, Wire::Varint(v)) => int = int32(v),
            (3, Wire::Bytes(b)) => string = text(b)?,
            _ => {}
        }
    }
    Ok(if is_string {
        Value::String(string)
    } else {
        Value::from(int)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::encoding::encode_varint;
    use serde_json::json;

    fn key(number: u64, wire: u64, out: &mut Vec<u8>) {
        encode_varint(number << 3 | wire, out);
    }

    fn bytes(number: u64, b: &[u8], out: &mut Vec<u8>) {
        key(number, 2, out);
        encode_varint(u64::try_from(b.len()).expect("a short field"), out);
        out.extend_from_slice(b);
    }

    fn int(number: u64, v: i64, out: &mut Vec<u8>) {
        key(number, 0, out);
        encode_varint(v.cast_unsigned(), out);
    }

    fn envelope(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
        let mut type_meta = Vec::new();
        bytes(1, api_version.as_bytes(), &mut type_meta);
        bytes(2, kind.as_bytes(), &mut type_meta);
        let mut body = MAGIC.to_vec();
        bytes(1, &type_meta, &mut body);
        bytes(2, raw, &mut body);
        bytes(3, b"", &mut body);
        bytes(4, b"", &mut body);
        body
    }

    /// A Lease as client-go's leader election writes it, field numbers from
    /// k8s.io/api/coordination/v1: everything set comes out under its JSON name, an empty
    /// `+optional` string is left out.
    #[test]
    fn a_lease_reads_as_its_json() {
        let mut meta = Vec::new();
        bytes(1, b"whereabouts", &mut meta);
        bytes(2, b"", &mut meta);
        bytes(3, b"kube-system", &mut meta);
        bytes(6, b"42", &mut meta);
        let mut label = Vec::new();
        bytes(1, b"app", &mut label);
        bytes(2, b"ipam", &mut label);
        bytes(11, &label, &mut meta);
        let mut renew = Vec::new();
        int(1, 1_796_428_800, &mut renew);
        int(2, 123_456_000, &mut renew);
        let mut spec = Vec::new();
        bytes(1, b"node-1/pod-a", &mut spec);
        int(2, 15, &mut spec);
        bytes(4, &renew, &mut spec);
        int(5, 3, &mut spec);
        let mut lease = Vec::new();
        bytes(1, &meta, &mut lease);
        bytes(2, &spec, &mut lease);
        let got = to_json(&envelope("coordination.k8s.io/v1", "Lease", &lease)).expect("decoded");
        assert_eq!(
            got,
            json!({
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": "whereabouts", "namespace": "kube-system",
                             "resourceVersion": "42", "labels": {"app": "ipam"}},
                "spec": {"holderIdentity": "node-1/pod-a", "leaseDurationSeconds": 15,
                         "renewTime": "2026-12-05T00:00:00.123456Z", "leaseTransitions": 3}
            })
        );
    }

    /// A pod's quantities, int-or-strings and negative numbers, from k8s.io/api/core/v1.
    #[test]
    fn a_pods_special_types_read_as_their_json() {
        let mut quantity = Vec::new();
        bytes(1, b"100m", &mut quantity);
        let mut entry = Vec::new();
        bytes(1, b"cpu", &mut entry);
        bytes(2, &quantity, &mut entry);
        let mut resources = Vec::new();
        bytes(2, &entry, &mut resources);
        let mut port = Vec::new();
        int(1, 1, &mut port);
        bytes(3, b"http", &mut port);
        let mut http_get = Vec::new();
        bytes(2, &port, &mut http_get);
        let mut handler = Vec::new();
        bytes(2, &http_get, &mut handler);
        let mut probe = Vec::new();
        bytes(1, &handler, &mut probe);
        let mut container = Vec::new();
        bytes(1, b"c", &mut container);
        bytes(8, &resources, &mut container);
        bytes(10, &probe, &mut container);
        let mut spec = Vec::new();
        bytes(2, &container, &mut spec);
        int(5, -1, &mut spec);
        let mut pod = Vec::new();
        bytes(2, &spec, &mut pod);
        let got = to_json(&envelope("v1", "Pod", &pod)).expect("decoded");
        assert_eq!(got["spec"]["containers"][0]["name"], "c", "{got}");
        assert_eq!(
            got["spec"]["containers"][0]["resources"]["requests"]["cpu"], "100m",
            "{got}"
        );
        // The probe's handler is inlined, as in JSON.
        assert_eq!(
            got["spec"]["containers"][0]["livenessProbe"],
            json!({"httpGet": {"port": "http"}}),
            "{got}"
        );
        assert_eq!(got["spec"]["activeDeadlineSeconds"], -1, "{got}");
    }

    #[test]
    fn bad_bodies_say_what_is_wrong() {
        let err = to_json(b"{\"kind\": \"Pod\"}").expect_err("JSON is not protobuf");
        assert!(err.contains("envelope"), "{err}");
        let err = to_json(&envelope("v1", "NoSuchKind", &[])).expect_err("unknown kind");
        assert!(
            err.contains("no protobuf schema for v1 NoSuchKind"),
            "{err}"
        );
        let mut cut = envelope("v1", "Pod", &[0x12, 0x05, b'a']);
        cut.truncate(cut.len() - 4);
        assert!(to_json(&cut).is_err());
    }
}
