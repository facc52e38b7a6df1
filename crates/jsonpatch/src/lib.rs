//! RFC 6902 JSON patch as kube-apiserver applies it (evanphx/json-patch): the operations in
//! order, the first failure failing the whole patch. As there, `test` with a `null` value passes
//! on a missing member (whose parent exists), which optimistic writers rely on to say "this
//! slot is still free". The API servers that stand in for kube-apiserver apply patches with it:
//! `multus try`'s and the tests'. A crate of its own, so that neither pulls in the other's
//! dependencies.

use serde_json::Value;

/// Which operation of a patch failed, and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PatchError {
    #[error("{op} operation does not apply at {path:?}: {why}")]
    DoesNotApply {
        op: String,
        path: String,
        why: &'static str,
    },
    #[error("unknown operation {0:?}")]
    UnknownOperation(String),
}

/// Applies `ops` to `doc`, or says which operation failed and why. On an error `doc` may be
/// half patched, so callers patch a copy.
pub fn apply(doc: &mut Value, ops: &[Value]) -> Result<(), PatchError> {
    ops.iter().try_for_each(|op| apply_one(doc, op))
}

fn apply_one(doc: &mut Value, op: &Value) -> Result<(), PatchError> {
    let kind = op["op"].as_str().unwrap_or_default();
    let raw = op["path"].as_str().unwrap_or_default();
    let fail = |why: &'static str| PatchError::DoesNotApply {
        op: kind.to_owned(),
        path: raw.to_owned(),
        why,
    };
    let path = match op["path"].as_str() {
        Some(p) => parse(p).map_err(fail)?,
        None => return Err(fail("it has no \"path\"")),
    };
    let value = || {
        op.get("value")
            .cloned()
            .ok_or_else(|| fail("it has no \"value\""))
    };
    let from = || match op["from"].as_str() {
        Some(p) => parse(p).map_err(fail),
        None => Err(fail("it has no \"from\"")),
    };
    match kind {
        "add" => add(doc, &path, value()?).map_err(fail),
        "remove" => remove(doc, &path).map(drop).map_err(fail),
        "replace" => replace(doc, &path, value()?).map_err(fail),
        "test" => test(doc, &path, &value()?).map_err(fail),
        "copy" => {
            let copied = get(doc, &from()?)
                .and_then(|v| v.cloned().ok_or("\"from\" is missing"))
                .map_err(fail)?;
            add(doc, &path, copied).map_err(fail)
        }
        "move" => {
            let from = from()?;
            if path.len() > from.len() && path.starts_with(&from) {
                return Err(fail("cannot move a value into itself"));
            }
            let moved = remove(doc, &from).map_err(fail)?;
            add(doc, &path, moved).map_err(fail)
        }
        _ => Err(PatchError::UnknownOperation(kind.to_owned())),
    }
}

/// A JSON pointer's reference tokens, `~1` and `~0` unescaped; none for the whole document.
fn parse(pointer: &str) -> Result<Vec<String>, &'static str> {
    if pointer.is_empty() {
        return Ok(Vec::new());
    }
    let rest = pointer
        .strip_prefix('/')
        .ok_or("a path is empty or starts with \"/\"")?;
    rest.split('/').map(unescape).collect()
}

fn unescape(token: &str) -> Result<String, &'static str> {
    let mut out = String::with_capacity(token.len());
    let mut chars = token.chars();
    while let Some(c) = chars.next() {
        if c != '~' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('0') => out.push('~'),
            Some('1') => out.push('/'),
            _ => return Err("\"~\" is not followed by 0 or 1"),
        }
    }
    Ok(out)
}

/// An array index: digits, without leading zeros.
fn index(token: &str) -> Result<usize, &'static str> {
    let digits = !token.is_empty() && token.bytes().all(|b| b.is_ascii_digit());
    if !digits || (token.len() > 1 && token.starts_with('0')) {
        return Err("not an array index");
    }
    token.parse().map_err(|_| "not an array index")
}

/// The value at `path`: `None` when only its last member is missing from an object; an error
/// when a container on the way is missing, or an array index is out of range.
fn get<'a>(doc: &'a Value, path: &[String]) -> Result<Option<&'a Value>, &'static str> {
    let Some((last, parents)) = path.split_last() else {
        return Ok(Some(doc));
    };
    let mut at = doc;
    for token in parents {
        at = child(at, token)?.ok_or("a parent is missing")?;
    }
    child(at, last)
}

fn child<'a>(container: &'a Value, token: &str) -> Result<Option<&'a Value>, &'static str> {
    match container {
        Value::Object(m) => Ok(m.get(token)),
        Value::Array(a) => a
            .get(index(token)?)
            .map(Some)
            .ok_or("the index is out of range"),
        _ => Err("a parent is not an object or array"),
    }
}

/// The container holding the value at a path whose parents are `parents`.
fn parent_mut<'a>(doc: &'a mut Value, parents: &[String]) -> Result<&'a mut Value, &'static str> {
    let mut at = doc;
    for token in parents {
        at = match at {
            Value::Object(m) => m.get_mut(token.as_str()),
            Value::Array(a) => a.get_mut(index(token)?),
            _ => None,
        }
        .ok_or("a parent is missing")?;
    }
    Ok(at)
}

fn add(doc: &mut Value, path: &[String], value: Value) -> Result<(), &'static str> {
    let Some((last, parents)) = path.split_last() else {
        *doc = value;
        return Ok(());
    };
    match parent_mut(doc, parents)? {
        Value::Object(m) => {
            m.insert(last.clone(), value);
            Ok(())
        }
        Value::Array(a) => {
            let at = if last == "-" { a.len() } else { index(last)? };
            if at > a.len() {
                return Err("the index is out of range");
            }
            a.insert(at, value);
            Ok(())
        }
        _ => Err("the parent is not an object or array"),
    }
}

fn remove(doc: &mut Value, path: &[String]) -> Result<Value, &'static str> {
    let (last, parents) = path
        .split_last()
        .ok_or("the whole document cannot be removed")?;
    match parent_mut(doc, parents)? {
        Value::Object(m) => m.shift_remove(last.as_str()).ok_or("the member is missing"),
        Value::Array(a) => {
            let at = index(last)?;
            if at >= a.len() {
                return Err("the index is out of range");
            }
            Ok(a.remove(at))
        }
        _ => Err("the parent is not an object or array"),
    }
}

fn replace(doc: &mut Value, path: &[String], value: Value) -> Result<(), &'static str> {
    let Some((last, parents)) = path.split_last() else {
        *doc = value;
        return Ok(());
    };
    let slot = match parent_mut(doc, parents)? {
        Value::Object(m) => m.get_mut(last.as_str()),
        Value::Array(a) => a.get_mut(index(last)?),
        _ => return Err("the parent is not an object or array"),
    };
    *slot.ok_or("the value is missing")? = value;
    Ok(())
}

/// A member holding `null` counts as missing, and missing as `null`.
fn test(doc: &Value, path: &[String], expected: &Value) -> Result<(), &'static str> {
    let actual = get(doc, path)?.filter(|v| !v.is_null());
    let passed = match actual {
        None => expected.is_null(),
        Some(v) => v == expected,
    };
    if passed {
        Ok(())
    } else {
        Err("the value differs")
    }
}
