//! Namespaced objects of other API groups, as JSON: whereabouts' pools and reservations. The
//! caller owns their shapes; this module only carries them, with the client's deadlines,
//! retries and size cap.

use http::{header, Method, Request};
use serde_json::Value;

use crate::{Call, Cause, K8sError, KubeClient};

/// How many items the first page of a list asks for.
const FIRST_PAGE: usize = 250;
/// The most pages one list reads: a server that hands out continue tokens without end must
/// not keep the caller listing for good.
const MAX_PAGES: usize = 10_000;

/// An API resource; `group` is empty for the core group (`/api/v1`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Resource {
    pub group: &'static str,
    pub version: &'static str,
    /// Lower-case plural, as in the URL.
    pub plural: &'static str,
}

/// What a create did.
#[derive(Debug)]
pub enum Created {
    Created(Value),
    /// An object of that name exists already.
    AlreadyExists,
}

/// What a conditional write did.
#[derive(Debug)]
pub enum Written {
    Done(Value),
    /// The object changed since it was read (a failed `test` op answers 422, a stale
    /// resourceVersion 409): read it again.
    Stale,
}

/// What a delete did.
#[derive(Debug, PartialEq, Eq)]
pub enum Deleted {
    Deleted,
    Absent,
    /// The precondition failed: the object changed since it was read.
    Stale,
}

/// Whether `name` is a DNS subdomain, as Kubernetes names objects, namespaces and nodes.
pub(crate) fn is_object_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric())
}

/// An object or namespace name as Kubernetes allows them: anything else would change the
/// request's path.
fn check_name(what: &str, name: &str) -> Result<(), Cause> {
    if is_object_name(name) {
        Ok(())
    } else {
        Err(Cause::BadName(format!(
            "{what} {} is not a Kubernetes object name (lower-case letters, digits, '-' and '.', \
             at most 253)",
            cni::quote::quote(name)
        )))
    }
}

impl Resource {
    fn root(&self) -> String {
        if self.group.is_empty() {
            format!("/api/{}", self.version)
        } else {
            format!("/apis/{}/{}", self.group, self.version)
        }
    }

    fn collection(&self, namespace: &str) -> String {
        format!("{}/namespaces/{namespace}/{}", self.root(), self.plural)
    }

    /// A cluster-scoped resource's objects, or a namespaced one's in every namespace.
    fn everywhere(&self) -> String {
        format!("{}/{}", self.root(), self.plural)
    }
}

/// The call, once its namespace and name are known to stay one path segment each.
pub(crate) fn checked_call(
    verb: &'static str,
    resource: &'static str,
    namespace: &str,
    name: Option<&str>,
) -> Result<Call, K8sError> {
    let call = crate::call(verb, resource, namespace, name);
    let checked = check_name("namespace", namespace)
        .and_then(|()| name.map_or(Ok(()), |n| check_name("name", n)));
    match checked {
        Ok(()) => Ok(call),
        Err(cause) => Err(K8sError::Request {
            call: Box::new(call),
            attempts: 0,
            cause,
        }),
    }
}

/// The call on a cluster-scoped object, once its name is known to stay one path segment.
pub(crate) fn cluster_call(
    verb: &'static str,
    resource: Resource,
    name: &str,
) -> Result<Call, K8sError> {
    let call = crate::call(verb, resource.plural, "(cluster)", Some(name));
    match check_name("name", name) {
        Ok(()) => Ok(call),
        Err(cause) => Err(K8sError::Request {
            call: Box::new(call),
            attempts: 0,
            cause,
        }),
    }
}

impl KubeClient {
    fn object_call(
        &self,
        verb: &'static str,
        resource: Resource,
        namespace: &str,
        name: Option<&str>,
    ) -> Result<Call, K8sError> {
        checked_call(verb, resource.plural, namespace, name)
    }

    pub(crate) fn send_json(
        &self,
        call: Call,
        method: Method,
        path: String,
        content_type: &'static str,
        body: Option<&Value>,
    ) -> Result<Value, K8sError> {
        self.runtime
            .block_on(self.request_json(call, method, path, content_type, body))
    }

