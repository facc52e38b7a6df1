//! RBAC as kube-apiserver enforces it, for a server that opts in
//! ([`KubeApiServer::enforce_rbac`](super::KubeApiServer::enforce_rbac)): the Roles,
//! ClusterRoles, RoleBindings and ClusterRoleBindings of rendered manifests (a deploy/ tree),
//! each ServiceAccount's requests known by its bearer token, and every request authorized by
//! the attributes kube-apiserver derives from it (verb, API group, resource and subresource,
//! namespace, name). A request no rule allows gets kube-apiserver's 403 `Status`, word for word.
//!
//! Every authenticated user also holds what the bootstrap ClusterRoles `system:discovery` and
//! `system:public-info-viewer` grant: GET on the discovery and health paths. The server's own
//! token stays a cluster admin, for tests that set up objects over HTTP.

use anyhow::{bail, Context};
use serde_json::{json, Value};

use super::http1::Request;
use super::routes::{qualified, status};

/// The non-resource paths every authenticated user may GET.
const PUBLIC_PATHS: [&str; 9] = [
    "/api",
    "/api/*",
    "/apis",
    "/apis/*",
    "/healthz",
    "/livez",
    "/readyz",
    "/version",
    "/version/",
];

/// One rule of a Role or ClusterRole.
#[derive(Debug)]
struct Rule {
    verbs: Vec<String>,
    api_groups: Vec<String>,
    resources: Vec<String>,
    resource_names: Vec<String>,
    non_resource_urls: Vec<String>,
}

/// Whom a binding names.
#[derive(Debug)]
enum Subject {
    User(String),
    Group(String),
    /// Namespace (empty: the RoleBinding's) and name.
    ServiceAccount(String, String),
}

/// A binding, resolved: its subjects get the rules of its role, in its namespace (`None`: a
/// ClusterRoleBinding, everywhere), or the error kube-apiserver reports for a role missing.
#[derive(Debug)]
struct Grant {
    namespace: Option<String>,
    subjects: Vec<Subject>,
    rules: Result<Vec<Rule>, String>,
}

/// The policy of the manifests given.
#[derive(Debug, Default)]
pub(super) struct Rbac {
    grants: Vec<Grant>,
}

/// Who sent a request.
pub(super) struct User {
    pub name: String,
    groups: Vec<String>,
}

impl User {
    /// A ServiceAccount's user, as its token authenticates it.
    pub fn service_account(namespace: &str, name: &str) -> User {
        User {
            name: format!("system:serviceaccount:{namespace}:{name}"),
            groups: vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{namespace}"),
                "system:authenticated".into(),
            ],
        }
    }

    /// The namespace and name of a ServiceAccount's user.
    fn account(&self) -> Option<(&str, &str)> {
        self.name
            .strip_prefix("system:serviceaccount:")?
            .split_once(':')
    }
}

/// What kube-apiserver's RequestInfoFactory makes of a request.
#[derive(Debug, Default, PartialEq, Eq)]
struct Attributes {
    verb: String,
    /// `None` for a non-resource request.
    resource: Option<ResourceAttributes>,
    path: String,
}

