//! The manifests in deploy/: each kustomize tree renders with kubectl, every object passes
//! Kubernetes' own schemas (strict: no unknown fields), and the objects say what a node needs.

use std::process::Command;

use anyhow::{bail, ensure, Context, Result};
use serde_json::Value;
use testkit::manifests::{deploy_dir, objects, render, validate};

fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> Result<&'a Value> {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .with_context(|| format!("no {kind} {name} in the rendered manifests"))
}

fn strings(value: &Value) -> Vec<&str> {
    value
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// Renders, validates and returns the objects of one tree.
fn rendered(tree: &str) -> Result<Vec<Value>> {
    let yaml = render(tree)?;
    let objects = objects(&yaml)?;
    let report = validate(&yaml)?;
    // The validator names every object it checked; all of them must have passed.
    let passed = report.matches("passed for resource").count();
    ensure!(
        passed == objects.len(),
        "{passed} of {} objects validated in deploy/{tree}:\n{report}",
        objects.len()
    );
    Ok(objects)
}

#[test]
fn the_validator_rejects_a_wrong_object() -> Result<()> {
    // Without this, a validator that passes everything would make the tests below meaningless.
    let wrong = "apiVersion: apps/v1\nkind: DaemonSet\nmetadata:\n  name: x\nspec:\n  selector: {}\n  template:\n    spec:\n      hostNetwork: \"yes\"\n      containers: []\n      notAField: 1\n";
    ensure!(
        validate(wrong).is_err(),
        "a DaemonSet with a bad field passed"
    );
    Ok(())
}

/// What every tree must hold, thin or thick, whatever its namespace and paths.
fn check_cluster_objects(objects: &[Value], namespace: &str) -> Result<()> {
    for o in objects {
        let kind = o["kind"].as_str().unwrap_or_default();
        let cluster_scoped = matches!(
            kind,
            "Namespace"
                | "CustomResourceDefinition"
                | "ClusterRole"
                | "ClusterRoleBinding"
                | "ValidatingWebhookConfiguration"
        );
        if !cluster_scoped {
            ensure!(
                o["metadata"]["namespace"] == namespace,
                "{kind} {} is not in {namespace}",
                o["metadata"]["name"]
            );
        }
    }
    find(objects, "Namespace", namespace)?;

    let crd = find(
        objects,
        "CustomResourceDefinition",
        "network-attachment-definitions.k8s.cni.cncf.io",
    )?;
    let spec = &crd["spec"];
    ensure!(spec["group"] == "k8s.cni.cncf.io" && spec["scope"] == "Namespaced");
    ensure!(spec["names"]["kind"] == "NetworkAttachmentDefinition");
    ensure!(strings(&spec["names"]["shortNames"]) == ["net-attach-def"]);
    let version = &spec["versions"][0];
    ensure!(version["name"] == "v1" && version["served"] == true && version["storage"] == true);
    ensure!(
        version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["config"]["type"]
            == "string"
    );

    // multus's credential writes only its own node's pods' status (tested on the real node).
    let policy = &find(objects, "ValidatingAdmissionPolicy", "multus-own-node-pods")?["spec"];
    ensure!(policy["failurePolicy"] == "Fail");
    ensure!(
        strings(&policy["matchConstraints"]["resourceRules"][0]["resources"]) == ["pods/status"]
    );
    // ... and deletes only its own node's pods (`deletePodsMissingNetworks`).
    let deletes = &policy["matchConstraints"]["resourceRules"][1];
    ensure!(strings(&deletes["resources"]) == ["pods"]);
    ensure!(strings(&deletes["operations"]) == ["DELETE"]);
    let binding = find(
        objects,
        "ValidatingAdmissionPolicyBinding",
        "multus-own-node-pods",
    )?;
    ensure!(binding["spec"]["policyName"] == "multus-own-node-pods");
    ensure!(strings(&binding["spec"]["validationActions"]) == ["Deny"]);

    let binding = find(objects, "ClusterRoleBinding", "multus")?;
    ensure!(binding["roleRef"]["name"] == "multus");
    ensure!(binding["subjects"][0]["name"] == "multus");
    ensure!(binding["subjects"][0]["namespace"] == namespace);
    for name in ["multus", "dhcp-daemon"] {
        let pod = &find(objects, "DaemonSet", name)?["spec"]["template"]["spec"];
        ensure!(pod["hostNetwork"] == true, "{name}: host network");
        ensure!(pod["priorityClassName"] == "system-node-critical", "{name}");
        ensure!(pod["tolerations"][0]["operator"] == "Exists", "{name}");
        let container = &pod["containers"][0];
        ensure!(container["securityContext"]["privileged"] == true, "{name}");
        ensure!(container["image"] == "localhost/multus-rs:latest", "{name}");
        ensure!(container["imagePullPolicy"] == "IfNotPresent", "{name}");
    }
    let dhcp = &find(objects, "DaemonSet", "dhcp-daemon")?["spec"]["template"]["spec"];
    let container = &dhcp["containers"][0];
    ensure!(strings(&container["command"]) == ["/usr/bin/cni-plugins", "dhcp", "daemon"]);
    ensure!(strings(&container["args"]).contains(&"-socketpath=/run/cni/dhcp.sock"));
    let netns = container["volumeMounts"]
        .as_array()
        .context("volumeMounts")?
        .iter()
        .find(|m| m["mountPath"] == "/run/netns")
        .context("the host's netns directory is not mounted in the dhcp daemon")?;
    ensure!(netns["mountPropagation"] == "HostToContainer");
    Ok(())
}

/// What the thin trees hold: [`check_cluster_objects`], the installer's DaemonSet, and
/// multus's grants.
fn check_common(objects: &[Value], namespace: &str) -> Result<()> {
    check_cluster_objects(objects, namespace)?;
    // Least privilege: exactly what multus does with the API.
    let granted = grants(find(objects, "ClusterRole", "multus")?)?;
    ensure!(
        granted
            == [
                "/events:create",
                "/pods/status:patch",
                "/pods:get",
                "/pods:list",
                "events.k8s.io/events:create",
                "k8s.cni.cncf.io/network-attachment-definitions:get",
                "k8s.cni.cncf.io/network-attachment-definitions:list",
            ],
        "ClusterRole multus grants {granted:?}"
    );
    for name in ["multus", "dhcp-daemon"] {
        let pod = &find(objects, "DaemonSet", name)?["spec"]["template"]["spec"];
        let container = &pod["containers"][0];
        ensure!(
            container["resources"]["requests"]["cpu"] == "10m"
                && container["resources"]["requests"]["memory"] == "16Mi",
            "{name}: small requests"
        );
    }
    let multus = &find(objects, "DaemonSet", "multus")?["spec"]["template"]["spec"];
    ensure!(multus["serviceAccountName"] == "multus");
    ensure!(strings(&multus["containers"][0]["command"]) == ["/usr/bin/multus", "install"]);
    Ok(())
}

/// The multus DaemonSet's args, checked to be flags `multus install` accepts, with
/// `$(VAR)` expanded from the container's env as the kubelet expands it (a `fieldRef` stands for
/// a value of its shape: `spec.nodeName` for `node-1`).
fn multus_args(objects: &[Value]) -> Result<Vec<String>> {
    let ds = find(objects, "DaemonSet", "multus")?;
    let container = &ds["spec"]["template"]["spec"]["containers"][0];
    let mut vars = Vec::new();
    for env in container["env"].as_array().into_iter().flatten() {
        let value = match (&env["value"], &env["valueFrom"]["fieldRef"]["fieldPath"]) {
            (Value::String(v), _) => v.clone(),
            (_, path) if path == "spec.nodeName" => "node-1".to_owned(),
            _ => bail!("the multus container's env {env} has no value the test can stand for"),
        };
        vars.push((
            format!("$({})", env["name"].as_str().unwrap_or_default()),
            value,
        ));
    }
    let args: Vec<String> = strings(&container["args"])
        .into_iter()
        .map(|a| {
            vars.iter()
                .fold(a.to_owned(), |arg, (var, value)| arg.replace(var, value))
        })
        .collect();
    install_takes(&args)?;
    Ok(args)
}

/// Off a node, /host/... is missing: the installer gets past its flags and stops at that
/// (exit 1). A flag it does not know is a usage error (exit 2).
fn install_takes(args: &[impl AsRef<std::ffi::OsStr>]) -> Result<()> {
    let out = Command::new(testkit::workspace_binary("multus", "multus"))
        .arg("install")
        .args(args)
        .output()?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    ensure!(
        out.status.code() == Some(1) && stderr.contains("is not a directory"),
        "multus install rejects the args: {stderr}"
    );
    Ok(())
}

/// The hostPath behind a container mount of the multus DaemonSet.
fn host_path_of(objects: &[Value], mount_path: &str) -> Result<String> {
    let pod = &find(objects, "DaemonSet", "multus")?["spec"]["template"]["spec"];
    let mount = pod["containers"][0]["volumeMounts"]
        .as_array()
        .context("volumeMounts")?
        .iter()
        .find(|m| m["mountPath"] == mount_path)
        .with_context(|| format!("nothing mounted at {mount_path}"))?;
    let volume = pod["volumes"]
        .as_array()
        .context("volumes")?
        .iter()
        .find(|v| v["name"] == mount["name"])
        .context("mount without volume")?;
    Ok(volume["hostPath"]["path"]
        .as_str()
        .context("not a hostPath")?
        .to_string())
}

/// Thick mode's daemon config, parsed.
fn daemon_config(objects: &[Value]) -> Result<Value> {
    let text = find(objects, "ConfigMap", "multus-daemon-config")?["data"]["daemon-config.json"]
        .as_str()
        .context("daemon-config.json")?;
    Ok(serde_json::from_str(text)?)
}

/// deploy/own-conf-dir: 00-multus.conf and multus.d in /run/multus/cni/net.d, the cluster
/// network still read from /etc/cni/net.d, and nothing else changed from the tree it is made of.
#[test]
fn own_conf_dir_trees_move_only_multus_config() -> Result<()> {
    let objects = rendered("own-conf-dir/base")?;
    check_common(&objects, "multus")?;
    let moved = multus_args(&objects)?;
    let shipped = multus_args(&rendered("base")?)?;
    let changed: Vec<(&String, &String)> =
        shipped.iter().zip(&moved).filter(|(a, b)| a != b).collect();
    ensure!(
        moved.len() == shipped.len()
            && changed
                == [
                    (
                        &"--cni-conf-dir=/host/etc/cni/net.d".to_owned(),
                        &"--cni-conf-dir=/host/run/multus/cni/net.d".to_owned()
                    ),
                    (
                        &"--multus-kubeconfig-file-host=/etc/cni/net.d/multus.d/multus.kubeconfig"
                            .to_owned(),
                        &"--multus-kubeconfig-file-host=/run/multus/cni/net.d/multus.d/multus.kubeconfig"
                            .to_owned()
                    ),
                ],
        "deploy/own-conf-dir/base changes {changed:?}"
    );
    ensure!(moved.contains(&"--multus-autoconfig-dir=/host/etc/cni/net.d".to_owned()));
    ensure!(host_path_of(&objects, "/host/run/multus/cni/net.d")? == "/run/multus/cni/net.d");
    ensure!(host_path_of(&objects, "/host/etc/cni/net.d")? == "/etc/cni/net.d");

    let objects = rendered("own-conf-dir/thick")?;
    check_cluster_objects(&objects, "multus")?;
    let mut moved = daemon_config(&objects)?;
    ensure!(
        moved["cniConfigDir"] == "/host/run/multus/cni/net.d",
        "{moved}"
    );
    let mut shipped = daemon_config(&rendered("thick")?)?;
    ensure!(moved["multusAutoconfigDir"] == shipped["multusAutoconfigDir"]);
    moved["cniConfigDir"] = Value::Null;
    shipped["cniConfigDir"] = Value::Null;
    ensure!(
        moved == shipped,
        "deploy/own-conf-dir/thick's daemon config drifted from deploy/thick's"
    );
    // The daemon sees the node's /run, where it writes the file.
    ensure!(host_path_of(&objects, "/host/run")? == "/run");
    Ok(())
}

/// deploy/per-node-certificate: deploy/thick's daemon config with perNodeCertificate added
/// and nothing else changed, deploy/base's installer with its certificate flags, the
/// certificates' group bound to multus's rights, and an approver that may approve for the API
/// server's client signer alone.
#[test]
fn per_node_certificate_trees_add_only_the_certificate() -> Result<()> {
    let objects = rendered("per-node-certificate/thick")?;
    check_cluster_objects(&objects, "multus")?;
    let mut config = daemon_config(&objects)?;
    ensure!(
        config["perNodeCertificate"]
            == serde_json::json!({
                "enabled": true,
                "bootstrapKubeconfig": "/hostroot/etc/kubernetes/kubelet.conf",
                "certDir": "/hostroot/var/lib/multus/certs",
                "certDuration": "10m",
            }),
        "{config}"
    );
    config
        .as_object_mut()
        .context("an object")?
        .remove("perNodeCertificate");
    ensure!(
        config == daemon_config(&rendered("thick")?)?,
        "deploy/per-node-certificate/thick's daemon config drifted from deploy/thick's"
    );
    let binding = find(
        &objects,
        "ClusterRoleBinding",
        "multus-per-node-certificates",
    )?;
    ensure!(binding["roleRef"]["name"] == "multus");
    ensure!(binding["subjects"][0]["name"] == "system:multus");
    let approver = grants(find(
        &objects,
        "ClusterRole",
        "multus-certificate-approver",
    )?)?;
    ensure!(
        approver
            == [
                "certificates.k8s.io/certificatesigningrequests/approval:update",
                "certificates.k8s.io/certificatesigningrequests:get",
                "certificates.k8s.io/certificatesigningrequests:list",
                "certificates.k8s.io/certificatesigningrequests:watch",
                "certificates.k8s.io/signers[kubernetes.io/kube-apiserver-client]:approve",
            ],
        "the approver is granted {approver:?}"
    );
    let pod =
        &find(&objects, "Deployment", "multus-certificate-approver")?["spec"]["template"]["spec"];
    ensure!(pod["securityContext"]["runAsNonRoot"] == true);
    ensure!(pod["containers"][0]["command"][1] == "approve-certificates");

    // Thin mode: deploy/base's installer with three flags more, and the node's directories
    // they name.
    let objects = rendered("per-node-certificate/base")?;
    check_common(&objects, "multus")?;
    let args = multus_args(&objects)?;
    let shipped = multus_args(&rendered("base")?)?;
    ensure!(
        args[..shipped.len()] == shipped[..]
            && args[shipped.len()..]
                == [
                    "--per-node-certificate-dir=/var/lib/multus/certs",
                    "--per-node-certificate-bootstrap-kubeconfig=/etc/kubernetes/kubelet.conf",
                    "--per-node-certificate-duration=24h",
                ],
        "deploy/per-node-certificate/base's installer runs with {args:?}"
    );
    ensure!(host_path_of(&objects, "/host/var/lib/multus")? == "/var/lib/multus");
    ensure!(host_path_of(&objects, "/host/etc/kubernetes")? == "/etc/kubernetes");
    ensure!(host_path_of(&objects, "/var/lib/kubelet/pki")? == "/var/lib/kubelet/pki");
    find(&objects, "Deployment", "multus-certificate-approver")?;
    Ok(())
}

#[test]
fn kubernetes_tree_renders_and_validates() -> Result<()> {
    let objects = rendered("base")?;
    check_common(&objects, "multus")?;
    let args = multus_args(&objects)?;
    ensure!(args.contains(&"--multus-conf-file=auto".to_string()));
    ensure!(args.contains(&"--cni-bin-dir=/host/opt/cni/bin".to_string()));
    ensure!(host_path_of(&objects, "/host/opt/cni/bin")? == "/opt/cni/bin");
    ensure!(host_path_of(&objects, "/host/etc/cni/net.d")? == "/etc/cni/net.d");
    Ok(())
}

#[test]
fn microshift_tree_renders_and_validates() -> Result<()> {
    let objects = rendered("microshift")?;
    check_common(&objects, "openshift-multus")?;
    let args = multus_args(&objects)?;
    for wanted in [
        "--multus-conf-file=auto",
        "--cni-bin-dir=/host/run/cni/bin",
        "--multus-master-cni-file-name=10-ovn-kubernetes.conf",
        "--readiness-indicator-file=/etc/cni/net.d/10-ovn-kubernetes.conf",
    ] {
        ensure!(
            args.iter().any(|a| a == wanted),
            "{wanted} missing: {args:?}"
        );
    }
    ensure!(host_path_of(&objects, "/host/run/cni/bin")? == "/run/cni/bin");
    let scc = find(&objects, "ClusterRoleBinding", "multus-privileged")?;
    ensure!(scc["roleRef"]["name"] == "system:openshift:scc:privileged");
    Ok(())
}

/// Every `group/resource:verb` a ClusterRole grants, sorted.
fn grants(role: &Value) -> Result<Vec<String>> {
    let mut all = Vec::new();
    for rule in role["rules"].as_array().context("rules")? {
        for group in strings(&rule["apiGroups"]) {
            for resource in strings(&rule["resources"]) {
                // Objects of one name only: `resource[name,...]`.
                let names = strings(&rule["resourceNames"]);
                let resource = if names.is_empty() {
                    resource.to_owned()
                } else {
                    format!("{resource}[{}]", names.join(","))
                };
                for verb in strings(&rule["verbs"]) {
                    all.push(format!("{group}/{resource}:{verb}"));
                }
            }
        }
    }
    all.sort();
    Ok(all)
}

#[test]
fn whereabouts_tree_renders_and_validates() -> Result<()> {
    let objects = rendered("whereabouts")?;
    check_common(&objects, "multus")?;
    let args = multus_args(&objects)?;
    ensure!(args.contains(&"--whereabouts-flat-file".to_string()));
    ensure!(args.contains(&"--whereabouts-node-name=node-1".to_string()));
    // The reference's objects: group, version, kind and plural, so both read each other's.
    for (plural, kind) in [
        ("ippools", "IPPool"),
        (
            "overlappingrangeipreservations",
            "OverlappingRangeIPReservation",
        ),
        ("nodeslicepools", "NodeSlicePool"),
    ] {
        let crd = find(
            &objects,
            "CustomResourceDefinition",
            &format!("{plural}.whereabouts.cni.cncf.io"),
        )?;
        let spec = &crd["spec"];
        ensure!(spec["group"] == "whereabouts.cni.cncf.io" && spec["scope"] == "Namespaced");
        ensure!(spec["names"]["kind"] == kind && spec["names"]["plural"] == plural);
        ensure!(
            spec["versions"][0]["name"] == "v1alpha1" && spec["versions"][0]["storage"] == true
        );
        // As the reference's: nodes write a NodeSlicePool's status through the object.
        ensure!(
            spec["versions"][0]["subresources"].is_null(),
            "{plural} has subresources"
        );
    }
    // IPAMClaims as the specification has them, whose status only whereabouts writes.
    let claims = &find(
        &objects,
        "CustomResourceDefinition",
        "ipamclaims.k8s.cni.cncf.io",
    )?["spec"];
    ensure!(claims["group"] == "k8s.cni.cncf.io" && claims["scope"] == "Namespaced");
    ensure!(claims["names"]["kind"] == "IPAMClaim" && claims["names"]["plural"] == "ipamclaims");
    let version = &claims["versions"][0];
    ensure!(
        version["name"] == "v1alpha1" && version["subresources"]["status"] == serde_json::json!({})
    );
    let schema = &version["schema"]["openAPIV3Schema"]["properties"];
    ensure!(strings(&schema["spec"]["required"]) == ["network", "interface"]);
    ensure!(schema["status"]["properties"]["ips"]["items"]["type"] == "string");
    let pool = find(
        &objects,
        "CustomResourceDefinition",
        "ippools.whereabouts.cni.cncf.io",
    )?;
    let allocation = &pool["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
        ["spec"]["properties"]["allocations"]["additionalProperties"];
    ensure!(strings(&allocation["required"]) == ["id", "podref"]);
    // Least privilege: what the plugin (as multus) and the reconciler do, and nothing more.
    let plugin = grants(find(&objects, "ClusterRole", "multus-whereabouts")?)?;
    ensure!(
        plugin
            == [
                "coordination.k8s.io/leases[whereabouts]:get",
                "coordination.k8s.io/leases[whereabouts]:update",
                "k8s.cni.cncf.io/ipamclaims/status:patch",
                "k8s.cni.cncf.io/ipamclaims:get",
                "whereabouts.cni.cncf.io/ippools:create",
                "whereabouts.cni.cncf.io/ippools:get",
                "whereabouts.cni.cncf.io/ippools:list",
                "whereabouts.cni.cncf.io/ippools:patch",
                "whereabouts.cni.cncf.io/nodeslicepools:create",
                "whereabouts.cni.cncf.io/nodeslicepools:get",
                "whereabouts.cni.cncf.io/nodeslicepools:patch",
                "whereabouts.cni.cncf.io/overlappingrangeipreservations:create",
                "whereabouts.cni.cncf.io/overlappingrangeipreservations:delete",
                "whereabouts.cni.cncf.io/overlappingrangeipreservations:get",
                "whereabouts.cni.cncf.io/overlappingrangeipreservations:patch",
            ],
        "multus-whereabouts grants {plugin:?}"
    );
    let binding = find(&objects, "ClusterRoleBinding", "multus-whereabouts")?;
    ensure!(
        binding["subjects"][0]["name"] == "multus"
            && binding["subjects"][0]["namespace"] == "multus"
    );
    let reconciler = grants(find(&objects, "ClusterRole", "whereabouts-reconciler")?)?;
    ensure!(
        reconciler
            == [
                "/nodes:list",
                "/pods:get",
                "/pods:list",
                "/pods:watch",
                "apps/statefulsets:get",
                "k8s.cni.cncf.io/ipamclaims:get",
                "k8s.cni.cncf.io/ipamclaims:list",
                "k8s.cni.cncf.io/ipamclaims:watch",
                "whereabouts.cni.cncf.io/ippools:delete",
                "whereabouts.cni.cncf.io/ippools:get",
                "whereabouts.cni.cncf.io/ippools:list",
                "whereabouts.cni.cncf.io/ippools:patch",
                "whereabouts.cni.cncf.io/nodeslicepools:get",
                "whereabouts.cni.cncf.io/nodeslicepools:list",
                "whereabouts.cni.cncf.io/nodeslicepools:patch",
                "whereabouts.cni.cncf.io/overlappingrangeipreservations:delete",
                "whereabouts.cni.cncf.io/overlappingrangeipreservations:list",
            ],
        "whereabouts-reconciler grants {reconciler:?}"
    );
    let job = &find(&objects, "CronJob", "whereabouts-reconciler")?["spec"];
    ensure!(job["concurrencyPolicy"] == "Forbid");
    let pod = &job["jobTemplate"]["spec"]["template"]["spec"];
    ensure!(pod["serviceAccountName"] == "whereabouts-reconciler");
    ensure!(pod["securityContext"]["runAsNonRoot"] == true);
    let container = &pod["containers"][0];
    ensure!(container["image"] == "localhost/multus-rs:latest");
    ensure!(container["imagePullPolicy"] == "IfNotPresent");
    ensure!(strings(&container["command"]) == ["/usr/bin/multus", "whereabouts", "reconcile"]);
    let controller = &find(&objects, "Deployment", "whereabouts-controller")?["spec"];
    ensure!(controller["replicas"] == 1);
    let pod = &controller["template"]["spec"];
    ensure!(pod["serviceAccountName"] == "whereabouts-reconciler");
    ensure!(pod["securityContext"]["runAsNonRoot"] == true);
    let container = &pod["containers"][0];
    ensure!(container["image"] == "localhost/multus-rs:latest");
    ensure!(strings(&container["command"]) == ["/usr/bin/multus", "whereabouts", "control"]);
    // Room for a pass over 10,000 pods (BENCHMARKS.md, bench-reconcile: 64 MiB at most).
    for container in [
        container,
        &job["jobTemplate"]["spec"]["template"]["spec"]["containers"][0],
    ] {
        ensure!(
            container["resources"]["limits"]["memory"] == "128Mi",
            "memory limit: {}",
            container["resources"]
        );
    }
    Ok(())
}

/// Thick mode: the daemon with its config, mounts and rights; the init container's flags are
/// the installer's, the config is one the daemon takes.
#[test]
fn thick_tree_renders_and_validates() -> Result<()> {
    let objects = rendered("thick")?;
    check_cluster_objects(&objects, "multus")?;
    let granted = grants(find(&objects, "ClusterRole", "multus")?)?;
    ensure!(
        granted
            == [
                "/events:create",
                "/pods/status:patch",
                "/pods:get",
                "/pods:list",
                "/pods:watch",
                "events.k8s.io/events:create",
                "k8s.cni.cncf.io/network-attachment-definitions:get",
                "k8s.cni.cncf.io/network-attachment-definitions:list",
                "k8s.cni.cncf.io/network-attachment-definitions:watch",
            ],
        "ClusterRole multus grants {granted:?}"
    );
    let pod = &find(&objects, "DaemonSet", "multus")?["spec"]["template"]["spec"];
    ensure!(pod["hostPID"] == true && pod["serviceAccountName"] == "multus");
    ensure!(pod["terminationGracePeriodSeconds"] == 10);
    let init = &pod["initContainers"][0];
    ensure!(strings(&init["command"]) == ["/usr/bin/multus", "install"]);
    install_takes(&strings(&init["args"]))?;
    let daemon = &pod["containers"][0];
    ensure!(
        strings(&daemon["command"])
            == [
                "/usr/bin/multus",
                "daemon",
                "-config",
                "/etc/multus/daemon-config.json"
            ]
    );
    ensure!(daemon["env"][0]["name"] == "MULTUS_NODE_NAME");
    ensure!(daemon["env"][0]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName");
    let mounts: Vec<&str> = daemon["volumeMounts"]
        .as_array()
        .context("volumeMounts")?
        .iter()
        .filter_map(|m| m["mountPath"].as_str())
        .collect();
    for needed in [
        "/host/etc/cni/net.d",
        "/opt/cni/bin",
        "/host/run",
        "/var/lib/cni/multus",
        "/run/netns",
        "/hostroot",
        "/etc/multus",
    ] {
        ensure!(
            mounts.contains(&needed),
            "{needed} is not mounted: {mounts:?}"
        );
    }
    // The config is one the daemon takes: it reads it, then stops at the missing in-cluster
    // credentials.
    let config = find(&objects, "ConfigMap", "multus-daemon-config")?["data"]["daemon-config.json"]
        .as_str()
        .context("daemon-config.json")?
        .to_owned();
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("daemon-config.json");
    std::fs::write(&path, &config)?;
    let out = Command::new(testkit::workspace_binary("multus", "multus"))
        .args(["daemon", "-config"])
        .arg(&path)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .output()?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    ensure!(
        !out.status.success() && stderr.contains("Kubernetes client setup from in-cluster"),
        "multus daemon -config: {stderr}"
    );
    let parsed: Value = serde_json::from_str(&config)?;
    ensure!(parsed["socketDir"] == "/host/run/multus/" && parsed["chrootDir"] == "/hostroot");
    Ok(())
}

/// Every tree with deploy/admission: the webhook's Service is the tree's, system namespaces
/// (the tree's own among them) are never sent to it, nothing a tenant sets opts out of it, its
/// account may do exactly what docs/admission.md lists, and its command is one `multus webhook`
/// takes.
#[test]
fn admission_trees_render_and_validate() -> Result<()> {
    for (tree, namespace) in [
        ("base", "multus"),
        ("thick", "multus"),
        ("whereabouts", "multus"),
        ("microshift", "openshift-multus"),
    ] {
        let objects = rendered(&format!("admission/{tree}"))?;
        check_cluster_objects(&objects, namespace)?;
        let configuration = find(
            &objects,
            "ValidatingWebhookConfiguration",
            "multus-admission",
        )?;
        let webhooks = configuration["webhooks"].as_array().context("webhooks")?;
        ensure!(webhooks.len() == 2, "{tree}: two webhooks");
        for webhook in webhooks {
            let service = &webhook["clientConfig"]["service"];
            ensure!(service["namespace"] == namespace && service["name"] == "multus-admission");
            ensure!(service["path"] == "/validate" && webhook["failurePolicy"] == "Fail");
            ensure!(webhook["sideEffects"] == "None" && webhook.get("objectSelector").is_none());
            let skipped = strings(&webhook["namespaceSelector"]["matchExpressions"][0]["values"]);
            for system in ["kube-system", "kube-node-lease", namespace] {
                ensure!(
                    skipped.contains(&system),
                    "{tree}: {system} is sent to the webhook"
                );
            }
        }
        let granted = grants(find(&objects, "ClusterRole", "multus-admission")?)?;
        ensure!(
            granted
                == [
                    "/nodes:list",
                    "admissionregistration.k8s.io/validatingwebhookconfigurations[multus-admission]:get",
                    "admissionregistration.k8s.io/validatingwebhookconfigurations[multus-admission]:patch",
                    "networking.k8s.io/servicecidrs:list",
                ],
            "{tree}: ClusterRole multus-admission grants {granted:?}"
        );
        let granted = grants(find(&objects, "Role", "multus-admission")?)?;
        ensure!(
            granted
                == [
                    "/secrets[multus-admission-tls]:get",
                    "/secrets[multus-admission-tls]:update",
                ],
            "{tree}: Role multus-admission grants {granted:?}"
        );
        // Shipped empty: the webhook fills it, and needs no right to create secrets.
        let secret = find(&objects, "Secret", "multus-admission-tls")?;
        ensure!(secret.get("data").is_none() && secret["type"] == "Opaque");
        let deployment = find(&objects, "Deployment", "multus-admission")?;
        ensure!(deployment["spec"]["replicas"] == 2);
        let pod = &deployment["spec"]["template"]["spec"];
        ensure!(pod["securityContext"]["runAsNonRoot"] == true);
        ensure!(pod["serviceAccountName"] == "multus-admission");
        ensure!(
            find(&objects, "PodDisruptionBudget", "multus-admission")?["spec"]["minAvailable"] == 1
        );
        // The nodes apply the policy: the thin installer copies it, the thick daemon reads it,
        // and thick's config is deploy/thick's with only `admissionPolicy` added.
        let daemonset = &find(&objects, "DaemonSet", "multus")?["spec"]["template"]["spec"];
        let mounts = daemonset["containers"][0]["volumeMounts"]
            .as_array()
            .context("mounts")?;
        ensure!(
            mounts
                .iter()
                .any(|m| m["mountPath"] == "/etc/multus-admission" && m["readOnly"] == true),
            "{tree}: the policy is not mounted"
        );
        let policy_file = "/etc/multus-admission/policy.yaml";
        if tree == "thick" {
            let mut with = daemon_config(&objects)?;
            ensure!(with["admissionPolicy"] == policy_file, "{with}");
            with.as_object_mut()
                .context("an object")?
                .remove("admissionPolicy");
            ensure!(
                with == daemon_config(&rendered("thick")?)?,
                "deploy/admission/thick's daemon config drifted from deploy/thick's"
            );
        } else {
            let args = multus_args(&objects)?;
            let flag = format!("--admission-policy={policy_file}");
            ensure!(args.contains(&flag), "{tree}: {args:?}");
        }
        // The command is one the webhook takes: it gets past its flags and stops at the
        // missing credentials, not at a usage error (2).
        let command = strings(&pod["containers"][0]["command"]);
        ensure!(
            command[..2] == ["/usr/bin/multus", "webhook"],
            "{command:?}"
        );
        let out = Command::new(testkit::workspace_binary("multus", "multus"))
            .args(&command[1..])
            .args([
                "--namespace",
                namespace,
                "--kubeconfig",
                "/nonexistent/kubeconfig",
            ])
            .output()?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        ensure!(
            out.status.code() == Some(1) && stderr.contains("/nonexistent/kubeconfig"),
            "{tree}: multus webhook rejects its command: {stderr}"
        );
    }
    Ok(())
}

#[test]
fn microshift_crio_drop_in_selects_multus_and_its_plugins() -> Result<()> {
    let text = std::fs::read_to_string(deploy_dir().join("microshift/crio/12-multus.conf"))?;
    let settings: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    ensure!(settings.first() == Some(&"[crio.network]"));
    ensure!(settings.contains(&"cni_default_network = \"multus-cni-network\""));
    let dirs = settings
        .iter()
        .skip_while(|l| !l.starts_with("plugin_dirs"))
        .skip(1)
        .take_while(|l| **l != "]")
        .map(|l| l.trim_end_matches(',').trim_matches('"'))
        .collect::<Vec<_>>();
    ensure!(
        dirs == ["/run/cni/bin", "/usr/libexec/cni"],
        "plugin_dirs {dirs:?}"
    );
    Ok(())
}