    async fn request_json(
        &self,
        call: Call,
        method: Method,
        path: String,
        content_type: &'static str,
        body: Option<&Value>,
    ) -> Result<Value, K8sError> {
        let body = body.map(|b| b.to_string()).unwrap_or_default().into_bytes();
        self.attempts(call, false, || {
            let request = Request::builder()
                .method(method.clone())
                .uri(path.as_str())
                .header(header::CONTENT_TYPE, content_type)
                .header(header::ACCEPT, "application/json")
                .body(body.clone());
            let client = self.client();
            async move {
                let request = request.map_err(kube::Error::HttpError)?;
                client.request::<Value>(request).await
            }
        })
        .await
    }

    /// The object, or `None` when there is none.
    pub fn get_object(
        &self,
        resource: Resource,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Value>, K8sError> {
        let call = self.object_call("get", resource, namespace, Some(name))?;
        let path = format!("{}/{name}", resource.collection(namespace));
        match self.send_json(call, Method::GET, path, "application/json", None) {
            Ok(v) => Ok(Some(v)),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Every object of the resource in the namespace.
    pub fn list_objects(
        &self,
        resource: Resource,
        namespace: &str,
    ) -> Result<Vec<Value>, K8sError> {
        let call = self.object_call("list", resource, namespace, None)?;
        self.list_pages(call, &resource.collection(namespace), &mut Some)
    }

    /// Every object of the resource in every namespace.
    pub fn list_objects_everywhere(&self, resource: Resource) -> Result<Vec<Value>, K8sError> {
        let call = crate::call("list", resource.plural, "(all namespaces)", None);
        self.list_pages(call, &resource.everywhere(), &mut Some)
    }

    /// A cluster-scoped object, or `None` when there is none.
    pub fn get_cluster_object(
        &self,
        resource: Resource,
        name: &str,
    ) -> Result<Option<Value>, K8sError> {
        let call = cluster_call("get", resource, name)?;
        let path = format!("{}/{name}", resource.everywhere());
        match self.send_json(call, Method::GET, path, "application/json", None) {
            Ok(v) => Ok(Some(v)),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// A JSON patch of a cluster-scoped object, conditional through its `test` ops.
    pub fn json_patch_cluster_object(
        &self,
        resource: Resource,
        name: &str,
        patch: &Value,
    ) -> Result<Written, K8sError> {
        let call = cluster_call("patch", resource, name)?;
        let path = format!("{}/{name}", resource.everywhere());
        match self.send_json(
            call,
            Method::PATCH,
            path,
            "application/json-patch+json",
            Some(patch),
        ) {
            Ok(v) => Ok(Written::Done(v)),
            Err(e) if is_stale(&e) => Ok(Written::Stale),
            Err(e) => Err(e),
        }
    }

    /// What `keep` makes of every pod of the cluster. It sees each page's pods as they come,
    /// so a large cluster is never held whole: only what `keep` returns stays.
    pub fn list_pods_everywhere<T>(
        &self,
        keep: &mut dyn FnMut(Value) -> Option<T>,
    ) -> Result<Vec<T>, K8sError> {
        let call = crate::call("list", "pods", "(all namespaces)", None);
        self.list_pages(call, "/api/v1/pods", keep)
    }

    /// What `keep` makes of every pod bound to `node`, as the API server's cache has them
    /// (`resourceVersion=0`: a node asking every few seconds reads no etcd).
    pub fn list_node_pods<T>(
        &self,
        node: &str,
        keep: &mut dyn FnMut(Value) -> Option<T>,
    ) -> Result<Vec<T>, K8sError> {
        let call = crate::call("list", "pods", "(all namespaces)", None);
        let selector = format!("spec.nodeName={node}");
        self.runtime
            .block_on(self.list_pages_async(
                call,
                "/api/v1/pods",
                &[("fieldSelector", &selector), ("resourceVersion", "0")],
                keep,
            ))
            .map(|(items, _)| items)
    }

    /// A cluster-scoped object created and its reply, for the requests that are objects (a
    /// SelfSubjectRulesReview).
    pub fn create_cluster_object(
        &self,
        resource: Resource,
        object: &Value,
    ) -> Result<Value, K8sError> {
        let call = crate::call("create", resource.plural, "(cluster)", None);
        self.send_json(
            call,
            Method::POST,
            resource.everywhere(),
            "application/json",
            Some(object),
        )
    }

    /// The names of the cluster's nodes.
    pub fn list_node_names(&self) -> Result<Vec<String>, K8sError> {
        let call = crate::call("list", "nodes", "(cluster)", None);
        self.list_pages(call, "/api/v1/nodes", &mut |n| {
            n.pointer("/metadata/name")
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
    }

    /// A whole list, read in pages (see [`KubeClient::list_pages_async`]).
    fn list_pages<T>(
        &self,
        call: Call,
        path: &str,
        keep: &mut dyn FnMut(Value) -> Option<T>,
    ) -> Result<Vec<T>, K8sError> {
        self.runtime
            .block_on(self.list_pages_async(call, path, &[], keep))
            .map(|(items, _)| items)
    }

    /// A whole list and its resourceVersion, read in pages (`limit` and `continue`) so that
    /// no reply passes the size cap: a page that does is asked again at half the size. A
    /// `continue` token that expired (410 Gone) starts the list over, at most twice. `extra`
    /// query parameters (a field selector) go with every page. Each item is handed to `keep` as
    /// its page arrives, and only what it returns is held.
    pub(crate) async fn list_pages_async<T>(
        &self,
        call: Call,
        path: &str,
        extra: &[(&str, &str)],
        keep: &mut dyn FnMut(Value) -> Option<T>,
    ) -> Result<(Vec<T>, String), K8sError> {
        let mut all = Vec::new();
        let mut limit = FIRST_PAGE;
        let mut token: Option<String> = None;
        let mut restarts = 0;
        let mut pages = 0;
        loop {
            pages += 1;
            if pages > MAX_PAGES {
                return Err(K8sError::Request {
                    call: Box::new(call),
                    attempts: 1,
                    cause: Cause::decode(format!("the list did not end within {MAX_PAGES} pages")),
                });
            }
            let mut query = form_urlencoded::Serializer::new(String::new());
            query.append_pair("limit", &limit.to_string());
            for (k, v) in extra {
                query.append_pair(k, v);
            }
            if let Some(token) = &token {
                query.append_pair("continue", token);
            }
            let uri = format!("{path}?{}", query.finish());
            let page = self
                .request_json(call.clone(), Method::GET, uri, "application/json", None)
                .await;
            match page {
                Ok(mut page) => {
                    let next = page
                        .pointer("/metadata/continue")
                        .and_then(Value::as_str)
                        .filter(|t| !t.is_empty())
                        .map(str::to_owned);
                    if next.is_some() && next == token {
                        return Err(K8sError::Request {
                            call: Box::new(call),
                            attempts: 1,
                            cause: Cause::decode(
                                "the API server gave the same continue token twice",
                            ),
                        });
                    }
                    token = next;
                    let version = page
                        .pointer("/metadata/resourceVersion")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned();
                    all.extend(items(page.take()).into_iter().filter_map(&mut *keep));
                    if token.is_none() {
                        return Ok((all, version));
                    }
                }
                Err(e) if matches!(e.cause(), Some(Cause::ReplyTooLarge)) && limit > 1 => {
                    limit /= 2;
                }
                Err(e)
                    if matches!(e.cause(), Some(Cause::Api { code: 410, .. }))
                        && token.is_some()
                        && restarts < 2 =>
                {
                    restarts += 1;
                    all.clear();
                    token = None;
                }
                Err(e) => return Err(e),
            }
        }
    }

    pub fn create_object(
        &self,
        resource: Resource,
        namespace: &str,
        object: &Value,
    ) -> Result<Created, K8sError> {
        let name = object.pointer("/metadata/name").and_then(Value::as_str);
        let call = self.object_call("create", resource, namespace, name)?;
        match self.send_json(
            call,
            Method::POST,
            resource.collection(namespace),
            "application/json",
            Some(object),
        ) {
            Ok(v) => Ok(Created::Created(v)),
            // A create has no version to conflict on: a 409 is AlreadyExists.
            Err(e) if matches!(e.cause(), Some(Cause::Conflict(_))) => Ok(Created::AlreadyExists),
            Err(e) => Err(e),
        }
    }

    /// A JSON patch (RFC 6902), whose `test` ops make it conditional.
    pub fn json_patch_object(
        &self,
        resource: Resource,
        namespace: &str,
        name: &str,
        patch: &Value,
    ) -> Result<Written, K8sError> {
        let write = ("patch", Method::PATCH, "application/json-patch+json");
        self.write_object(write, resource, namespace, name, patch)
    }

    /// A merge patch (RFC 7386) of the object's status subresource, which writes the status
    /// only: a resource whose CRD has `subresources: status` ignores status in other writes.
    pub fn merge_patch_status(
        &self,
        resource: Resource,
        namespace: &str,
        name: &str,
        patch: &Value,
    ) -> Result<Value, K8sError> {
        let call = self.object_call("patch", resource, namespace, Some(name))?;
        let path = format!("{}/{name}/status", resource.collection(namespace));
        self.send_json(
            call,
            Method::PATCH,
            path,
            "application/merge-patch+json",
            Some(patch),
        )
    }

    /// A PUT of the whole object, conditioned on the `metadata.resourceVersion` it carries.
    pub fn replace_object(
        &self,
        resource: Resource,
        namespace: &str,
        name: &str,
        object: &Value,
    ) -> Result<Written, K8sError> {
        let write = ("update", Method::PUT, "application/json");
        self.write_object(write, resource, namespace, name, object)
    }

    /// A conditional write (`verb`, method and content type) of one object: a failed
    /// precondition is [`Written::Stale`].
    fn write_object(
        &self,
        (verb, method, content_type): (&'static str, Method, &'static str),
        resource: Resource,
        namespace: &str,
        name: &str,
        body: &Value,
    ) -> Result<Written, K8sError> {
        let call = self.object_call(verb, resource, namespace, Some(name))?;
        let path = format!("{}/{name}", resource.collection(namespace));
        match self.send_json(call, method, path, content_type, Some(body)) {
            Ok(v) => Ok(Written::Done(v)),
            Err(e) if is_stale(&e) => Ok(Written::Stale),
            Err(e) => Err(e),
        }
    }

    /// Deletes the object, only if it is still at `resource_version` when one is given.
    pub fn delete_object(
        &self,
        resource: Resource,
        namespace: &str,
        name: &str,
        resource_version: Option<&str>,
    ) -> Result<Deleted, K8sError> {
        let call = self.object_call("delete", resource, namespace, Some(name))?;
        let path = format!("{}/{name}", resource.collection(namespace));
        let options = resource_version.map(|rv| {
            serde_json::json!({"kind": "DeleteOptions", "apiVersion": "v1",
                               "preconditions": {"resourceVersion": rv}})
        });
        match self.send_json(
            call,
            Method::DELETE,
            path,
            "application/json",
            options.as_ref(),
        ) {
            Ok(_) => Ok(Deleted::Deleted),
            Err(e) if e.is_not_found() => Ok(Deleted::Absent),
            Err(e) if is_stale(&e) => Ok(Deleted::Stale),
            Err(e) => Err(e),
        }
    }
}

/// A list's `items`.
fn items(mut list: Value) -> Vec<Value> {
    match list.get_mut("items").map(Value::take) {
        Some(Value::Array(items)) => items,
        _ => Vec::new(),
    }
}

fn is_stale(e: &K8sError) -> bool {
    matches!(
        e.cause(),
        Some(Cause::Conflict(_)) | Some(Cause::Api { code: 422, .. })
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_would_change_the_path_are_refused() {
        for good in ["10.77.0.0-24", "blue-fd77-3---64", "kube-system", "a.b"] {
            assert!(check_name("name", good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "../secrets/x",
            "a/b",
            "A",
            "-a",
            "a-",
            "a b",
            "a?b=c",
            &"a".repeat(254),
        ] {
            assert!(check_name("name", bad).is_err(), "{bad}");
        }
    }
}