#[derive(Debug, Default, PartialEq, Eq)]
struct ResourceAttributes {
    group: String,
    resource: String,
    subresource: String,
    namespace: String,
    name: String,
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

fn text(v: &Value, pointer: &str) -> String {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

impl Rbac {
    /// The policy of `objects` (manifests as JSON values; objects of other kinds are passed
    /// over). A binding whose role is not among them grants nothing, as on a real server.
    pub fn new(objects: &[Value]) -> anyhow::Result<Rbac> {
        let role = |kind: &str, namespace: &str, name: &str| {
            objects.iter().find(|o| {
                o["kind"] == kind
                    && o["metadata"]["name"] == name
                    && (kind == "ClusterRole" || text(o, "/metadata/namespace") == namespace)
            })
        };
        let mut grants = Vec::new();
        for binding in objects {
            let kind = binding["kind"].as_str().unwrap_or_default();
            let namespace = match kind {
                "ClusterRoleBinding" => None,
                "RoleBinding" => Some(text(binding, "/metadata/namespace")),
                _ => continue,
            };
            let role_kind = text(binding, "/roleRef/kind");
            let role_name = text(binding, "/roleRef/name");
            if role_kind != "ClusterRole" && (role_kind != "Role" || namespace.is_none()) {
                bail!(
                    "{kind} {}: roleRef kind {role_kind:?}",
                    binding["metadata"]["name"]
                );
            }
            let rules = match role(&role_kind, namespace.as_deref().unwrap_or(""), &role_name) {
                Some(r) => Ok(r["rules"]
                    .as_array()
                    .map(Vec::as_slice)
                    .unwrap_or_default()
                    .iter()
                    .map(|rule| Rule {
                        verbs: strings(&rule["verbs"]),
                        api_groups: strings(&rule["apiGroups"]),
                        resources: strings(&rule["resources"]),
                        resource_names: strings(&rule["resourceNames"]),
                        non_resource_urls: strings(&rule["nonResourceURLs"]),
                    })
                    .collect()),
                None => Err(format!(
                    "{}.rbac.authorization.k8s.io {role_name:?} not found",
                    role_kind.to_lowercase()
                )),
            };
            grants.push(Grant {
                subjects: subjects(binding)?,
                namespace,
                rules,
            });
        }
        Ok(Rbac { grants })
    }

    /// `None` when `user` may make `req`; otherwise kube-apiserver's 403.
    pub fn refuse(&self, user: &User, req: &Request) -> Option<(u16, Value)> {
        let attrs = attributes(req);
        if attrs.resource.is_none()
            && attrs.verb == "get"
            && PUBLIC_PATHS.iter().any(|p| url_matches(p, &attrs.path))
        {
            return None;
        }
        let mut errors = Vec::new();
        for grant in &self.grants {
            let applies = grant.subjects.iter().any(|s| subject_is(s, user, grant));
            let in_scope = match (&grant.namespace, &attrs.resource) {
                (None, _) => true,
                (Some(ns), Some(r)) => *ns == r.namespace,
                (Some(_), None) => false,
            };
            if !applies || !in_scope {
                continue;
            }
            match &grant.rules {
                Ok(rules) => {
                    if rules.iter().any(|rule| allows(rule, &attrs)) {
                        return None;
                    }
                }
                Err(e) => errors.push(e.clone()),
            }
        }
        let reason = match errors.len() {
            0 => String::new(),
            1 => format!(": RBAC: {}", errors[0]),
            _ => format!(": RBAC: [{}]", errors.join(", ")),
        };
        Some(forbidden(user, &attrs, &reason))
    }
}

fn subjects(binding: &Value) -> anyhow::Result<Vec<Subject>> {
    binding["subjects"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|s| {
            let name = text(s, "/name");
            Ok(match s["kind"].as_str() {
                Some("User") => Subject::User(name),
                Some("Group") => Subject::Group(name),
                Some("ServiceAccount") => Subject::ServiceAccount(text(s, "/namespace"), name),
                other => bail!("a subject of kind {other:?}"),
            })
        })
        .collect::<anyhow::Result<_>>()
        .with_context(|| format!("binding {}", binding["metadata"]["name"]))
}

/// kube-apiserver's `appliesToUser`: a ServiceAccount without a namespace is the RoleBinding's.
fn subject_is(subject: &Subject, user: &User, grant: &Grant) -> bool {
    match subject {
        Subject::User(name) => *name == user.name,
        Subject::Group(name) => user.groups.contains(name),
        Subject::ServiceAccount(ns, name) => {
            let ns = match (ns.as_str(), &grant.namespace) {
                ("", Some(bound)) => bound.as_str(),
                ("", None) => return false,
                (ns, _) => ns,
            };
            user.account() == Some((ns, name.as_str()))
        }
    }
}

/// kube-apiserver's `RuleAllows`.
fn allows(rule: &Rule, attrs: &Attributes) -> bool {
    let any = |list: &[String], wanted: &str| list.iter().any(|v| v == "*" || v == wanted);
    if !any(&rule.verbs, &attrs.verb) {
        return false;
    }
    let Some(r) = &attrs.resource else {
        return rule
            .non_resource_urls
            .iter()
            .any(|u| url_matches(u, &attrs.path));
    };
    let combined = if r.subresource.is_empty() {
        r.resource.clone()
    } else {
        format!("{}/{}", r.resource, r.subresource)
    };
    let resource_matches = rule.resources.iter().any(|v| {
        v == "*"
            || *v == combined
            || (!r.subresource.is_empty() && *v == format!("*/{}", r.subresource))
    });
    any(&rule.api_groups, &r.group)
        && resource_matches
        && (rule.resource_names.is_empty() || rule.resource_names.contains(&r.name))
}

/// A non-resource URL rule: the path itself, `*`, or a prefix ending in `*`.
fn url_matches(rule: &str, path: &str) -> bool {
    match rule.strip_suffix('*') {
        Some(prefix) => path.starts_with(prefix),
        None => rule == path,
    }
}

/// kube-apiserver's RequestInfoFactory, for the paths this server serves.
fn attributes(req: &Request) -> Attributes {
    let method = req.method.to_ascii_lowercase();
    let non_resource = || Attributes {
        verb: method.clone(),
        resource: None,
        path: req.path.clone(),
    };
    let parts: Vec<&str> = req.path.trim_matches('/').split('/').collect();
    let rest = match parts.as_slice() {
        ["api", _, _, ..] => &parts[1..],
        ["apis", _, _, _, ..] => &parts[1..],
        _ => return non_resource(),
    };
    let (group, rest) = if parts[0] == "apis" {
        (rest[0].to_owned(), &rest[2..])
    } else {
        (String::new(), &rest[1..])
    };
    let mut verb = match req.method.as_str() {
        "POST" => "create",
        "GET" | "HEAD" => "get",
        "PUT" => "update",
        "PATCH" => "patch",
        "DELETE" => "delete",
        _ => "",
    }
    .to_owned();
    let (namespace, parts) = match rest {
        ["namespaces", ns, resource, more @ ..] if !matches!(*resource, "status" | "finalize") => {
            let mut p = vec![*resource];
            p.extend_from_slice(more);
            (ns.to_string(), p)
        }
        ["namespaces", ns, ..] => (ns.to_string(), rest.to_vec()),
        _ => (String::new(), rest.to_vec()),
    };
    let field = |i: usize| parts.get(i).map_or(String::new(), |s| s.to_string());
    let mut name = field(1);
    if name.is_empty() && verb == "get" {
        let watch = req
            .param("watch")
            .is_some_and(|w| matches!(w.as_str(), "1" | "t" | "T" | "true" | "TRUE" | "True"));
        verb = if watch { "watch" } else { "list" }.to_owned();
        if let Some(selected) = req.param("fieldSelector").and_then(|s| {
            s.split(',').find_map(|term| {
                let (field, value) = term.split_once('=')?;
                (field.trim_end_matches('=') == "metadata.name").then(|| value.to_owned())
            })
        }) {
            name = selected;
        }
    }
    if name.is_empty() && verb == "delete" {
        verb = "deletecollection".to_owned();
    }
    Attributes {
        verb,
        resource: Some(ResourceAttributes {
            group,
            resource: field(0),
            subresource: field(2),
            namespace,
            name,
        }),
        path: req.path.clone(),
    }
}

/// kube-apiserver's 403: `NewForbidden` around `forbiddenMessage`, plus the authorizer's
/// reason when it has one.
fn forbidden(user: &User, attrs: &Attributes, reason: &str) -> (u16, Value) {
    let who = &user.name;
    let verb = &attrs.verb;
    let Some(r) = &attrs.resource else {
        let path = &attrs.path;
        return status(
            403,
            "Forbidden",
            &format!("forbidden: User {who:?} cannot {verb} path {path:?}{reason}"),
            Some(json!({})),
        );
    };
    let resource = if r.subresource.is_empty() {
        r.resource.clone()
    } else {
        format!("{}/{}", r.resource, r.subresource)
    };
    let scope = if r.namespace.is_empty() {
        "at the cluster scope".to_owned()
    } else {
        format!("in the namespace {:?}", r.namespace)
    };
    let why = format!(
        "User {who:?} cannot {verb} resource {resource:?} in API group {:?} {scope}{reason}",
        r.group
    );
    let what = qualified(&r.group, &r.resource);
    let message = if r.name.is_empty() {
        format!("{what} is forbidden: {why}")
    } else {
        format!("{what} {:?} is forbidden: {why}", r.name)
    };
    // StatusDetails' fields in kube-apiserver's order, each left out when empty.
    let details = [
        ("name", &r.name),
        ("group", &r.group),
        ("kind", &r.resource),
    ]
    .into_iter()
    .filter(|(_, v)| !v.is_empty())
    .map(|(k, v)| (k.to_owned(), json!(v)))
    .collect();
    status(403, "Forbidden", &message, Some(Value::Object(details)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(method: &str, target: &str) -> Request {
        let (path, query) = target.split_once('?').unwrap_or((target, ""));
        Request::new(method, path, query, Vec::new(), Vec::new())
    }

    #[test]
    fn requests_map_to_verbs_as_kube_apiserver_maps_them() {
        let pools = "/apis/whereabouts.cni.cncf.io/v1alpha1/namespaces/k/ippools";
        let g = "whereabouts.cni.cncf.io";
        let x = format!("{pools}/x");
        // method, target: verb, group, resource, subresource, namespace, name
        let cases = [
            (
                "GET",
                "/api/v1/namespaces/a/pods/web",
                ["get", "", "pods", "", "a", "web"],
            ),
            ("GET", "/api/v1/pods", ["list", "", "pods", "", "", ""]),
            (
                "GET",
                "/api/v1/pods?watch=1",
                ["watch", "", "pods", "", "", ""],
            ),
            (
                "GET",
                "/api/v1/namespaces/a/pods?fieldSelector=metadata.name%3Dweb",
                ["list", "", "pods", "", "a", "web"],
            ),
            (
                "PATCH",
                "/api/v1/namespaces/a/pods/web/status",
                ["patch", "", "pods", "status", "a", "web"],
            ),
            (
                "POST",
                "/api/v1/namespaces/a/events",
                ["create", "", "events", "", "a", ""],
            ),
            ("PUT", &x, ["update", g, "ippools", "", "k", "x"]),
            ("DELETE", &x, ["delete", g, "ippools", "", "k", "x"]),
            (
                "DELETE",
                pools,
                ["deletecollection", g, "ippools", "", "k", ""],
            ),
            (
                "GET",
                "/api/v1/namespaces/a",
                ["get", "", "namespaces", "", "a", "a"],
            ),
            ("GET", "/api/v1/nodes", ["list", "", "nodes", "", "", ""]),
        ];
        for (method, target, want) in cases {
            let a = attributes(&req(method, target));
            let r = a.resource.unwrap_or_default();
            let got = [
                a.verb.as_str(),
                &r.group,
                &r.resource,
                &r.subresource,
                &r.namespace,
                &r.name,
            ];
            assert_eq!(got, want, "{method} {target}");
        }
        for discovery in ["/api", "/api/v1", "/apis", "/apis/k8s.cni.cncf.io/v1"] {
            assert!(
                attributes(&req("GET", discovery)).resource.is_none(),
                "{discovery}"
            );
        }
    }

    #[test]
    fn bindings_grant_their_roles_rules_and_nothing_else() {
        let objects = [
            json!({"kind": "ClusterRole", "metadata": {"name": "reader"},
                   "rules": [{"apiGroups": [""], "resources": ["pods", "pods/status"], "verbs": ["get"]},
                             {"apiGroups": ["x.io"], "resources": ["*/scale"], "verbs": ["*"]}]}),
            json!({"kind": "Role", "metadata": {"name": "one", "namespace": "a"},
                   "rules": [{"apiGroups": [""], "resources": ["events"], "verbs": ["create"],
                              "resourceNames": []}]}),
            json!({"kind": "ClusterRoleBinding", "metadata": {"name": "r"},
                   "roleRef": {"kind": "ClusterRole", "name": "reader"},
                   "subjects": [{"kind": "ServiceAccount", "name": "sa", "namespace": "m"}]}),
            json!({"kind": "RoleBinding", "metadata": {"name": "o", "namespace": "a"},
                   "roleRef": {"kind": "Role", "name": "one"},
                   "subjects": [{"kind": "ServiceAccount", "name": "sa"}]}),
            json!({"kind": "RoleBinding", "metadata": {"name": "m", "namespace": "a"},
                   "roleRef": {"kind": "ClusterRole", "name": "missing"},
                   "subjects": [{"kind": "Group", "name": "system:serviceaccounts:a"}]}),
        ];
        let rbac = Rbac::new(&objects).unwrap();
        let (m, a) = (
            User::service_account("m", "sa"),
            User::service_account("a", "sa"),
        );
        assert!(rbac
            .refuse(&m, &req("GET", "/api/v1/namespaces/z/pods/w"))
            .is_none());
        assert!(rbac
            .refuse(&m, &req("GET", "/api/v1/namespaces/z/pods/w/status"))
            .is_none());
        assert!(rbac
            .refuse(&m, &req("PATCH", "/apis/x.io/v1/namespaces/z/d/w/scale"))
            .is_none());
        assert!(rbac.refuse(&m, &req("GET", "/apis")).is_none());
        let (code, refused) = rbac.refuse(&m, &req("GET", "/api/v1/pods")).unwrap();
        assert_eq!(code, 403);
        assert_eq!(
            refused,
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                   "message": "pods is forbidden: User \"system:serviceaccount:m:sa\" cannot list resource \"pods\" in API group \"\" at the cluster scope",
                   "reason": "Forbidden", "details": {"kind": "pods"}, "code": 403})
        );
        // A RoleBinding's ServiceAccount without a namespace is in the binding's.
        assert!(rbac
            .refuse(&a, &req("POST", "/api/v1/namespaces/a/events"))
            .is_none());
        assert!(rbac
            .refuse(&m, &req("POST", "/api/v1/namespaces/a/events"))
            .is_some());
        let (_, refused) = rbac
            .refuse(&a, &req("POST", "/api/v1/namespaces/b/events"))
            .unwrap();
        assert_eq!(
            refused["message"],
            "events is forbidden: User \"system:serviceaccount:a:sa\" cannot create resource \"events\" in API group \"\" in the namespace \"b\""
        );
        // A binding to a role that does not exist is the reason, where it applies.
        let (_, refused) = rbac
            .refuse(&a, &req("DELETE", "/api/v1/namespaces/a/pods/w"))
            .unwrap();
        assert_eq!(
            refused["message"],
            "pods \"w\" is forbidden: User \"system:serviceaccount:a:sa\" cannot delete resource \"pods\" in API group \"\" in the namespace \"a\": RBAC: clusterrole.rbac.authorization.k8s.io \"missing\" not found"
        );
        // On the wire, key for key as kube-apiserver sends it.
        let w = User::service_account("kube-system", "whereabouts");
        let pool = "/apis/whereabouts.cni.cncf.io/v1alpha1/namespaces/kube-system/ippools/x";
        let (_, refused) = rbac.refuse(&w, &req("DELETE", pool)).unwrap();
        assert_eq!(
            serde_json::to_string(&refused).unwrap(),
            r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"ippools.whereabouts.cni.cncf.io \"x\" is forbidden: User \"system:serviceaccount:kube-system:whereabouts\" cannot delete resource \"ippools\" in API group \"whereabouts.cni.cncf.io\" in the namespace \"kube-system\"","reason":"Forbidden","details":{"name":"x","group":"whereabouts.cni.cncf.io","kind":"ippools"},"code":403}"#
        );
        let (_, refused) = rbac.refuse(&m, &req("GET", "/metrics")).unwrap();
        assert_eq!(
            refused,
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                   "message": "forbidden: User \"system:serviceaccount:m:sa\" cannot get path \"/metrics\"",
                   "reason": "Forbidden", "details": {}, "code": 403})
        );
    }
}
