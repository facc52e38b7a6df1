//! The same cases through the reference Go plugins (v1.9.1, built from their module by
//! scripts/peers.sh) and through ours, each side in fresh node and pod namespaces, compared on: success or failure of every step, the ADD result
//! (MACs and veth names aside), kernel state (links, addresses, routes, VLANs, forwarding),
//! reservations left and firewall rules. Where we differ on purpose, the case says why and
//! asserts our behaviour instead; the reasons are listed in docs/compatibility.md.

use crate::common;

use common::{bridge_conf, bw_pair, host_local, normalize_result, Plugins, Sandbox, Side};
use serde_json::{json, Value};

const V4: &str = r#"[[{"subnet":"10.20.0.0/24"}]]"#;
const V6: &str = r#"[[{"subnet":"fd20::/64"}]]"#;
const DUAL: &str = r#"[[{"subnet":"10.20.0.0/24"}],[{"subnet":"fd20::/64"}]]"#;

/// One thing a case does, in order.
#[derive(Clone, Copy)]
enum Step {
    Add,
    /// CHECK with the last ADD result as prevResult.
    Check,
    Del,
    /// DEL with an empty CNI_NETNS.
    DelNoNetns,
    /// Removes the pod namespace and the veth (which the kernel removes with the namespace,
    /// unless another mount namespace still holds it: done here so the result is the same).
    DeletePodNetns,
    /// Removes an address from the pod's eth0.
    RemovePodAddr(&'static str),
    /// Deletes a link of the node (a macvlan's master, say).
    DeleteNodeLink(&'static str),
    /// Deletes the node's default route.
    DeleteDefaultRoute,
    /// Runs `ip` with these arguments in the pod.
    InPod(&'static [&'static str]),
}

/// How the two sides compare.
enum Expect {
    /// Same outcome of every step, same result, same kernel state.
    Same,
    /// Same, except these snapshot keys.
    SameExcept(&'static [&'static str]),
    /// The reference (v1.9.1) behaves differently, for this reason: only our side is checked.
    Differs(&'static str),
}

struct Case {
    name: &'static str,
    conf: String,
    cni_args: &'static str,
    /// CNI_IFNAME; `eth0` unless the pod has one already.
    ifname: &'static str,
    before: fn(&Sandbox),
    steps: &'static [Step],
    /// Our CNI error code for a step that fails (the reference answers 999 for most).
    our_code: Option<u64>,
    expect: Expect,
    /// More assertions on our side.
    check: Option<fn(&Sandbox, &[Outcome])>,
}

fn case(name: &'static str, conf: String) -> Case {
    Case {
        name,
        conf,
        cni_args: "",
        ifname: "eth0",
        before: |_| {},
        steps: &[Step::Add],
        our_code: None,
        expect: Expect::Same,
        check: None,
    }
}

impl Case {
    fn steps(mut self, steps: &'static [Step]) -> Case {
        self.steps = steps;
        self
    }
    fn args(mut self, args: &'static str) -> Case {
        self.cni_args = args;
        self
    }
    /// As a secondary network: `net1` in a pod whose eth0 holds its default routes.
    fn secondary(mut self) -> Case {
        self.ifname = "net1";
        self
    }
    fn before(mut self, f: fn(&Sandbox)) -> Case {
        self.before = f;
        self
    }
    fn fails_with(mut self, code: u64) -> Case {
        self.our_code = Some(code);
        self
    }
    fn expect(mut self, e: Expect) -> Case {
        self.expect = e;
        self
    }
    fn check(mut self, f: fn(&Sandbox, &[Outcome])) -> Case {
        self.check = Some(f);
        self
    }
    /// Differs from the reference for `why`; `f` checks ours.
    fn differs(self, why: &'static str, f: fn(&Sandbox, &[Outcome])) -> Case {
        self.expect(Expect::Differs(why)).check(f)
    }
}

/// What one step did.
#[derive(Debug, Clone, PartialEq)]
struct Outcome {
    ok: bool,
    code: Option<u64>,
    /// ADD: the normalized result.
    result: Value,
    raw: String,
}

/// Everything compared for one side.
struct Run {
    outcomes: Vec<Outcome>,
    state: Value,
}

fn conf(body: &str) -> String {
    bridge_conf("1.0.0", body)
}

fn hl(ranges: &str) -> String {
    host_local(ranges, "")
}

fn cases() -> Vec<Case> {
    let v4 = hl(V4);
    vec![
        case("L3 IPv4", conf(&format!(",{v4}"))),
        case("isGateway", conf(&format!(r#","isGateway":true,{v4}"#))),
        case("isDefaultGateway", conf(&format!(r#","isDefaultGateway":true,{v4}"#))),
        case(
            "isDefaultGateway beside the pod's default routes",
            conf(&format!(r#","isDefaultGateway":true,{}"#, hl(DUAL))),
        )
        .secondary()
        .before(pod_eth0)
        .steps(&[Step::Add, Step::Check, Step::Del]),
        case(
            "forceAddress replaces the bridge address",
            conf(&format!(r#","isGateway":true,"forceAddress":true,{v4}"#)),
        )
        .before(bridge_with_other_address),
        case(
            "gateway conflict without forceAddress",
            conf(&format!(r#","isGateway":true,{v4}"#)),
        )
        .before(bridge_with_other_address)
        .fails_with(7)
        // `vlans`: the veth v1.9.1 leaves is a bridge port, in VLAN 1 on a kernel with VLANs.
        .expect(Expect::SameExcept(&["node_links", "pod_links", "pod_routes", "pod_sysctls", "reservations", "vlans"]))
        .check(|sb, _| {
            // v1.9.1 leaves the veth, the pod interface and the reservation behind; we do not.
            assert_eq!(sb.node_links(), ["sbs0"]);
            assert!(sb.pod.links().iter().all(|l| l == "lo"));
            assert!(sb.reservations().is_empty());
        }),
        case("mtu", conf(&format!(r#","mtu":1400,{v4}"#))),
        case("IPv6 gateway", conf(&format!(r#","isGateway":true,{}"#, hl(V6)))),
        case(
            "dual stack default gateway",
            conf(&format!(r#","isDefaultGateway":true,{}"#, hl(DUAL))),
        ),
        case("IPv6 with enabledad", conf(&format!(r#","enabledad":true,{}"#, hl(V6)))),
        case("L2, no ipam", conf("")),
        case("L2, ipam without type", conf(r#","ipam":{}"#)),
        case(
            "routes and DNS from host-local, DNS from config",
            conf(&format!(
                r#","isGateway":true,"dns":{{"nameservers":["10.20.0.53"],"search":["x.local"]}},{}"#,
                host_local(V4, r#","routes":[{"dst":"0.0.0.0/0"},{"dst":"192.168.7.0/24","gw":"10.20.0.254"}]"#)
            )),
        ),
        case(
            "static IPAM with routes",
            conf(
                r#","ipam":{"type":"static","addresses":[{"address":"10.30.0.7/24","gateway":"10.30.0.1"},{"address":"fd30::7/64"}],"routes":[{"dst":"10.40.0.0/16"},{"dst":"::/0","gw":"fd30::1"}]}"#,
            ),
        ),
        case(
            "mac from runtimeConfig",
            conf(&format!(r#","runtimeConfig":{{"mac":"02:00:00:00:00:03"}},{v4}"#)),
        )
        .check(|sb, out| assert_mac(sb, out, "02:00:00:00:00:03")),
        case(
            "mac from args.cni",
            conf(&format!(r#","args":{{"cni":{{"mac":"02:00:00:00:00:02"}}}},{v4}"#)),
        )
        .check(|sb, out| assert_mac(sb, out, "02:00:00:00:00:02")),
        case("mac from CNI_ARGS", conf(&format!(",{v4}")))
            .args("IgnoreUnknown=1;MAC=02:00:00:00:00:01")
            .check(|sb, out| assert_mac(sb, out, "02:00:00:00:00:01")),
        case(
            "mac: runtimeConfig beats args.cni beats CNI_ARGS",
            conf(&format!(
                r#","args":{{"cni":{{"mac":"02:00:00:00:00:02"}}}},"runtimeConfig":{{"mac":"02:00:00:00:00:03"}},{v4}"#
            )),
        )
        .args("IgnoreUnknown=1;MAC=02:00:00:00:00:01")
        .check(|sb, out| assert_mac(sb, out, "02:00:00:00:00:03")),
        case("ipMasq, default backend", conf(&format!(r#","ipMasq":true,{v4}"#)))
            .steps(&[Step::Add, Step::Del]),
        case("ipMasq with rules left in place", conf(&format!(r#","ipMasq":true,{}"#, hl(DUAL)))),
        case(
            "ipMasq iptables backend",
            conf(&format!(r#","ipMasq":true,"ipMasqBackend":"iptables",{v4}"#)),
        ),
        case(
            "ipMasq nftables backend",
            conf(&format!(r#","ipMasq":true,"ipMasqBackend":"nftables",{v4}"#)),
        )
        .check(|sb, out| {
                assert!(out[0].ok);
                let fw = sb.firewall();
                assert!(fw.contains("table inet cni_plugins_masquerade"), "{fw}");
                assert!(!fw.contains("CNI-"), "no iptables chain expected: {fw}");
            }),
        case("hairpinMode", conf(&format!(r#","hairpinMode":true,{v4}"#))),
        case("promiscMode", conf(&format!(r#","promiscMode":true,{v4}"#))),
        case(
            "vlan",
            conf(&format!(r#","vlan":100,{v4}"#)),
        )
        .check(|sb, out| {
                if !vlan_filtering_here(out) {
                    return;
                }
                assert!(out[0].ok, "{:?}", out[0]);
                assert_eq!(sb.node_link("sbs0")["linkinfo"]["info_data"]["vlan_filtering"], 1);
                assert_eq!(port_vlans(sb), json!([[100, null, true, true]]));
            }),
        case(
            "vlan with isGateway",
            conf(&format!(r#","vlan":100,"isGateway":true,{v4}"#)),
        )
        .check(|sb, out| {
                if !vlan_filtering_here(out) {
                    return;
                }
                assert!(out[0].ok, "{:?}", out[0]);
                let names: Vec<&str> = out[0].result["interfaces"]
                    .as_array()
                    .expect("the result lists interfaces")
                    .iter()
                    .filter_map(|i| i["name"].as_str())
                    .collect();
                assert_eq!(names, ["sbs0", "veth*", "eth0", "sbs0.100"]);
                let gw = sb.node.ip_json(&["addr", "show", "dev", "sbs0.100"]);
                assert!(gw.to_string().contains("10.20.0.1"), "{gw}");
                sb.pod.ip(&["link", "set", "lo", "up"]);
                let ping = sb.pod.command("ping").args(["-c1", "-W1", "10.20.0.1"]).output().expect("run ping");
                assert!(ping.status.success(), "{}", String::from_utf8_lossy(&ping.stdout));
            }),
        case(
            "vlanTrunk",
            conf(&format!(r#","vlanTrunk":[{{"id":5}},{{"minID":10,"maxID":12}}],{v4}"#)),
        )
        .check(|sb, out| {
                if !vlan_filtering_here(out) {
                    return;
                }
                assert!(out[0].ok, "{:?}", out[0]);
                // The kernel keeps VLANs one by one; `bridge vlan show` lists them so (no -c).
                assert_eq!(
                    port_vlans(sb),
                    json!([
                        [1, null, true, true],
                        [5, null, false, false],
                        [10, null, false, false],
                        [11, null, false, false],
                        [12, null, false, false]
                    ])
                );
            }),
        case(
            "vlan with preserveDefaultVlan",
            conf(&format!(r#","vlan":7,"preserveDefaultVlan":true,{v4}"#)),
        )
        .check(|sb, out| {
                if !vlan_filtering_here(out) {
                    return;
                }
                assert!(out[0].ok, "{:?}", out[0]);
                // The default VLAN 1 stays (no longer pvid), 7 is the access VLAN.
                assert_eq!(port_vlans(sb), json!([[1, null, false, true], [7, null, true, true]]));
            }),
        case("portIsolation", conf(&format!(r#","portIsolation":true,{v4}"#))).check(|sb, out| {
                    assert!(out[0].ok);
                    let veth = out[0].raw_iface(1);
                    assert_eq!(sb.node_link(&veth)["linkinfo"]["info_slave_data"]["isolated"], true);
                }),
        case("cniVersion 0.3.1", bridge_conf("0.3.1", &format!(",{v4}"))),
        case("cniVersion 0.4.0", bridge_conf("0.4.0", &format!(",{v4}"))),
        case("cniVersion 0.2.0", bridge_conf("0.2.0", &format!(r#","isGateway":true,{v4}"#))),
        case("cniVersion 0.2.0 without addresses", bridge_conf("0.2.0", ""))
            .fails_with(1)
            // `vlans`: the veth v1.9.1 leaves is a bridge port, in VLAN 1 on a kernel with VLANs.
            .expect(Expect::SameExcept(&["node_links", "pod_links", "pod_sysctls", "vlans"])),
        case("cniVersion 1.1.0", bridge_conf("1.1.0", &format!(",{v4}"))).check(|_, out| {
                    assert!(out[0].ok, "{:?}", out[0]);
                    assert_eq!(out[0].result["cniVersion"], "1.1.0");
                }),
        case("vlan 5000", conf(r#","vlan":5000"#)).fails_with(7),
        case("hairpinMode with promiscMode", conf(r#","hairpinMode":true,"promiscMode":true"#))
            .fails_with(7),
        case("trunk minID above maxID", conf(r#","vlanTrunk":[{"minID":20,"maxID":10}]"#))
            .check(assert_rejected),
        case("trunk id 0", conf(r#","vlanTrunk":[{"id":0}]"#))
            .check(assert_rejected),
        case(
            "disableContainerInterface with ipam",
            conf(&format!(r#","disableContainerInterface":true,{v4}"#)),
        )
        .check(assert_rejected),
        case("disableContainerInterface, L2", conf(r#","disableContainerInterface":true"#))
            .check(|sb, out| {
                    assert!(out[0].ok, "{:?}", out[0]);
                    let eth0 = sb.pod.ip_json(&["link", "show", "dev", "eth0"]);
                    assert!(!eth0.to_string().contains("\"UP\""), "{eth0}");
                }),
        case("bridge name taken by a veth", conf(&format!(",{v4}")))
            .before(veth_named_like_the_bridge)
            .fails_with(7),
        case("CHECK after ADD", conf(&format!(r#","isGateway":true,{}"#, hl(DUAL))))
            .steps(&[Step::Add, Step::Check]),
        case("CHECK after an address was removed", conf(&format!(",{v4}")))
            .steps(&[Step::Add, Step::RemovePodAddr("10.20.0.2/24"), Step::Check]),
        case("DEL twice", conf(&format!(r#","isGateway":true,{v4}"#)))
            .steps(&[Step::Add, Step::Del, Step::Del]),
        case("DEL after the pod netns was deleted", conf(&format!(",{v4}")))
            .steps(&[Step::Add, Step::DeletePodNetns, Step::Del, Step::Del]),
        case("DEL with empty CNI_NETNS", conf(&format!(",{v4}")))
            .steps(&[Step::Add, Step::DelNoNetns]),
        case("ADD, DEL, ADD again", conf(&format!(r#","isGateway":true,{v4}"#)))
            .steps(&[Step::Add, Step::Del, Step::Add]),
    ]
}

/// A macvlan config on the node's master `up0`; `body` starts with a comma.
fn mv(body: &str) -> String {
    format!(r#"{{"cniVersion":"1.0.0","name":"sbs","type":"macvlan","master":"up0"{body}}}"#)
}

/// The same for ipvlan.
fn ipv(body: &str) -> String {
    format!(r#"{{"cniVersion":"1.0.0","name":"sbs","type":"ipvlan","master":"up0"{body}}}"#)
}

const STATIC: &str = r#""ipam":{"type":"static","addresses":[{"address":"10.20.0.5/24","gateway":"10.20.0.1"},{"address":"fd20::5/64"}],"routes":[{"dst":"0.0.0.0/0"},{"dst":"fd21::/64","gw":"fd20::1"}]}"#;

const STATIC_DEFAULTS: &str = r#""ipam":{"type":"static","addresses":[{"address":"10.20.0.5/24","gateway":"10.20.0.1"},{"address":"fd20::5/64","gateway":"fd20::1"}],"routes":[{"dst":"0.0.0.0/0"},{"dst":"::/0"},{"dst":"10.88.0.0/16"}]}"#;

/// The pod's eth0 as the cluster network leaves it: 10.88.0.5/16 and fd88::5/64, with the
/// default routes of both families through it.
fn pod_eth0(sb: &Sandbox) {
    common::pod_eth0(&sb.pod);
}

/// The master `up0`: a veth end whose peer is up, with a default route (see
/// [`common::veth_master`]).
fn veth_master(sb: &Sandbox) {
    common::veth_master(&sb.node, 1500);
}

/// The master `up0` as a dummy link (see [`common::dummy_master`]).
fn dummy_master(sb: &Sandbox) {
    common::dummy_master(&sb.node);
}

/// Our ADD succeeded: a case both sides fail alike (a kernel without the feature) would
/// otherwise compare equal.
fn assert_added(_: &Sandbox, out: &[Outcome]) {
    assert!(out[0].ok, "{:?}", out[0]);
}

/// Our failed ADD left nothing in the pod and no reservation.
fn assert_nothing_left(sb: &Sandbox, out: &[Outcome]) {
    assert!(!out[0].ok, "{:?}", out[0]);
    assert!(
        sb.pod.links().iter().all(|l| l == "lo"),
        "{:?}",
        sb.pod.links()
    );
    assert!(sb.reservations().is_empty(), "{:?}", sb.reservations());
}

/// The result's DNS holds the config's and IPAM's settings.
fn assert_merged_dns(_: &Sandbox, out: &[Outcome]) {
    assert!(out[0].ok, "{:?}", out[0]);
    assert_eq!(
        out[0].result["dns"],
        json!({"nameservers":["10.20.0.53","10.20.0.54"],"search":["cluster.local"]})
    );
}

const DNS_BOTH: &str = r#","dns":{"nameservers":["10.20.0.53"],"search":["cluster.local"]},"ipam":{"type":"static","addresses":[{"address":"10.20.0.5/24"}],"dns":{"nameservers":["10.20.0.54"]}}"#;

fn macvlan_cases() -> Vec<Case> {
    let hl4 = hl(V4);
    let m = |name: &'static str, conf: String| case(name, conf).before(veth_master);
    let beside = |name: &'static str, ipam: &str| {
        case(name, mv(&format!(",{ipam}")))
            .secondary()
            .before(|sb| {
                veth_master(sb);
                pod_eth0(sb);
            })
            .steps(&[Step::Add, Step::Check, Step::Del])
    };
    vec![
        beside(
            "macvlan host-local default route beside the pod's",
            &host_local(
                r#"[[{"subnet":"10.20.0.0/24","gateway":""}]]"#,
                r#","routes":[{"dst":"0.0.0.0/0"}]"#,
            ),
        ),
        beside(
            "macvlan host-local IPv6 default route beside the pod's",
            &host_local(V6, r#","routes":[{"dst":"::/0"}]"#),
        ),
        beside(
            "macvlan static default routes beside the pod's",
            STATIC_DEFAULTS,
        ),
        m(
            "macvlan static dual-stack with routes",
            mv(&format!(",{STATIC}")),
        ),
        m("macvlan host-local IPv4", mv(&format!(",{hl4}"))),
        m(
            "macvlan host-local dual-stack",
            mv(&format!(",{}", hl(DUAL))),
        ),
        m(
            "macvlan mode bridge",
            mv(&format!(r#","mode":"bridge",{hl4}"#)),
        ),
        m(
            "macvlan mode private",
            mv(&format!(r#","mode":"private",{hl4}"#)),
        ),
        m("macvlan mode vepa", mv(&format!(r#","mode":"vepa",{hl4}"#))),
        m(
            "macvlan mode passthru on the node's own uplink",
            mv(&format!(r#","mode":"passthru",{hl4}"#)),
        )
        .fails_with(7)
        .differs(
            "v1.9.1 hands the pod the node's uplink, its address and default route included",
            |sb, out| {
                assert!(
                    out[0].raw.contains("which the node itself uses"),
                    "{}",
                    out[0].raw
                );
                assert_eq!(sb.pod_links(), Vec::<String>::new());
            },
        ),
        m("macvlan mtu", mv(&format!(r#","mtu":1400,{hl4}"#))),
        m(
            "macvlan mtu equal to the master's",
            mv(&format!(r#","mtu":1500,{hl4}"#)),
        ),
        m(
            "macvlan mtu above the master's",
            mv(&format!(r#","mtu":1501,{hl4}"#)),
        )
        .fails_with(7),
        m(
            "macvlan unknown mode",
            mv(&format!(r#","mode":"l2",{hl4}"#)),
        )
        .fails_with(7),
        m(
            "macvlan master missing",
            mv(&format!(",{hl4}")).replace("up0", "nosuch0"),
        )
        .fails_with(7),
        m(
            "macvlan without master: the default route's",
            mv(&format!(",{hl4}")).replace(r#","master":"up0""#, ""),
        ),
        case(
            "macvlan without master or default route",
            mv(&format!(",{hl4}")).replace(r#","master":"up0""#, ""),
        )
        .fails_with(7),
        m("macvlan L2 only", mv("")),
        m(
            "macvlan mac from config",
            mv(&format!(r#","mac":"02:00:00:00:00:01",{hl4}"#)),
        ),
        m(
            "macvlan mac from CNI_ARGS beats config",
            mv(&format!(r#","mac":"02:00:00:00:00:01",{hl4}"#)),
        )
        .args("IgnoreUnknown=1;MAC=02:00:00:00:00:02"),
        m(
            "macvlan mac from runtimeConfig beats CNI_ARGS",
            mv(&format!(
                r#","runtimeConfig":{{"mac":"02:00:00:00:00:03"}},{hl4}"#
            )),
        )
        .args("IgnoreUnknown=1;MAC=02:00:00:00:00:02"),
        m("macvlan bad mac", mv(&format!(r#","mac":"02:00",{hl4}"#))).fails_with(7),
        m(
            "macvlan cniVersion 0.3.1",
            mv(&format!(",{hl4}")).replace("1.0.0", "0.3.1"),
        ),
        m(
            "macvlan cniVersion 0.4.0",
            mv(&format!(",{hl4}")).replace("1.0.0", "0.4.0"),
        ),
        m("macvlan CHECK after ADD", mv(&format!(",{STATIC}"))).steps(&[Step::Add, Step::Check]),
        m(
            "macvlan CHECK after an address was removed",
            mv(&format!(",{hl4}")),
        )
        .steps(&[Step::Add, Step::RemovePodAddr("10.20.0.2/24"), Step::Check]),
        m("macvlan DEL twice", mv(&format!(",{hl4}"))).steps(&[Step::Add, Step::Del, Step::Del]),
        m("macvlan DEL with empty CNI_NETNS", mv(&format!(",{hl4}")))
            .steps(&[Step::Add, Step::DelNoNetns]),
        m(
            "macvlan DEL after the pod netns was deleted",
            mv(&format!(",{hl4}")),
        )
        .steps(&[Step::Add, Step::DeletePodNetns, Step::Del]),
        m("macvlan ADD, DEL, ADD again", mv(&format!(",{hl4}"))).steps(&[
            Step::Add,
            Step::Del,
            Step::Add,
        ]),
        m(
            "macvlan DEL after the master is gone",
            mv(&format!(",{hl4}")),
        )
        .steps(&[Step::Add, Step::DeleteNodeLink("up0"), Step::Del])
        .check(|sb, out| {
            assert!(out.iter().all(|o| o.ok), "{out:?}");
            assert!(sb.reservations().is_empty(), "{:?}", sb.reservations());
        }),
        m("macvlan DNS from IPAM and config", mv(DNS_BOTH))
            .differs("v1.9.1 drops the DNS that IPAM returned", assert_merged_dns),
        m("macvlan IPAM refuses the address", mv(&format!(",{hl4}")))
            .args("IgnoreUnknown=1;IP=10.9.9.9")
            .fails_with(7)
            .differs(
                "v1.9.1 leaves the macvlan link in the pod when IPAM fails",
                assert_nothing_left,
            ),
        m(
            "macvlan bcqueuelen",
            mv(&format!(r#","bcqueuelen":100,{hl4}"#)),
        )
        .check(|sb, out| {
            assert!(out[0].ok, "{:?}", out[0]);
            let eth0 = sb.pod.ip_json(&["-d", "link", "show", "dev", "eth0"]);
            assert_eq!(eth0[0]["linkinfo"]["info_data"]["bcqueuelen"], 100);
        }),
        m(
            "macvlan cniVersion 1.1.0",
            mv(&format!(",{hl4}")).replace("1.0.0", "1.1.0"),
        )
        .check(|_, out| {
            assert!(out[0].ok, "{:?}", out[0]);
            assert_eq!(out[0].result["cniVersion"], "1.1.0");
        }),
    ]
}

fn ipvlan_cases() -> Vec<Case> {
    let hl4 = hl(V4);
    let d = |name: &'static str, conf: String| case(name, conf).before(dummy_master);
    let chained = json!({
        "cniVersion": "1.0.0", "name": "sbs", "type": "ipvlan", "mode": "l3",
        "prevResult": {
            "cniVersion": "1.0.0",
            "interfaces": [{"name": "up0"}],
            "ips": [{"address": "10.20.0.9/24", "gateway": "10.20.0.1"}],
            "routes": [{"dst": "0.0.0.0/0"}]
        }
    })
    .to_string();
    vec![
        d(
            "ipvlan l2 static dual-stack with routes",
            ipv(&format!(",{STATIC}")),
        ),
        d("ipvlan default mode, host-local", ipv(&format!(",{hl4}"))),
        d("ipvlan l3", ipv(&format!(r#","mode":"l3",{}"#, hl(DUAL)))),
        d("ipvlan l3s", ipv(&format!(r#","mode":"l3s",{hl4}"#))),
        d("ipvlan mtu", ipv(&format!(r#","mtu":1400,{hl4}"#))),
        d(
            "ipvlan unknown mode",
            ipv(&format!(r#","mode":"bridge",{hl4}"#)),
        )
        .fails_with(7),
        d(
            "ipvlan master missing",
            ipv(&format!(",{hl4}")).replace("up0", "nosuch0"),
        )
        .fails_with(7),
        d(
            "ipvlan without master: the default route's",
            ipv(&format!(",{hl4}")).replace(r#","master":"up0""#, ""),
        ),
        d(
            "ipvlan chained: master and addresses from prevResult",
            chained,
        ),
        d("ipvlan CHECK after ADD", ipv(&format!(",{STATIC}"))).steps(&[Step::Add, Step::Check]),
        d("ipvlan DEL twice", ipv(&format!(",{hl4}"))).steps(&[Step::Add, Step::Del, Step::Del]),
        d(
            "ipvlan DEL after the pod netns was deleted",
            ipv(&format!(",{hl4}")),
        )
        .steps(&[Step::Add, Step::DeletePodNetns, Step::Del]),
        d(
            "ipvlan mtu above the master's",
            ipv(&format!(r#","mtu":1600,{hl4}"#)),
        )
        .fails_with(7)
        .differs(
            "v1.9.1 does not check the MTU; the kernel refuses it with EINVAL",
            assert_nothing_left,
        ),
        d("ipvlan without ipam", ipv("")).fails_with(7).differs(
            "v1.9.1 fails looking for an IPAM plugin with an empty name",
            assert_nothing_left,
        ),
        d("ipvlan IPAM refuses the address", ipv(&format!(",{hl4}")))
            .args("IgnoreUnknown=1;IP=10.9.9.9")
            .fails_with(7)
            .differs(
                "v1.9.1 leaves the ipvlan link in the pod when IPAM fails",
                assert_nothing_left,
            ),
        d(
            "ipvlan DEL without master on a node without default route",
            ipv(&format!(",{hl4}")).replace(r#","master":"up0""#, ""),
        )
        .steps(&[Step::Add, Step::DeleteDefaultRoute, Step::Del])
        .differs(
            "v1.9.1's DEL looks for the default route's interface and fails",
            |sb, out| {
                assert!(out.iter().all(|o| o.ok), "{out:?}");
                assert!(sb.pod.links().iter().all(|l| l == "lo"));
                assert!(sb.reservations().is_empty());
            },
        ),
        d("ipvlan DNS from IPAM and config", ipv(DNS_BOTH))
            .differs("v1.9.1 drops the DNS that IPAM returned", assert_merged_dns),
    ]
}

/// A vlan config with id 100 on the node's master `up0`; `body` starts with a comma.
fn vl(body: &str) -> String {
    format!(
        r#"{{"cniVersion":"1.0.0","name":"sbs","type":"vlan","master":"up0","vlanId":100{body}}}"#
    )
}

fn vlan_cases() -> Vec<Case> {
    let hl4 = hl(V4);
    let v = |name: &'static str, conf: String| case(name, conf).before(veth_master);
    vec![
        v(
            "vlan static dual-stack with routes",
            vl(&format!(",{STATIC}")),
        ),
        v("vlan host-local", vl(&format!(",{hl4}"))),
        v("vlan mtu", vl(&format!(r#","mtu":1400,{hl4}"#))),
        v(
            "vlan id 0",
            vl(&format!(",{hl4}")).replace(r#""vlanId":100"#, r#""vlanId":0"#),
        ),
        v(
            "vlan id 4094, CNI 0.3.1",
            vl(&format!(",{hl4}"))
                .replace(r#""vlanId":100"#, r#""vlanId":4094"#)
                .replace("1.0.0", "0.3.1"),
        ),
        v(
            "vlan id 4095",
            vl(&format!(",{hl4}")).replace(r#""vlanId":100"#, r#""vlanId":4095"#),
        )
        .fails_with(7),
        v(
            "vlan negative id",
            vl(&format!(",{hl4}")).replace(r#""vlanId":100"#, r#""vlanId":-2"#),
        )
        .fails_with(7),
        v(
            "vlan without master",
            vl(&format!(",{hl4}")).replace(r#","master":"up0""#, ""),
        )
        .fails_with(7),
        v(
            "vlan master missing",
            vl(&format!(",{hl4}")).replace("up0", "nosuch0"),
        )
        .fails_with(7),
        v(
            "vlan mtu above the master's",
            vl(&format!(r#","mtu":1600,{hl4}"#)),
        )
        .fails_with(7),
        v(
            "vlan beside the pod's eth0",
            vl(&format!(
                ",{}",
                host_local(V4, r#","routes":[{"dst":"10.30.0.0/16"}]"#)
            )),
        )
        .secondary()
        .before(|sb| {
            veth_master(sb);
            pod_eth0(sb);
        })
        .steps(&[Step::Add, Step::Check, Step::Del])
        .check(|sb, out| {
            assert!(out.iter().all(|o| o.ok), "{out:?}");
            let routes = out[0].result["routes"].to_string();
            assert!(routes.contains("10.30.0.0/16"), "{routes}");
            let mut links = sb.pod.links();
            links.sort();
            assert_eq!(links, ["eth0", "eth0p", "lo"]);
        }),
        v("vlan CHECK after ADD", vl(&format!(",{STATIC}"))).steps(&[Step::Add, Step::Check]),
        v("vlan DEL twice", vl(&format!(",{hl4}"))).steps(&[Step::Add, Step::Del, Step::Del]),
        v(
            "vlan DEL after the pod netns was deleted",
            vl(&format!(",{hl4}")),
        )
        .steps(&[Step::Add, Step::DeletePodNetns, Step::Del]),
        v("vlan DEL with empty CNI_NETNS", vl(&format!(",{hl4}"))).steps(&[
            Step::Add,
            Step::DelNoNetns,
            Step::Del,
        ]),
        v("vlan without ipam", vl("")).fails_with(7).differs(
            "v1.9.1 creates the vlan, then fails looking for an IPAM plugin with an empty name \
             and leaves the link in the pod",
            assert_nothing_left,
        ),
        v("vlan IPAM refuses the address", vl(&format!(",{hl4}")))
            .args("IgnoreUnknown=1;IP=10.9.9.9")
            .fails_with(7)
            .differs(
                "v1.9.1 leaves the vlan link in the pod when IPAM fails",
                assert_nothing_left,
            ),
        v(
            "vlan DEL after the master was deleted",
            vl(&format!(",{hl4}")),
        )
        .steps(&[Step::Add, Step::DeleteNodeLink("up0p"), Step::Del])
        .differs(
            "v1.9.1's DEL looks the master up and fails without it",
            |sb, out| {
                assert!(out.iter().all(|o| o.ok), "{out:?}");
                assert!(sb.pod.links().iter().all(|l| l == "lo"));
                assert!(sb.reservations().is_empty());
            },
        ),
        v("vlan DNS from IPAM and config", vl(DNS_BOTH))
            .differs("v1.9.1 drops the DNS that IPAM returned", assert_merged_dns),
    ]
}

/// A ptp config; `body` starts with a comma.
fn pt(body: &str) -> String {
    format!(r#"{{"cniVersion":"1.0.0","name":"sbs","type":"ptp"{body}}}"#)
}

/// A dummy config: `body` is inserted after the common keys (start it with a comma).
fn dm(body: &str) -> String {
    format!(r#"{{"cniVersion":"1.0.0","name":"sbs","type":"dummy"{body}}}"#)
}

fn dummy_cases() -> Vec<Case> {
    let hl4 = hl(V4);
    let with_routes = r#""ipam":{"type":"static","addresses":[{"address":"10.20.0.5/24","gateway":"10.20.0.1"},{"address":"fd20::5/64"}],"routes":[{"dst":"10.30.0.0/16","gw":"10.20.0.1"}]}"#;
    vec![
        case("dummy host-local", dm(&format!(",{hl4}"))).check(assert_added),
        case("dummy host-local dual-stack", dm(&format!(",{}", hl(DUAL)))),
        case("dummy static with a route", dm(&format!(",{with_routes}"))),
        case("dummy ADD then DEL", dm(&format!(",{hl4}"))).steps(&[Step::Add, Step::Del]),
        case("dummy DEL twice", dm(&format!(",{hl4}"))).steps(&[Step::Add, Step::Del, Step::Del]),
        case("dummy DEL with empty CNI_NETNS", dm(&format!(",{hl4}"))).steps(&[
            Step::Add,
            Step::DelNoNetns,
            Step::Del,
        ]),
        case("dummy CHECK after ADD", dm(&format!(",{with_routes}")))
            .steps(&[Step::Add, Step::Check]),
        case(
            "dummy CNI 0.4.0",
            dm(&format!(",{hl4}")).replace("1.0.0", "0.4.0"),
        ),
        case("dummy beside the pod's eth0", dm(&format!(",{hl4}")))
            .secondary()
            .before(pod_eth0)
            .steps(&[Step::Add, Step::Del]),
        case("dummy IPAM refuses the address", dm(&format!(",{hl4}")))
            .args("IgnoreUnknown=1;IP=10.9.9.9")
            .fails_with(7),
    ]
}

/// A tap config: `body` is inserted after the common keys (start it with a comma).
fn tp(body: &str) -> String {
    format!(r#"{{"cniVersion":"1.0.0","name":"sbs","type":"tap"{body}}}"#)
}

fn tap_cases() -> Vec<Case> {
    let hl4 = hl(V4);
    let with_route = r#""ipam":{"type":"static","addresses":[{"address":"10.20.0.5/24","gateway":"10.20.0.1"},{"address":"fd20::5/64"}],"routes":[{"dst":"10.30.0.0/16","gw":"10.20.0.1"}]}"#;
    vec![
        case("tap without ipam", tp("")).check(assert_added),
        case("tap host-local", tp(&format!(",{hl4}"))).check(assert_added),
        case(
            "tap static dual-stack with a route",
            tp(&format!(",{with_route}")),
        ),
        case("tap mtu", tp(&format!(r#","mtu":1400,{hl4}"#))),
        case(
            "tap mac",
            tp(&format!(r#","mac":"02:00:00:00:00:42",{hl4}"#)),
        ),
        case(
            "tap multiQueue",
            tp(&format!(r#","multiQueue":true,{hl4}"#)),
        ),
        case(
            "tap owner and group",
            tp(&format!(r#","owner":0,"group":0,{hl4}"#)),
        )
        .check(assert_added),
        case("tap ADD then DEL", tp(&format!(",{hl4}"))).steps(&[Step::Add, Step::Del]),
        case("tap DEL twice", tp(&format!(",{hl4}"))).steps(&[Step::Add, Step::Del, Step::Del]),
        case("tap CHECK after ADD", tp(&format!(",{with_route}"))).steps(&[Step::Add, Step::Check]),
    ]
}

/// The node and the pod reach each other over the pair: the pod's address from the node, the
/// gateway from the pod.
fn assert_ptp_reachable(sb: &Sandbox, out: &[Outcome]) {
    assert!(out[0].ok, "{:?}", out[0]);
    let addr = out[0].result["ips"][0]["address"]
        .as_str()
        .unwrap_or_default();
    let ip = addr.split('/').next().unwrap_or_default();
    common::ping(&sb.node, ip).expect("the node reaches the pod");
    let gw = out[0].result["ips"][0]["gateway"]
        .as_str()
        .unwrap_or_default();
    common::ping(&sb.pod, gw).expect("the pod reaches its gateway");
}

/// Our DEL left no veth in the node, no address in the pod and no firewall rule.
fn assert_ptp_gone(sb: &Sandbox, out: &[Outcome]) {
    assert!(out.iter().all(|o| o.ok), "{out:?}");
    let veths: Vec<String> = sb
        .node_links()
        .into_iter()
        .filter(|l| l.starts_with("veth"))
        .collect();
    assert!(veths.is_empty(), "{veths:?}");
    let fw = sb.firewall();
    // The nftables table and its chains are shared and stay, as the reference leaves them.
    assert!(!fw.contains("CNI-") && !fw.contains("saddr"), "{fw}");
    assert!(sb.reservations().is_empty());
}

fn ptp_cases() -> Vec<Case> {
    let hl4 = hl(V4);
    let gw_static = r#""ipam":{"type":"static","addresses":[{"address":"10.20.0.5/24","gateway":"10.20.0.1"},{"address":"fd20::5/64","gateway":"fd20::1"}],"routes":[{"dst":"0.0.0.0/0"},{"dst":"fd21::/64"}]}"#;
    vec![
        case("ptp host-local", pt(&format!(",{hl4}"))).check(assert_ptp_reachable),
        case("ptp static dual-stack with routes", pt(&format!(",{gw_static}"))),
        case("ptp host-local dual-stack", pt(&format!(",{}", hl(DUAL)))),
        case("ptp mtu", pt(&format!(r#","mtu":1400,{hl4}"#))),
        case("ptp ipMasq", pt(&format!(r#","ipMasq":true,{hl4}"#))),
        case("ptp ipMasq, ADD then DEL", pt(&format!(r#","ipMasq":true,{hl4}"#)))
            .steps(&[Step::Add, Step::Del]),
        case(
            "ptp CNI 0.3.1",
            pt(&format!(",{hl4}")).replace("1.0.0", "0.3.1"),
        ),
        case(
            "ptp CHECK after ADD",
            pt(&format!(",{gw_static}")).replace(r#""fd21::/64""#, r#""fd21::/64","gw":"fd20::1""#),
        )
        .steps(&[Step::Add, Step::Check]),
        case("ptp CHECK of a route without gw", pt(&format!(",{gw_static}")))
            .steps(&[Step::Add, Step::Check])
            .check(|_, out| assert!(out.iter().all(|o| o.ok), "{out:?}"),
            ),
        case("ptp DEL twice", pt(&format!(",{hl4}"))).steps(&[Step::Add, Step::Del, Step::Del]),
        case("ptp DEL with empty CNI_NETNS", pt(&format!(",{hl4}")))
            .steps(&[Step::Add, Step::DelNoNetns, Step::Del]),
        case(
            "ptp beside the pod's eth0",
            pt(&format!(",{}", host_local(V4, r#","routes":[{"dst":"10.30.0.0/16"}]"#))),
        )
        .secondary()
        .before(pod_eth0)
        .steps(&[Step::Add, Step::Del]),
        case("ptp without ipam", pt("")).fails_with(7),
        case("ptp IPAM refuses the address", pt(&format!(",{hl4}")))
            .args("IgnoreUnknown=1;IP=10.9.9.9")
            .fails_with(7),
        case(
            "ptp ipMasq DEL after the pod netns was deleted",
            pt(&format!(r#","ipMasq":true,{hl4}"#)),
        )
        .steps(&[Step::Add, Step::DeletePodNetns, Step::Del])
        .differs(
            "v1.9.1 finds the addresses to unmasquerade on the pod's interface: with the \
             namespace gone its rules stay",
            assert_ptp_gone,
        ),
        case(
            "ptp static address without a gateway",
            pt(r#","ipam":{"type":"static","addresses":[{"address":"10.20.0.5/24"}]}"#),
        )
        .fails_with(7)
        .differs(
            "v1.9.1 fails halfway, adding the gateway address, and leaves the veth pair",
            |sb, out| {
                assert_nothing_left(sb, out);
                assert_ptp_gone(sb, &[]);
                assert!(out[0].raw.contains("needs a gateway for address 10.20.0.5/24"));
            },
        ),
        case(
            "ptp /32 address with a gateway",
            pt(r#","ipam":{"type":"static","addresses":[{"address":"10.20.0.5/32","gateway":"10.20.0.1"}]}"#),
        )
        .steps(&[Step::Add, Step::Check, Step::Del])
        .differs(
            "v1.9.1 fails deleting the prefix route a /32 does not have",
            |sb, out| {
                assert!(out.iter().all(|o| o.ok), "{out:?}");
                assert_ptp_gone(sb, out);
            },
        ),
        case(
            "ptp ipMasqBackend nftables",
            pt(&format!(r#","ipMasq":true,"ipMasqBackend":"nftables",{hl4}"#)),
        )
        .steps(&[Step::Add, Step::Del])
        .check(|sb, out| {
            assert!(out.iter().all(|o| o.ok), "{out:?}");
            assert_ptp_gone(sb, out);
        }),
        case("ptp DNS from IPAM and config", pt(DNS_BOTH_GW))
            .differs("v1.9.1 drops the DNS that IPAM returned", assert_merged_dns),
    ]
}

/// [`DNS_BOTH`] with a gateway, which ptp needs.
const DNS_BOTH_GW: &str = r#","dns":{"nameservers":["10.20.0.53"],"search":["cluster.local"]},"ipam":{"type":"static","addresses":[{"address":"10.20.0.5/24","gateway":"10.20.0.1"}],"dns":{"nameservers":["10.20.0.54"]}}"#;

/// sbr chained after the pod's eth0 (made by [`pod_eth0`]), whose ADD result is `prev`.
fn sb_conf(body: &str, prev: &str) -> String {
    format!(r#"{{"cniVersion":"1.0.0","name":"sbs","type":"sbr"{body},"prevResult":{prev}}}"#)
}

/// eth0's result: 10.88.0.5/16 via 10.88.0.1, with the default route.
const ETH0_V4: &str = r#"{"cniVersion":"1.0.0","interfaces":[{"name":"eth0","sandbox":"/var/run/netns/x"}],"ips":[{"address":"10.88.0.5/16","gateway":"10.88.0.1","interface":0}],"routes":[{"dst":"0.0.0.0/0"}]}"#;

/// The same, dual-stack.
const ETH0_DUAL: &str = r#"{"cniVersion":"1.0.0","interfaces":[{"name":"eth0","sandbox":"/var/run/netns/x"}],"ips":[{"address":"10.88.0.5/16","gateway":"10.88.0.1","interface":0},{"address":"fd88::5/64","gateway":"fd88::1","interface":0}],"routes":[{"dst":"0.0.0.0/0"},{"dst":"::/0"}]}"#;

/// Our DEL removed every rule from eth0's addresses.
fn assert_no_sbr_rules(sb: &Sandbox, out: &[Outcome]) {
    assert!(out.iter().all(|o| o.ok), "{out:?}");
    let rules = serde_json::to_string(&common::rules(&sb.pod)).unwrap_or_default();
    assert!(
        !rules.contains("10.88.0.5") && !rules.contains("fd88::5"),
        "{rules}"
    );
}

fn sbr_cases() -> Vec<Case> {
    let s = |name: &'static str, conf: String| case(name, conf).before(pod_eth0);
    vec![
        s("sbr after eth0", sb_conf("", ETH0_V4)).check(assert_added),
        s("sbr after eth0, dual-stack", sb_conf("", ETH0_DUAL)),
        s("sbr ADD then DEL", sb_conf("", ETH0_DUAL)).steps(&[Step::Add, Step::Del]),
        s("sbr DEL twice", sb_conf("", ETH0_V4)).steps(&[Step::Add, Step::Del, Step::Del]),
        s("sbr CHECK after ADD", sb_conf("", ETH0_DUAL)).steps(&[Step::Add, Step::Check]),
        s(
            "sbr CNI 0.4.0",
            sb_conf("", ETH0_V4).replace("1.0.0", "0.4.0"),
        ),
        s("sbr with table 100 taken by a rule", sb_conf("", ETH0_V4)).before(|sb| {
            pod_eth0(sb);
            sb.pod
                .ip(&["rule", "add", "from", "10.99.0.1", "lookup", "100"]);
        }),
        s(
            "sbr without prevResult",
            r#"{"cniVersion":"1.0.0","name":"sbs","type":"sbr"}"#.into(),
        )
        .fails_with(7),
        s("sbr DEL after the interface is gone", sb_conf("", ETH0_V4))
            .steps(&[
                Step::Add,
                Step::InPod(&["link", "del", "eth0"]),
                Step::Del,
                Step::Del,
            ])
            .differs(
                "v1.9.1's DEL succeeds without the interface but leaves its rule behind",
                assert_no_sbr_rules,
            ),
        s("sbr CHECK after its rule is gone", sb_conf("", ETH0_V4))
            .steps(&[
                Step::Add,
                Step::InPod(&["rule", "del", "from", "10.88.0.5", "lookup", "100"]),
                Step::Check,
            ])
            .differs("v1.9.1's CHECK checks nothing", |_, out| {
                assert!(out[0].ok && !out[1].ok, "{out:?}");
                assert!(out[1]
                    .raw
                    .contains("no rule routes traffic from 10.88.0.5/32"));
            }),
        s(
            "sbr with a prevResult whose addresses are on another interface",
            sb_conf("", &ETH0_V4.replace(r#""name":"eth0""#, r#""name":"net9""#)),
        )
        .fails_with(7)
        .differs(
            "v1.9.1 adds no rule and moves nothing, but still deletes eth0's routes",
            |sb, out| {
                assert!(!out[0].ok, "{out:?}");
                assert!(!common::routes(&sb.pod).is_empty(), "eth0 kept its routes");
            },
        ),
        s("sbr with table 100 holding routes", sb_conf("", ETH0_V4))
            .before(|sb| {
                pod_eth0(sb);
                sb.pod.ip(&[
                    "route",
                    "add",
                    "10.77.0.0/16",
                    "dev",
                    "eth0",
                    "table",
                    "100",
                ]);
            })
            .differs(
                "v1.9.1 looks only at rules and main-table routes: it puts eth0's routes in \
                 table 100 beside the routes already there",
                |sb, out| {
                    assert!(out[0].ok, "{out:?}");
                    let rules = common::rules(&sb.pod);
                    assert!(
                        rules
                            .iter()
                            .any(|r| r["src"] == "10.88.0.5" && r["table"] == "101"),
                        "{rules:?}"
                    );
                },
            ),
        s("sbr with table", sb_conf(r#","table":500"#, ETH0_DUAL))
            .steps(&[Step::Add, Step::Check, Step::Del])
            .check(|sb, out| {
                assert!(out.iter().all(|o| o.ok), "{out:?}");
                // The rules went to table 500 and went again; eth0's routes never moved.
                let main: Vec<Value> = common::routes(&sb.pod)
                    .into_iter()
                    .filter(|r| r["table"].is_null() && r["dst"] == "default")
                    .collect();
                assert_eq!(main.len(), 2, "{main:?}");
                assert_no_sbr_rules(sb, out);
            }),
        s(
            "sbr with gateways",
            sb_conf(r#","gateways":["10.88.0.254"]"#, ETH0_V4),
        )
        .differs("v1.9.1 has no `gateways`", |sb, out| {
            assert!(out[0].ok, "{out:?}");
            let routes = common::routes(&sb.pod);
            assert!(
                routes.iter().any(|r| r["table"] == "100"
                    && r["dst"] == "default"
                    && r["gateway"] == "10.88.0.254"),
                "{routes:?}"
            );
        }),
        s(
            "sbr with addSourceHints",
            sb_conf(r#","addSourceHints":true"#, ETH0_V4),
        )
        .differs("v1.9.1 has no `addSourceHints`", |sb, out| {
            assert!(out[0].ok, "{out:?}");
            let routes = common::routes(&sb.pod);
            assert!(
                routes.iter().any(|r| r["table"].is_null()
                    && r["dst"] == "10.88.0.0/16"
                    && r["prefsrc"] == "10.88.0.5"),
                "{routes:?}"
            );
        }),
    ]
}

/// vrf chained after the pod's eth0 (made by [`pod_eth0`]), whose ADD result is `prev`.
fn vr_conf(body: &str, prev: &str) -> String {
    format!(
        r#"{{"cniVersion":"1.0.0","name":"sbs","type":"vrf","vrfname":"blue"{body},"prevResult":{prev}}}"#
    )
}

/// The ADD moved eth0's default route into the VRF's `table`.
fn assert_default_in_vrf_table(sb: &Sandbox, table: &str) {
    let routes = common::routes(&sb.pod);
    assert!(
        routes
            .iter()
            .any(|r| r["dst"] == "default" && r["gateway"] == "10.88.0.1" && r["table"] == table),
        "{routes:?}"
    );
}

fn vrf_cases() -> Vec<Case> {
    let v = |name: &'static str, conf: String| case(name, conf).before(pod_eth0);
    vec![
        v("vrf after eth0", vr_conf("", ETH0_V4)).check(|sb, out| {
            assert!(out[0].ok, "{out:?}");
            assert_default_in_vrf_table(sb, "1");
        }),
        v("vrf with table 42", vr_conf(r#","table":42"#, ETH0_V4))
            .check(|sb, _| assert_default_in_vrf_table(sb, "42")),
        v("vrf after eth0, dual-stack", vr_conf("", ETH0_DUAL)),
        v("vrf ADD then DEL", vr_conf("", ETH0_V4)).steps(&[Step::Add, Step::Del]),
        v("vrf DEL twice", vr_conf("", ETH0_V4)).steps(&[Step::Add, Step::Del, Step::Del]),
        v("vrf CHECK after ADD", vr_conf(r#","table":42"#, ETH0_DUAL))
            .steps(&[Step::Add, Step::Check]),
        v(
            "vrf CNI 0.4.0",
            vr_conf("", ETH0_V4).replace("1.0.0", "0.4.0"),
        ),
        v(
            "vrf that exists with another table",
            vr_conf(r#","table":42"#, ETH0_V4),
        )
        .before(|sb| {
            pod_eth0(sb);
            sb.pod
                .ip(&["link", "add", "blue", "type", "vrf", "table", "5"]);
        })
        .fails_with(7),
        v("vrf joined beside another member", vr_conf("", ETH0_V4))
            .before(|sb| {
                pod_eth0(sb);
                sb.pod
                    .ip(&["link", "add", "blue", "type", "vrf", "table", "5"]);
                sb.pod.ip(&["link", "set", "eth0p", "master", "blue"]);
            })
            .steps(&[Step::Add, Step::Check, Step::Del]),
        v("vrf when eth0 has a master", vr_conf("", ETH0_V4))
            .before(|sb| {
                pod_eth0(sb);
                sb.pod.ip(&["link", "add", "br0", "type", "bridge"]);
                sb.pod.ip(&["link", "set", "eth0", "master", "br0"]);
            })
            .fails_with(7)
            .differs(
                "v1.9.1 creates the VRF before it finds the master, and leaves it",
                |sb, out| {
                    assert!(!out[0].ok, "{out:?}");
                    assert!(
                        !sb.pod.links().contains(&"blue".to_owned()),
                        "a VRF was left"
                    );
                },
            ),
        v(
            "vrf named like a link that is not a VRF",
            vr_conf("", ETH0_V4).replace(r#""vrfname":"blue""#, r#""vrfname":"eth0p""#),
        )
        .fails_with(7),
        v(
            "vrf DEL after an ADD refused for a name that is not a VRF",
            vr_conf("", ETH0_V4).replace(r#""vrfname":"blue""#, r#""vrfname":"eth0p""#),
        )
        .steps(&[Step::Add, Step::Del, Step::Del])
        .differs(
            "v1.9.1's DEL fails on a link of that name that is not a VRF, every time",
            |sb, out| {
                assert!(!out[0].ok && out[1].ok && out[2].ok, "{out:?}");
                assert!(sb.pod.links().contains(&"eth0p".to_owned()), "eth0p stays");
            },
        ),
        v(
            "vrf without vrfname",
            vr_conf("", ETH0_V4).replace(r#","vrfname":"blue""#, ""),
        )
        .fails_with(7),
        v(
            "vrf without prevResult",
            r#"{"cniVersion":"1.0.0","name":"sbs","type":"vrf","vrfname":"blue"}"#.into(),
        )
        .fails_with(7),
        v("vrf DEL after the interface is gone", vr_conf("", ETH0_V4))
            .steps(&[
                Step::Add,
                Step::InPod(&["link", "del", "eth0"]),
                Step::Del,
                Step::Del,
            ])
            .differs(
                "v1.9.1's DEL fails when the interface is gone, every time",
                |sb, out| {
                    assert!(out.iter().all(|o| o.ok), "{out:?}");
                    assert!(
                        !sb.pod.links().contains(&"blue".to_owned()),
                        "the VRF stayed"
                    );
                },
            ),
        v("vrf picks a table no route uses", vr_conf("", ETH0_V4))
            .before(|sb| {
                pod_eth0(sb);
                sb.pod
                    .ip(&["route", "add", "10.77.0.0/16", "dev", "eth0", "table", "1"]);
            })
            .differs(
                "v1.9.1 looks only at other VRFs' tables, and puts the VRF's routes in table 1 \
                 beside the routes already there",
                |sb, out| {
                    assert!(out[0].ok, "{out:?}");
                    let blue = sb.pod.ip_json(&["-d", "link", "show", "dev", "blue"]);
                    assert_eq!(blue[0]["linkinfo"]["info_data"]["table"], 2, "{blue}");
                },
            ),
    ]
}

/// bandwidth chained after a veth pair: the node's `vethbw0`, the pod's eth0 (made by
/// [`bw_pair`]).
fn bw_conf(body: &str) -> String {
    format!(
        r#"{{"cniVersion":"1.0.0","name":"sbs","type":"bandwidth"{body},"prevResult":{{"cniVersion":"1.0.0","interfaces":[{{"name":"vethbw0"}},{{"name":"eth0","sandbox":"/var/run/netns/x"}}],"ips":[{{"address":"10.20.0.5/24","interface":1}}]}}}}"#
    )
}

const BW_IN: &str = r#","ingressRate":1000000,"ingressBurst":100000"#;
const BW_OUT: &str = r#","egressRate":2000000,"egressBurst":300000"#;

fn bandwidth_cases() -> Vec<Case> {
    let b = |name: &'static str, conf: String| case(name, conf).before(bw_pair);
    vec![
        b("bandwidth ingress", bw_conf(BW_IN)),
        b("bandwidth egress", bw_conf(BW_OUT)),
        b("bandwidth both", bw_conf(&format!("{BW_IN}{BW_OUT}"))).check(assert_added),
        b(
            "bandwidth from runtimeConfig",
            bw_conf(
                r#","runtimeConfig":{"bandwidth":{"ingressRate":8000000,"ingressBurst":800000,"egressRate":4000000,"egressBurst":400000}}"#,
            ),
        ),
        b(
            "bandwidth config keys hide runtimeConfig",
            bw_conf(&format!(
                r#"{BW_IN},"runtimeConfig":{{"bandwidth":{{"egressRate":4000000,"egressBurst":400000}}}}"#
            )),
        ),
        b("bandwidth without limits", bw_conf("")),
        b(
            "bandwidth ADD then DEL",
            bw_conf(&format!("{BW_IN}{BW_OUT}")),
        )
        .steps(&[Step::Add, Step::Del]),
        b("bandwidth DEL twice", bw_conf(BW_OUT)).steps(&[Step::Add, Step::Del, Step::Del]),
        b(
            "bandwidth DEL beside a node link with the ifb's name",
            bw_conf(BW_OUT),
        )
        .before(|sb| {
            bw_pair(sb);
            // The name DEL would give the ifb of network "sbs", container c0ffee.
            sb.node.ip(&[
                "link",
                "add",
                "bwp172c33929985",
                "type",
                "veth",
                "peer",
                "name",
                "bwpeer0",
            ]);
        })
        .steps(&[Step::Del])
        .differs("v1.9.1 deletes any link of that name", |sb, out| {
            assert!(out[0].ok, "{out:?}");
            assert!(sb.node_links().contains(&"bwp172c33929985".to_owned()));
        }),
        b(
            "bandwidth CHECK after ADD",
            bw_conf(&format!("{BW_IN}{BW_OUT}")),
        )
        .steps(&[Step::Add, Step::Check]),
        b(
            "bandwidth CNI 0.4.0",
            bw_conf(BW_OUT).replace("1.0.0", "0.4.0"),
        ),
        b(
            "bandwidth rate without burst",
            bw_conf(r#","ingressRate":1000000"#),
        )
        .fails_with(7),
        b(
            "bandwidth prevResult without the node's end",
            bw_conf(BW_IN).replace(r#"{"name":"vethbw0"},"#, ""),
        )
        .fails_with(7),
        b(
            "bandwidth rate below a byte per second",
            bw_conf(r#","egressRate":7,"egressBurst":800"#),
        )
        .fails_with(7)
        .differs(
            "v1.9.1 divides the burst by a rate of 0 bytes per second",
            assert_no_ifb,
        ),
        b(
            "bandwidth DEL of a config that does not validate",
            bw_conf(r#","ingressRate":1000000"#),
        )
        .steps(&[Step::Del])
        .differs("v1.9.1's DEL validates the limits and fails", |_, out| {
            assert!(out[0].ok, "{out:?}")
        }),
    ]
}

/// No ifb and no qdisc of ours is left on the node.
fn assert_no_ifb(sb: &Sandbox, _: &[Outcome]) {
    let links = sb.node_links();
    assert!(!links.iter().any(|l| l.starts_with("bwp")), "{links:?}");
    let qdiscs = sb.node.ip_json(&["link", "show", "dev", "vethbw0"])[0]["qdisc"].clone();
    assert_eq!(qdiscs, "noqueue");
}

/// The pair portmap follows: `vethpm0` (10.20.0.1/24) in the node, eth0 (10.20.0.5/24,
/// fd20::5/64) in the pod.
fn pm_pair(sb: &Sandbox) {
    common::veth_to_pod(sb, "vethpm0");
    sb.node
        .ip(&["addr", "add", "10.20.0.1/24", "dev", "vethpm0"]);
    sb.pod.ip(&["addr", "add", "10.20.0.5/24", "dev", "eth0"]);
    sb.pod
        .ip(&["-6", "addr", "add", "fd20::5/64", "dev", "eth0", "nodad"]);
}

/// portmap after that pair; `maps` is the portMappings list, `ips` prevResult's addresses.
fn pm_conf(body: &str, maps: &str, ips: &str) -> String {
    format!(
        r#"{{"cniVersion":"1.0.0","name":"sbs","type":"portmap"{body},"runtimeConfig":{{"portMappings":[{maps}]}},"prevResult":{{"cniVersion":"1.0.0","interfaces":[{{"name":"vethpm0"}},{{"name":"eth0","sandbox":"/var/run/netns/x"}}],"ips":[{ips}]}}}}"#
    )
}

const PM_V4: &str = r#"{"address":"10.20.0.5/24","gateway":"10.20.0.1","interface":1}"#;
const PM_DUAL: &str = r#"{"address":"10.20.0.5/24","gateway":"10.20.0.1","interface":1},{"address":"fd20::5/64","gateway":"fd20::1","interface":1}"#;
const PM_TCP: &str = r#"{"hostPort":8080,"containerPort":80,"protocol":"tcp"}"#;
const PM_UDP_IP: &str =
    r#"{"hostPort":5353,"containerPort":53,"protocol":"udp","hostIP":"10.20.0.1"}"#;

/// No chain of this attachment, and no jump to one, is left.
fn assert_no_dnat_chain(sb: &Sandbox, out: &[Outcome]) {
    assert!(out.iter().all(|o| o.ok), "{out:?}");
    let fw = sb.firewall();
    assert!(!fw.contains("CNI-DN-"), "{fw}");
}

fn portmap_cases() -> Vec<Case> {
    let p = |name: &'static str, conf: String| case(name, conf).before(pm_pair);
    let many: String = (9001..=9016)
        .map(|port| format!(r#"{{"hostPort":{port},"containerPort":{port},"protocol":"tcp"}}"#))
        .collect::<Vec<_>>()
        .join(",");
    vec![
        p("portmap tcp", pm_conf("", PM_TCP, PM_V4)).check(assert_added),
        p("portmap tcp and udp on a host address", pm_conf("", &format!("{PM_TCP},{PM_UDP_IP}"), PM_V4)),
        p("portmap dual-stack", pm_conf("", PM_TCP, PM_DUAL)),
        p("portmap without snat", pm_conf(r#","snat":false"#, PM_TCP, PM_V4)),
        p("portmap markMasqBit", pm_conf(r#","markMasqBit":5"#, PM_TCP, PM_V4)),
        p(
            "portmap externalSetMarkChain",
            pm_conf(r#","externalSetMarkChain":"KUBE-MARK-MASQ""#, PM_TCP, PM_V4),
        )
        .before(|sb| {
            pm_pair(sb);
            sb.node
                .command("iptables")
                .args(["-t", "nat", "-N", "KUBE-MARK-MASQ"])
                .status()
                .expect("iptables");
        }),
        p(
            "portmap externalSetMarkChain that does not exist",
            pm_conf(r#","externalSetMarkChain":"KUBE-MARK-MASQ""#, PM_TCP, PM_V4),
        )
        .differs(
            "v1.9.1 fails adding the jump and leaves its chains behind",
            |sb, out| {
                assert!(!out[0].ok, "{out:?}");
                let fw = sb.firewall();
                assert!(!fw.contains("CNI-DN-") && !fw.contains("CNI-HOSTPORT"), "{fw}");
            },
        ),
        p(
            "portmap conditionsV4",
            pm_conf(r#","conditionsV4":["-s","192.0.2.0/24"]"#, PM_TCP, PM_V4),
        ),
        p("portmap sixteen ports", pm_conf("", &many, PM_V4)),
        p("portmap without mappings", pm_conf("", "", PM_V4)),
        p("portmap ADD then DEL", pm_conf("", &format!("{PM_TCP},{PM_UDP_IP}"), PM_DUAL))
            .steps(&[Step::Add, Step::Del]),
        p("portmap DEL twice", pm_conf("", PM_TCP, PM_V4)).steps(&[Step::Add, Step::Del, Step::Del]),
        p("portmap DEL with empty CNI_NETNS", pm_conf("", PM_TCP, PM_V4))
            .steps(&[Step::Add, Step::DelNoNetns]),
        p("portmap CHECK after a dual-stack ADD", pm_conf("", PM_TCP, PM_DUAL))
            .steps(&[Step::Add, Step::Check])
            .check(|_, out| assert!(out.iter().all(|o| o.ok), "{out:?}"),
            ),
        p("portmap host port 0", pm_conf("", r#"{"hostPort":0,"containerPort":80,"protocol":"tcp"}"#, PM_V4))
            .fails_with(7),
        p("portmap without prevResult", r#"{"cniVersion":"1.0.0","name":"sbs","type":"portmap","runtimeConfig":{"portMappings":[{"hostPort":8080,"containerPort":80,"protocol":"tcp"}]}}"#.into())
            .fails_with(7),
        p("portmap CHECK after an IPv4 ADD", pm_conf("", PM_TCP, PM_V4))
            .steps(&[Step::Add, Step::Check])
            .check(|_, out| {
                assert!(out.iter().all(|o| o.ok), "{out:?}")
            }),
        p("portmap DEL after a dual-stack ADD", pm_conf("", PM_TCP, PM_DUAL))
            .steps(&[Step::Add, Step::Del])
            .check(assert_no_dnat_chain),
        p("portmap nftables tcp", pm_conf(NFT, PM_TCP, PM_V4)).check(assert_nft_dnat),
        p(
            "portmap nftables tcp and udp on a host address, dual-stack",
            pm_conf(NFT, &format!("{PM_TCP},{PM_UDP_IP}"), PM_DUAL),
        )
        .check(assert_nft_dnat),
        p("portmap nftables without snat", pm_conf(&format!(r#"{NFT},"snat":false"#), PM_TCP, PM_V4)),
        p(
            "portmap nftables conditionsV4",
            pm_conf(&format!(r#"{NFT},"conditionsV4":["ip saddr 192.0.2.0/24"]"#), PM_TCP, PM_V4),
        )
        .differs(
            "v1.9.1 puts the conditions in the entry rules every pod shares, and each ADD rewrites \
             them: one pod's conditions would decide who reaches every pod's host ports",
            |sb, out| {
                assert!(out[0].ok, "{out:?}");
                let fw = sb.firewall();
                let lines: Vec<&str> = fw.lines().map(str::trim).collect();
                assert!(
                    lines.contains(&"ip saddr 192.0.2.0/24 tcp dport 8080 dnat to 10.20.0.5:80 comment \"c0ffee\""),
                    "the pod's own rule carries its conditions: {fw}"
                );
                assert_eq!(
                    lines.iter().filter(|l| **l == "fib daddr type local jump hostports_all").count(),
                    2,
                    "the shared entry rules carry none: {fw}"
                );
            },
        ),
        p("portmap nftables ADD then DEL", pm_conf(NFT, &format!("{PM_TCP},{PM_UDP_IP}"), PM_DUAL))
            .steps(&[Step::Add, Step::Del]),
        p("portmap nftables DEL twice", pm_conf(NFT, PM_TCP, PM_V4))
            .steps(&[Step::Add, Step::Del, Step::Del]),
        p("portmap nftables CHECK after a dual-stack ADD", pm_conf(NFT, PM_TCP, PM_DUAL))
            .steps(&[Step::Add, Step::Check]),
    ]
}

/// `backend: "nftables"`, for [`pm_conf`]'s body.
const NFT: &str = r#","backend":"nftables""#;

/// The nftables ADD forwarded the host port to the pod, and wrote no iptables rule.
fn assert_nft_dnat(sb: &Sandbox, out: &[Outcome]) {
    assert!(out[0].ok, "{out:?}");
    let fw = sb.firewall();
    assert!(fw.contains("tcp dport 8080 dnat to 10.20.0.5:80"), "{fw}");
    assert!(!fw.contains("CNI-HOSTPORT"), "{fw}");
}

/// firewall after a bridge whose result is `prev` (the bridge first, as bridge's result has it).
fn fw_conf(body: &str, ips: &str) -> String {
    format!(
        r#"{{"cniVersion":"1.0.0","name":"sbs","type":"firewall"{body},"prevResult":{{"cniVersion":"1.0.0","interfaces":[{{"name":"sbs0"}},{{"name":"vethfw0"}},{{"name":"eth0","sandbox":"/var/run/netns/x"}}],"ips":[{ips}]}}}}"#
    )
}

const FW_V4: &str = r#"{"address":"10.20.0.5/24","gateway":"10.20.0.1","interface":2}"#;
const FW_DUAL: &str = r#"{"address":"10.20.0.5/24","gateway":"10.20.0.1","interface":2},{"address":"fd20::5/64","interface":2}"#;

fn firewall_cases() -> Vec<Case> {
    let f = |name: &'static str, conf: String| case(name, conf);
    vec![
        f("firewall IPv4", fw_conf("", FW_V4)).check(assert_added),
        f(
            "firewall dual-stack",
            fw_conf(r#","backend":"iptables""#, FW_DUAL),
        ),
        f(
            "firewall admin chain",
            fw_conf(
                r#","backend":"iptables","iptablesAdminChainName":"MY-ADMIN""#,
                FW_V4,
            ),
        ),
        f(
            "firewall same-bridge",
            fw_conf(
                r#","backend":"iptables","ingressPolicy":"same-bridge""#,
                FW_DUAL,
            ),
        )
        .before(fw_bridge),
        f(
            "firewall isolated",
            fw_conf(
                r#","backend":"iptables","ingressPolicy":"isolated""#,
                FW_DUAL,
            ),
        )
        .before(fw_bridge)
        .check(assert_bridge_to_itself_dropped),
        f(
            "firewall same-bridge on a link that is not a bridge",
            fw_conf(
                r#","backend":"iptables","ingressPolicy":"same-bridge""#,
                FW_V4,
            ),
        )
        .before(|sb| {
            sb.node.ip(&[
                "link", "add", "sbs0", "type", "veth", "peer", "name", "sbs0p",
            ]);
        })
        .fails_with(7)
        .differs(
            "v1.9.1 isolates whatever the first interface of prevResult names: a pod's link, \
             or the node's uplink",
            |sb, out| {
                assert!(
                    out[0].raw.contains("not a bridge on the node"),
                    "{}",
                    out[0].raw
                );
                let rules = sb.firewall();
                assert!(!rules.contains("CNI-ISOLATION"), "{rules}");
                assert!(!rules.contains("-s 10.20.0.5/32"), "{rules}");
            },
        ),
        f(
            "firewall isolated on a bridge named with a wildcard",
            fw_conf(r#","backend":"iptables","ingressPolicy":"isolated""#, FW_V4)
                .replace(r#""name":"sbs0""#, r#""name":"sbs+""#),
        )
        .fails_with(7)
        .differs(
            "v1.9.1 writes -i sbs+ -o sbs+ -j DROP, which iptables reads as every interface \
             whose name starts with sbs",
            |sb, out| {
                assert!(out[0].raw.contains("wildcard"), "{}", out[0].raw);
                assert!(!sb.firewall().contains("CNI-ISOLATION"));
            },
        ),
        f(
            "firewall ADD then DEL",
            fw_conf(r#","backend":"iptables""#, FW_DUAL),
        )
        .steps(&[Step::Add, Step::Del]),
        f(
            "firewall DEL twice",
            fw_conf(r#","backend":"iptables""#, FW_V4),
        )
        .steps(&[Step::Add, Step::Del, Step::Del]),
        f(
            "firewall CHECK after ADD",
            fw_conf(r#","backend":"iptables""#, FW_DUAL),
        )
        .steps(&[Step::Add, Step::Check]),
        f(
            "firewall CNI 0.4.0",
            fw_conf(r#","backend":"iptables""#, FW_V4).replace("1.0.0", "0.4.0"),
        ),
        f(
            "firewall without prevResult",
            r#"{"cniVersion":"1.0.0","name":"sbs","type":"firewall","backend":"iptables"}"#.into(),
        )
        .fails_with(7),
        f(
            "firewall unknown ingress policy",
            fw_conf(r#","backend":"iptables","ingressPolicy":"closed""#, FW_V4),
        )
        .fails_with(7)
        .differs(
            "v1.9.1 writes the pod's rules, then fails on the policy and leaves them",
            |sb, out| {
                assert!(!out[0].ok, "{out:?}");
                assert!(!sb.firewall().contains("CNI-FORWARD"));
            },
        ),
        f(
            "firewall nftables backend",
            fw_conf(r#","backend":"nftables""#, FW_V4),
        )
        .differs(
            "v1.9.1's firewall has no nftables backend: it takes the name for none and writes \
             iptables rules",
            |sb, out| {
                assert!(out[0].ok, "{out:?}");
                let rules = sb.firewall();
                assert!(!rules.contains("CNI-FORWARD"), "{rules}");
                assert!(rules.contains("table inet cni_plugins_firewall"), "{rules}");
            },
        ),
        f(
            "firewall unknown backend",
            fw_conf(r#","backend":"pf""#, FW_V4),
        )
        .fails_with(7)
        .differs(
            "v1.9.1 accepts any backend and falls back to iptables (or firewalld)",
            |sb, out| {
                assert!(!out[0].ok, "{out:?}");
                assert!(
                    out[0].raw.contains(r#"backend: \"pf\" is not a backend"#),
                    "{}",
                    out[0].raw
                );
                assert!(!sb.firewall().contains("CNI-FORWARD"));
            },
        ),
    ]
}

/// `isolated`: what goes from the bridge back to it is dropped, in both families.
/// The bridge `sbs0` of [`fw_conf`]'s prevResult, in the node.
fn fw_bridge(sb: &Sandbox) {
    sb.node.ip(&["link", "add", "sbs0", "type", "bridge"]);
}

fn assert_bridge_to_itself_dropped(sb: &Sandbox, out: &[Outcome]) {
    assert!(out[0].ok, "{out:?}");
    let rules = sb.firewall();
    let drops = rules
        .lines()
        .filter(|l| l.contains(r#"iifname "sbs0" oifname "sbs0""#) && l.contains("drop"))
        .count();
    assert_eq!(drops, 2, "{rules}");
}

trait RawIface {
    fn raw_iface(&self, i: usize) -> String;
}

impl RawIface for Outcome {
    /// The real name of result interface `i` (normalized results hide veth names).
    fn raw_iface(&self, i: usize) -> String {
        let v: Value = serde_json::from_str(&self.raw).unwrap_or(Value::Null);
        v["interfaces"][i]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }
}

/// On a kernel without VLAN filtering, VLAN options must fail with a message that says so;
/// returns whether the kernel has it (and the case's own checks apply).
fn vlan_filtering_here(out: &[Outcome]) -> bool {
    if common::kernel_has_vlan_filtering() {
        return true;
    }
    assert!(!out[0].ok, "{:?}", out[0]);
    assert!(
        out[0].raw.contains("CONFIG_BRIDGE_VLAN_FILTERING"),
        "{}",
        out[0].raw
    );
    false
}

/// VLANs of the (single) container port.
fn port_vlans(sb: &Sandbox) -> Value {
    let all = sb.vlans();
    let port = all
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p[0] == "veth*")
        .cloned()
        .unwrap_or(Value::Null);
    port[1].clone()
}

fn bridge_with_other_address(sb: &Sandbox) {
    sb.node.ip(&["link", "add", "sbs0", "type", "bridge"]);
    sb.node.ip(&["addr", "add", "10.99.0.1/24", "dev", "sbs0"]);
}

/// The container interface has `want` as its MAC, in the kernel and in the result.
fn assert_mac(sb: &Sandbox, out: &[Outcome], want: &str) {
    assert!(out[0].ok, "{:?}", out[0]);
    let v: Value = serde_json::from_str(&out[0].raw).expect("the result is JSON");
    let eth0 = sb.pod.ip_json(&["link", "show", "dev", "eth0"]);
    assert_eq!(eth0[0]["address"], want);
    assert_eq!(v["interfaces"][2]["mac"], want);
}

/// Our ADD fails with a config error and leaves no link.
fn assert_rejected(sb: &Sandbox, out: &[Outcome]) {
    assert!(!out[0].ok, "{:?}", out[0]);
    assert_eq!(out[0].code, Some(7), "{:?}", out[0]);
    assert!(sb.node_links().is_empty());
}

fn veth_named_like_the_bridge(sb: &Sandbox) {
    sb.node.veth_pair("sbs0", "sbs0p");
}

fn run_case(plugins: &Plugins, side: Side, c: &Case) -> (Sandbox, Run) {
    let sb = Sandbox::new(plugins, side);
    (c.before)(&sb);
    let mut outcomes = Vec::new();
    let mut last_add = Value::Null;
    for step in c.steps {
        let call = |command: &str, conf: &str| {
            let mut call = sb.call(command, conf);
            call.args = c.cni_args.into();
            call.ifname = c.ifname.into();
            call
        };
        let out = match *step {
            Step::Add => Some(sb.run(&call("ADD", &c.conf))),
            Step::Del => Some(sb.run(&call("DEL", &c.conf))),
            Step::DelNoNetns => {
                let mut del = call("DEL", &c.conf);
                del.netns.clear();
                Some(sb.run(&del))
            }
            Step::Check => {
                let mut conf: Value = serde_json::from_str(&c.conf).expect("the config is JSON");
                conf["prevResult"] = last_add.clone();
                Some(sb.run(&call("CHECK", &conf.to_string())))
            }
            Step::DeletePodNetns => {
                sb.node
                    .command("ip")
                    .args(["netns", "del", sb.pod.name()])
                    .output()
                    .expect("run ip netns del");
                for veth in sb.node_links().iter().filter(|l| l.starts_with("veth")) {
                    sb.node.try_ip(&["link", "del", veth]);
                }
                None
            }
            Step::RemovePodAddr(addr) => {
                sb.pod.ip(&["addr", "del", addr, "dev", "eth0"]);
                None
            }
            Step::DeleteNodeLink(name) => {
                sb.node.ip(&["link", "del", name]);
                None
            }
            Step::DeleteDefaultRoute => {
                sb.node.ip(&["route", "del", "default"]);
                None
            }
            Step::InPod(args) => {
                sb.pod.ip(args);
                None
            }
        };
        let Some(out) = out else { continue };
        let json: Value = serde_json::from_str(&out.stdout).unwrap_or(Value::Null);
        let ok = out.code == 0;
        if ok && matches!(step, Step::Add) {
            last_add = json.clone();
        }
        outcomes.push(Outcome {
            ok,
            code: (!ok).then(|| json["code"].as_u64()).flatten(),
            result: if ok {
                normalize_result(json)
            } else {
                Value::Null
            },
            raw: out.stdout,
        });
    }
    let pod_alive = sb.pod.path().exists();
    let mut state = if pod_alive {
        sb.snapshot()
    } else {
        json!({ "node_links": sb.node_links() })
    };
    state["reservations"] = json!(sb.reservations().len());
    state["firewall"] = json!(sb.firewall());
    (sb, Run { outcomes, state })
}

/// Differences between two runs, skipping `skip` state keys.
fn diff(ours: &Run, theirs: &Run, skip: &[&str]) -> Vec<String> {
    let mut out = Vec::new();
    if ours.outcomes.len() != theirs.outcomes.len() {
        out.push("different number of steps".into());
    }
    for (i, (a, b)) in ours.outcomes.iter().zip(&theirs.outcomes).enumerate() {
        if a.ok != b.ok {
            out.push(format!(
                "step {i}: ours ok={} ({}), reference ok={} ({})",
                a.ok,
                a.raw.trim(),
                b.ok,
                b.raw.trim()
            ));
        } else if a.result != b.result {
            out.push(format!(
                "step {i} result:\n  ours {}\n  ref  {}",
                a.result, b.result
            ));
        }
    }
    let keys = ours
        .state
        .as_object()
        .map(|o| o.keys().cloned().collect::<Vec<_>>())
        .unwrap_or_default();
    for k in keys {
        if skip.contains(&k.as_str()) {
            continue;
        }
        if ours.state[&k] != theirs.state[&k] {
            out.push(format!(
                "{k}:\n  ours {}\n  ref  {}",
                ours.state[&k], theirs.state[&k]
            ));
        }
    }
    out
}

fn lo(version: &str, extra: &str) -> String {
    format!(r#"{{"cniVersion":"{version}","name":"lo","type":"loopback"{extra}}}"#)
}

fn lo_down(sb: &Sandbox) {
    sb.pod.ip(&["link", "set", "lo", "down"]);
}

/// The IPs of our ADD result carry `version`, as results of 0.3.x and 0.4.0 must.
fn assert_ip_versions(_: &Sandbox, out: &[Outcome]) {
    let ips = out[0].result["ips"].as_array().cloned().unwrap_or_default();
    let versions: Vec<&str> = ips.iter().filter_map(|ip| ip["version"].as_str()).collect();
    assert_eq!(versions, ["4", "6"], "{}", out[0].raw);
}

fn loopback_cases() -> Vec<Case> {
    const PREV: &str = r#","prevResult":{"cniVersion":"1.0.0","interfaces":[{"name":"eth0","mac":"02:00:00:00:00:01","sandbox":"/var/run/netns/x"}],"ips":[{"address":"10.20.0.5/24","gateway":"10.20.0.1","interface":0}],"routes":[{"dst":"0.0.0.0/0"}],"dns":{"nameservers":["10.20.0.53"]}}"#;
    let up = |name, conf| case(name, conf).before(lo_down);
    vec![
        up("ADD brings lo up", lo("1.0.0", "")).check(|_, out| {
            let result: Value = serde_json::from_str(&out[0].raw).expect("a JSON result");
            assert_eq!(result["interfaces"][0]["mac"], "00:00:00:00:00:00");
        }),
        up("ADD, CHECK, DEL and DEL again", lo("1.0.0", "")).steps(&[
            Step::Add,
            Step::Check,
            Step::Del,
            Step::Del,
        ]),
        up("CHECK after DEL fails: lo is down", lo("1.0.0", "")).steps(&[
            Step::Add,
            Step::Del,
            Step::Check,
        ]),
        up("ADD twice", lo("1.0.0", "")).steps(&[Step::Add, Step::Add]),
        up("CNI_IFNAME is not lo", lo("1.0.0", "")).secondary(),
        up("DEL without a namespace", lo("1.0.0", "")).steps(&[Step::DelNoNetns]),
        up("DEL once the namespace is gone", lo("1.0.0", "")).steps(&[
            Step::Add,
            Step::DeletePodNetns,
            Step::Del,
        ]),
        up("chained: the prevResult is passed on", lo("1.0.0", PREV))
            .steps(&[Step::Add, Step::Del]),
        up(
            "chained: a prevResult that is not a result",
            lo("1.0.0", r#","prevResult":5"#),
        )
        .fails_with(6),
        up("IPv6 off in the pod: only 127.0.0.1", lo("1.0.0", "")).before(|sb| {
            lo_down(sb);
            sb.pod
                .command("sysctl")
                .args(["-qw", "net.ipv6.conf.all.disable_ipv6=1"])
                .output()
                .expect("sysctl");
        }),
        up(
            "a non-loopback address on lo fails the ADD",
            lo("1.0.0", ""),
        )
        .before(|sb| {
            lo_down(sb);
            sb.pod.ip(&["addr", "add", "10.9.9.9/32", "dev", "lo"]);
        })
        .fails_with(999),
        up("cniVersion 0.3.1", lo("0.3.1", "")).differs(
            "v1.9.1 prints the IPs of a 0.3.1 result without their `version`",
            assert_ip_versions,
        ),
        up("cniVersion 0.4.0", lo("0.4.0", "")).differs(
            "v1.9.1 prints the IPs of a 0.4.0 result without their `version`",
            assert_ip_versions,
        ),
        up("cniVersion 0.2.0", lo("0.2.0", "")).differs(
            "v1.9.1 prints a 1.0.0-shaped result labelled 0.2.0",
            |_, out| {
                assert_eq!(out[0].result["ip4"]["ip"], "127.0.0.1/8", "{}", out[0].raw);
                assert_eq!(out[0].result["ip6"]["ip"], "::1/128", "{}", out[0].raw);
            },
        ),
        up("cniVersion 1.1.0", lo("1.1.0", "")).check(|sb, out| {
            assert!(out[0].ok, "{}", out[0].raw);
            assert_eq!(sb.snapshot()["pod_lo"]["up"], true);
        }),
    ]
}

fn hd(body: &str) -> String {
    format!(r#"{{"cniVersion":"1.0.0","name":"hd","type":"host-device"{body}}}"#)
}

const HD_STATIC: &str = r#","ipam":{"type":"static","addresses":[{"address":"10.5.0.2/24","gateway":"10.5.0.1"},{"address":"fd05::2/64"}],"routes":[{"dst":"10.6.0.0/16","gw":"10.5.0.1"}]}"#;

/// The node's device: `hd0`, MTU 1400, a fixed MAC, up; its veth peer `hd0p` stays in the node.
fn host_dev(sb: &Sandbox) {
    sb.node.ip(&[
        "link", "add", "hd0", "mtu", "1400", "type", "veth", "peer", "name", "hd0p",
    ]);
    sb.node
        .ip(&["link", "set", "hd0", "address", "02:11:22:33:44:55"]);
    sb.node.ip(&["link", "set", "hd0", "up"]);
}

/// After DEL the device is the node's again, as it was: name, MAC, MTU, no alias left.
fn assert_given_back(sb: &Sandbox, out: &[Outcome]) {
    assert!(out.iter().all(|o| o.ok), "{out:?}");
    let link = sb.node_link("hd0");
    assert_eq!(link["address"], "02:11:22:33:44:55", "{link}");
    assert_eq!(link["mtu"], 1400, "{link}");
    assert!(link.get("ifalias").is_none(), "alias left: {link}");
    assert!(sb.pod.links().iter().all(|l| l == "lo"));
}

fn host_device_cases() -> Vec<Case> {
    let full: &[Step] = &[Step::Add, Step::Check, Step::Del];
    vec![
        case("device by name, static IPAM", hd(&format!(r#","device":"hd0"{HD_STATIC}"#)))
            .before(host_dev)
            .steps(full)
            .check(assert_given_back),
        case("device by hwaddr", hd(&format!(r#","hwaddr":"02:11:22:33:44:55"{HD_STATIC}"#)))
            .before(host_dev)
            .steps(full),
        case("no IPAM: layer 2 only", hd(r#","device":"hd0""#))
            .before(host_dev)
            .steps(full),
        case("as a secondary network", hd(&format!(r#","device":"hd0"{HD_STATIC}"#)))
            .before(|sb| {
                host_dev(sb);
                pod_eth0(sb);
            })
            .secondary()
            .steps(full),
        case("DEL without a namespace", hd(r#","device":"hd0""#))
            .before(host_dev)
            .steps(&[Step::DelNoNetns]),
        case(
            "DPDKMode: nothing moves, the addresses are in the result",
            hd(&format!(r#","device":"hd0","DPDKMode":true{HD_STATIC}"#)),
        )
        .before(host_dev)
        .steps(full)
        .check(|sb, out| {
            assert!(out.iter().all(|o| o.ok), "{out:?}");
            assert_eq!(out[0].result["ips"][0]["address"], "10.5.0.2/24", "{out:?}");
            assert!(sb.node.links().contains(&"hd0".to_owned()));
            assert!(sb.pod.links().iter().all(|l| l == "lo"));
        }),
        case("a device the node does not have", hd(r#","device":"nope0""#)).fails_with(7),
        case("no selection at all", hd("")).fails_with(7),
        case("kernelpath outside /sys/devices", hd(r#","kernelpath":"/etc/x""#)).fails_with(7),
        case("a pciBusID that is not there", hd(r#","pciBusID":"0000:99:1f.7""#)).fails_with(7),
        case("CNI_IFNAME already in the pod", hd(r#","device":"hd0""#))
            .before(|sb| {
                host_dev(sb);
                pod_eth0(sb);
            })
            .fails_with(999)
            .check(|sb, _| {
                    assert!(!sb.pod.links().contains(&"hd0".to_owned()));
                    let link = sb.node_link("hd0");
                    assert!(link.get("ifalias").is_none(), "alias left: {link}");
                },
            ),
        case("the pod has a link of the device's name", hd(r#","device":"hd0""#))
            .before(|sb| {
                host_dev(sb);
                sb.pod.veth_pair("hd0", "hd0x");
            })
            .steps(&[Step::Add, Step::Del])
            .check(|sb, out| {
                    assert!(out.iter().all(|o| o.ok), "{out:?}");
                    assert!(sb.node.links().contains(&"hd0".to_owned()));
                    assert!(sb.pod.links().contains(&"hd0".to_owned()));
                },
            ),
        case(
            "CHECK of a route without a gateway",
            hd(r#","device":"hd0","ipam":{"type":"static","addresses":[{"address":"10.5.0.2/24","gateway":"10.5.0.1"}],"routes":[{"dst":"10.6.0.0/16"}]}"#),
        )
        .before(host_dev)
        .steps(full)
        .check(assert_given_back,
        ),
        case("DEL twice", hd(&format!(r#","device":"hd0"{HD_STATIC}"#)))
            .before(host_dev)
            .steps(&[Step::Add, Step::Del, Step::Del])
            .differs(
                "v1.9.1's second DEL fails (Link not found): DEL is not idempotent",
                assert_given_back,
            ),
        case("DEL once the namespace is gone", hd(r#","device":"hd0""#))
            .before(host_dev)
            .steps(&[Step::Add, Step::DeletePodNetns, Step::Del])
            .differs("v1.9.1 fails DEL when the namespace is gone", |_, out| {
                assert!(out.iter().all(|o| o.ok), "{out:?}");
            }),
        case("IPAM fails after the move", hd(r#","device":"hd0","ipam":{"type":"nope"}"#))
            .before(host_dev)
            .fails_with(7)
            .differs("v1.9.1 leaves the device in the pod", |sb, _| {
                assert!(sb.pod.links().iter().all(|l| l == "lo"));
                let link = sb.node_link("hd0");
                let up = link["flags"].as_array().is_some_and(|f| f.iter().any(|x| x == "UP"));
                assert!(up, "back, and up as it was: {link}");
                assert!(link.get("ifalias").is_none(), "alias left: {link}");
            }),
        case("the node's default-route link", hd(r#","device":"hd0""#))
            .before(|sb| {
                host_dev(sb);
                sb.node.ip(&["addr", "add", "10.9.0.2/24", "dev", "hd0"]);
                sb.node.ip(&["route", "add", "default", "via", "10.9.0.1", "dev", "hd0"]);
            })
            .fails_with(7)
            .differs("v1.9.1 moves the node's uplink into the pod", |sb, out| {
                assert!(out[0].raw.contains("default route"), "{}", out[0].raw);
                assert!(sb.node.links().contains(&"hd0".to_owned()));
            }),
        case("a link holding the node's address", hd(r#","device":"hd0""#))
            .before(|sb| {
                host_dev(sb);
                sb.node.ip(&["addr", "add", "10.9.0.2/24", "dev", "hd0"]);
            })
            .fails_with(7)
            .differs("v1.9.1 moves a link the node has an address on", |sb, out| {
                assert!(out[0].raw.contains("holds the node's address 10.9.0.2/24"), "{}", out[0].raw);
                assert!(sb.node.links().contains(&"hd0".to_owned()));
            }),
        case("the parent of a macvlan of the node", hd(r#","device":"hd0""#))
            .before(|sb| {
                host_dev(sb);
                sb.node.ip(&["link", "add", "mv0", "link", "hd0", "type", "macvlan"]);
            })
            .fails_with(7)
            .differs("v1.9.1 moves a link the node has stacked others on", |sb, out| {
                assert!(out[0].raw.contains("mv0") && out[0].raw.contains("is stacked on it"), "{}", out[0].raw);
                assert!(sb.node.links().contains(&"hd0".to_owned()));
            }),
        case("DEL after the pod renamed the link and forged another", hd(r#","device":"hd0""#))
            .before(host_dev)
            .check(|sb, out| {
                    assert!(out[0].ok, "{:?}", out[0]);
                    // The pod renames the device and makes a veth of the same name whose
                    // alias asks for it to go to the node.
                    sb.pod.ip(&["link", "set", "eth0", "down"]);
                    sb.pod.ip(&["link", "set", "eth0", "name", "stolen0"]);
                    sb.pod.veth_pair("eth0", "evilp");
                    sb.pod.ip(&["link", "set", "eth0", "alias", "evil0"]);
                    let del = sb.run(&sb.call("DEL", &hd(r#","device":"hd0""#)));
                    assert_eq!(del.code, 0, "{}", del.stdout);
                    let node = sb.node.links();
                    assert!(node.contains(&"hd0".to_owned()), "the device is back: {node:?}");
                    assert!(!node.contains(&"evil0".to_owned()), "the forged link stayed out: {node:?}");
                    assert!(sb.pod.links().contains(&"eth0".to_owned()));
                },
            ),
        case("a bridge port", hd(r#","device":"hd0""#))
            .before(|sb| {
                host_dev(sb);
                sb.node.ip(&["link", "add", "hdbr", "type", "bridge"]);
                sb.node.ip(&["link", "set", "hd0", "master", "hdbr"]);
            })
            .fails_with(7)
            .differs("v1.9.1 takes a bridge's port away from it", |sb, out| {
                assert!(out[0].raw.contains("attached to a bridge"), "{}", out[0].raw);
                assert!(sb.node.links().contains(&"hd0".to_owned()));
            }),
        case("another pod's veth", hd(r#","device":"hd0""#))
            .before(|sb| {
                // The pod's namespace stands in for the other pod's.
                sb.node.veth_pair("hd0", "other0");
                sb.node.ip(&["link", "set", "other0", "netns", sb.pod.name()]);
            })
            .fails_with(7)
            .differs("v1.9.1 moves another pod's veth end", |sb, out| {
                assert!(out[0].raw.contains("another pod"), "{}", out[0].raw);
                assert!(sb.node.links().contains(&"hd0".to_owned()));
            }),
    ]
}

/// tuning chained after the pod's eth0 (made by [`pod_eth0`]), its state in the side's scratch.
fn tun(body: &str) -> String {
    const PREV: &str = r#""prevResult":{"cniVersion":"1.0.0","interfaces":[{"name":"eth0","mac":"02:00:00:00:00:01","sandbox":"/var/run/netns/x"}],"ips":[{"address":"10.88.0.5/16","gateway":"10.88.0.1","interface":0}]}"#;
    format!(
        r#"{{"cniVersion":"1.0.0","name":"tun","type":"tuning","dataDir":"DATADIR/tuning",{PREV}{body}}}"#
    )
}

fn saved_files(sb: &Sandbox) -> Vec<String> {
    std::fs::read_dir(sb.dir.path().join("tuning"))
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect()
}

/// The pod's eth0 is as it was before ADD, and nothing is saved any more.
fn assert_put_back(sb: &Sandbox, out: &[Outcome]) {
    assert!(out.iter().all(|o| o.ok), "{out:?}");
    let link = &sb.pod.ip_json(&["-d", "link", "show", "dev", "eth0"])[0];
    assert_eq!(link["mtu"], 1500, "{link}");
    assert_eq!(link["promiscuity"], 0, "{link}");
    assert!(saved_files(sb).is_empty(), "{:?}", saved_files(sb));
}

fn tuning_cases() -> Vec<Case> {
    let full: &[Step] = &[Step::Add, Step::Check, Step::Del];
    let with_eth0 = |name, conf| case(name, conf).before(pod_eth0);
    vec![
        with_eth0(
            "sysctls on IFNAME and of the namespace",
            tun(r#","sysctl":{"net.ipv4.conf.IFNAME.arp_filter":"1","net.ipv4.conf.eth0.accept_local":"1","net.core.somaxconn":"512"}"#),
        )
        .steps(&[Step::Add, Step::Del]),
        with_eth0(
            "CHECK of a sysctl on IFNAME",
            tun(r#","sysctl":{"net.ipv4.conf.IFNAME.arp_filter":"1"}"#),
        )
        .steps(full)
        .check(|sb, out| {
            assert!(out.iter().all(|o| o.ok), "{out:?}");
            assert_eq!(sb.snapshot()["pod_sysctls"]["eth0.arp_filter"], "1");
        }),
        with_eth0(
            "mac, mtu, promisc and allmulti, put back by DEL",
            tun(r#","mac":"02:00:00:00:00:77","mtu":1400,"promisc":true,"allmulti":true"#),
        )
        .steps(full)
        .check(|sb, out| {
            let result: Value = serde_json::from_str(&out[0].raw).expect("a JSON result");
            assert_eq!(result["interfaces"][0]["mac"], "02:00:00:00:00:77", "{result}");
            assert_put_back(sb, out);
        }),
        with_eth0("the MAC from args.cni", tun(r#","args":{"cni":{"mac":"02:00:00:00:00:78","mtu":1450}}"#))
            .steps(&[Step::Add, Step::Check]),
        with_eth0("the MAC from CNI_ARGS", tun(""))
            .args("IgnoreUnknown=1;MAC=02:00:00:00:00:79")
            .steps(&[Step::Add, Step::Check]),
        with_eth0("only the prevResult", tun("")).steps(full),
        with_eth0("DEL twice", tun(r#","mtu":1400"#)).steps(&[Step::Add, Step::Del, Step::Del]),
        with_eth0("DEL without a namespace", tun(r#","mtu":1400"#))
            .steps(&[Step::Add, Step::DelNoNetns]),
        with_eth0("DEL once the namespace is gone", tun(r#","mtu":1400"#))
            .steps(&[Step::Add, Step::DeletePodNetns, Step::Del])
            .check(|sb, out| {
                assert!(out.iter().all(|o| o.ok), "{out:?}");
                assert!(saved_files(sb).is_empty(), "{:?}", saved_files(sb));
            }),
        with_eth0("a sysctl outside net", tun(r#","sysctl":{"kernel.shmmax":"1"}"#)).fails_with(7),
        with_eth0(
            "a sysctl climbing out of net",
            tun(r#","sysctl":{"net/../kernel/shmmax":"1"}"#),
        )
        .fails_with(7),
        case("without a prevResult", r#"{"cniVersion":"1.0.0","name":"tun","type":"tuning","mtu":1400}"#.into())
            .before(pod_eth0)
            .fails_with(7),
        with_eth0("an interface the pod does not have", tun(r#","mtu":1400"#))
            .secondary()
            .fails_with(999),
        with_eth0(
            "a failure halfway puts back what was changed",
            tun(r#","mac":"02:00:00:00:00:77","mtu":99999"#),
        )
        .fails_with(999)
        .check(|sb, _| {
            let link = &sb.pod.ip_json(&["-d", "link", "show", "dev", "eth0"])[0];
            assert_ne!(link["address"], "02:00:00:00:00:77", "{link}");
            assert!(saved_files(sb).is_empty(), "{:?}", saved_files(sb));
        }),
        with_eth0(
            "txQLen and a key given twice",
            tun(r#","txQLen":2000,"sysctl":{"net.core.somaxconn":"1","net.core.somaxconn":"2"}"#),
        )
        .fails_with(6)
        .check(|sb, _| {
            let link = &sb.pod.ip_json(&["-d", "link", "show", "dev", "eth0"])[0];
            assert_eq!(link["txqlen"], 1000, "{link}");
        }),
        with_eth0("two tunings in one chain", tun(r#","mac":"02:00:00:00:00:77""#))
            .steps(&[Step::Add])
            .check(|sb, out| {
                    assert!(out[0].ok, "{:?}", out[0]);
                    // The chain's second tuning changes the MAC again, and the MTU.
                    let second = tun(r#","mac":"02:00:00:00:00:88","mtu":1400"#);
                    assert_eq!(sb.run(&sb.call("ADD", &second)).code, 0);
                    // DEL runs the chain backwards.
                    assert_eq!(sb.run(&sb.call("DEL", &second)).code, 0);
                    let first = tun(r#","mac":"02:00:00:00:00:77""#);
                    assert_eq!(sb.run(&sb.call("DEL", &first)).code, 0);
                    let link = &sb.pod.ip_json(&["-d", "link", "show", "dev", "eth0"])[0];
                    assert_eq!(link["mtu"], 1500, "{link}");
                    assert_ne!(link["address"], "02:00:00:00:00:77", "{link}");
                    assert_ne!(link["address"], "02:00:00:00:00:88", "{link}");
                    assert!(saved_files(sb).is_empty(), "{:?}", saved_files(sb));
                },
            ),
        with_eth0("txQLen, put back by DEL", tun(r#","txQLen":2000"#))
            .steps(full)
            .check(|sb, out| {
                assert_put_back(sb, out);
                let link = &sb.pod.ip_json(&["-d", "link", "show", "dev", "eth0"])[0];
                assert_eq!(link["txqlen"], 1000, "{link}");
            }),
    ]
}

#[test]
fn tuning_matches_the_reference() {
    compare(&tuning_cases());
}

#[test]
fn host_device_matches_the_reference() {
    compare(&host_device_cases());
}

#[test]
fn loopback_matches_the_reference() {
    compare(&loopback_cases());
}

#[test]
fn bridge_matches_the_reference() {
    let cases = cases();
    assert!(cases.len() >= 30, "only {} cases", cases.len());
    compare(&cases);
}

#[test]
fn macvlan_matches_the_reference() {
    let cases = macvlan_cases();
    assert!(cases.len() >= 20, "only {} cases", cases.len());
    compare(&cases);
}

/// ipvlan needs a kernel that has it: here only under `cargo xtask vm-test`, where
/// [`common::kernel_has_ipvlan`] insists.
#[test]
fn ipvlan_matches_the_reference() {
    if !common::kernel_has_ipvlan() {
        eprintln!("this kernel has no ipvlan: the ipvlan comparison runs in `cargo xtask vm-test`");
        return;
    }
    let cases = ipvlan_cases();
    assert!(cases.len() >= 10, "only {} cases", cases.len());
    compare(&cases);
}

#[test]
fn sbr_matches_the_reference() {
    let cases = sbr_cases();
    assert!(cases.len() >= 12, "only {} cases", cases.len());
    compare(&cases);
}

/// VRFs need CONFIG_NET_VRF: here only under `cargo xtask vm-test`, where
/// [`common::kernel_has_vrf`] insists.
#[test]
fn vrf_matches_the_reference() {
    if !common::kernel_has_vrf() {
        eprintln!("this kernel has no vrf: the vrf comparison runs in `cargo xtask vm-test`");
        return;
    }
    let cases = vrf_cases();
    assert!(cases.len() >= 12, "only {} cases", cases.len());
    compare(&cases);
}

#[test]
fn bandwidth_matches_the_reference() {
    let cases = bandwidth_cases();
    assert!(cases.len() >= 12, "only {} cases", cases.len());
    compare(&cases);
}

#[test]
fn portmap_matches_the_reference() {
    let cases = portmap_cases();
    assert!(cases.len() >= 25, "only {} cases", cases.len());
    compare(&cases);
}

#[test]
fn firewall_matches_the_reference() {
    let cases = firewall_cases();
    assert!(cases.len() >= 10, "only {} cases", cases.len());
    compare(&cases);
}

/// dummy links need CONFIG_DUMMY: here only under `cargo xtask vm-test`, where
/// [`common::kernel_has_dummy`] insists.
#[test]
fn dummy_matches_the_reference() {
    if !common::kernel_has_dummy() {
        eprintln!(
            "this kernel has no dummy links: the dummy comparison runs in `cargo xtask vm-test`"
        );
        return;
    }
    let cases = dummy_cases();
    assert!(cases.len() >= 10, "only {} cases", cases.len());
    compare(&cases);
}

#[test]
fn tap_matches_the_reference() {
    let cases = tap_cases();
    assert!(cases.len() >= 10, "only {} cases", cases.len());
    compare(&cases);
}

#[test]
fn ptp_matches_the_reference() {
    let cases = ptp_cases();
    assert!(cases.len() >= 15, "only {} cases", cases.len());
    compare(&cases);
}

/// vlan needs 8021q: here only under `cargo xtask vm-test`, where [`common::kernel_has_vlan`]
/// insists.
#[test]
fn vlan_matches_the_reference() {
    if !common::kernel_has_vlan() {
        eprintln!("this kernel has no 8021q: the vlan comparison runs in `cargo xtask vm-test`");
        return;
    }
    let cases = vlan_cases();
    assert!(cases.len() >= 15, "only {} cases", cases.len());
    compare(&cases);
}

/// Rules, qdiscs and links one implementation's ADD made, the other's DEL removes: a node can
/// switch implementations with pods running. Each case: ADD by one side, DEL by the other, in
/// both directions, against the current reference and against Debian's 1.1.1; then nothing of
/// the attachment may be left.
#[test]
fn either_implementation_deletes_what_the_other_made() {
    let plugins = Plugins::new();
    let gone_dnat = |sb: &Sandbox| !sb.firewall().contains("CNI-DN-");
    let gone_forward = |sb: &Sandbox| !sb.firewall().contains("-s 10.20.0.5/32 -j ACCEPT");
    let gone_ifb = |sb: &Sandbox| !sb.node_links().iter().any(|l| l.starts_with("bwp"));
    let gone_rules = |sb: &Sandbox| {
        !serde_json::to_string(&common::rules(&sb.pod))
            .unwrap_or_default()
            .contains("10.88.0.5")
    };
    let gone_masq = |sb: &Sandbox| {
        let fw = sb.firewall();
        !fw.contains("-A POSTROUTING -s 10.20.0.") && !fw.contains("ip saddr 10.20.0.")
    };
    type Gone = Box<dyn Fn(&Sandbox) -> bool>;
    /// Plugin (the name's first word), config, setup, and whether the attachment is gone.
    type CrossCase = (&'static str, String, fn(&Sandbox), Gone);
    let cases: Vec<CrossCase> = vec![
        (
            "portmap",
            pm_conf("", &format!("{PM_TCP},{PM_UDP_IP}"), PM_DUAL),
            pm_pair,
            Box::new(gone_dnat),
        ),
        (
            "portmap nftables",
            pm_conf(NFT, &format!("{PM_TCP},{PM_UDP_IP}"), PM_DUAL),
            pm_pair,
            Box::new(|sb: &Sandbox| !sb.firewall().contains("comment \"c0ffee\"")),
        ),
        (
            "firewall",
            fw_conf(r#","backend":"iptables""#, FW_DUAL),
            |_| {},
            Box::new(gone_forward),
        ),
        (
            "bandwidth",
            bw_conf(&format!("{BW_IN}{BW_OUT}")),
            bw_pair,
            Box::new(gone_ifb),
        ),
        (
            "sbr",
            sb_conf("", ETH0_DUAL),
            pod_eth0,
            Box::new(gone_rules),
        ),
        (
            "ptp",
            pt(&format!(r#","ipMasq":true,{}"#, hl(V4))),
            |_| {},
            Box::new(gone_masq),
        ),
        (
            "ptp nftables",
            pt(&format!(
                r#","ipMasq":true,"ipMasqBackend":"nftables",{}"#,
                hl(V4)
            )),
            |_| {},
            Box::new(gone_masq),
        ),
    ];
    let mut failures = Vec::new();
    for (name, conf, before, gone) in &cases {
        let mut pairs = vec![(Side::Ours, Side::Reference), (Side::Reference, Side::Ours)];
        // Debian's 1.1.1 knows no nftables backend: it writes and removes iptables rules only.
        if !name.contains("nftables") {
            pairs.extend([(Side::Ours, Side::Debian), (Side::Debian, Side::Ours)]);
        }
        for (adder, deleter) in pairs {
            let sb = Sandbox::new(&plugins, adder);
            before(&sb);
            let add = sb.add(conf);
            if add.code != 0 {
                failures.push(format!("{name}: {adder:?} ADD failed: {}", add.stdout));
                continue;
            }
            // The check sees what ADD made, so it can fail.
            if gone(&sb) {
                failures.push(format!(
                    "{name}: the check does not see {adder:?} ADD's work"
                ));
            }
            let mut del = sb.call("DEL", &common::with_prev(conf, &add.ok()));
            del.path = plugins.dir(deleter).display().to_string();
            let plugin = plugins
                .dir(deleter)
                .join(name.split(' ').next().unwrap_or(name));
            let out = sb.run_in_node(&plugin, &del);
            if out.code != 0 {
                failures.push(format!("{name}: {deleter:?} DEL failed: {}", out.stdout));
            } else if !gone(&sb) {
                failures.push(format!(
                    "{name}: {deleter:?} DEL left what {adder:?} ADD made:\n{}",
                    sb.firewall()
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// Runs every case on both sides and fails with all differences at once.
fn compare(cases: &[Case]) {
    let plugins = Plugins::new();
    let mut failures = Vec::new();
    for c in cases {
        let (ours_sb, ours) = run_case(&plugins, Side::Ours, c);
        if let Some(code) = c.our_code {
            let failed = ours.outcomes.iter().find(|o| !o.ok);
            if failed.and_then(|o| o.code) != Some(code) {
                failures.push(format!(
                    "{}: want our error code {code}, got {:?}",
                    c.name, failed
                ));
            }
        }
        if let Some(check) = c.check {
            let checked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                check(&ours_sb, &ours.outcomes)
            }));
            if let Err(panic) = checked {
                let msg = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                failures.push(format!("{}: our behaviour: {msg}", c.name));
            }
        }
        let skip: &[&str] = match &c.expect {
            Expect::Same => &[],
            Expect::SameExcept(keys) => keys,
            Expect::Differs(why) => {
                eprintln!("{}: not compared, v1.9.1 differs: {why}", c.name);
                continue;
            }
        };
        drop(ours_sb);
        let (_ref_sb, theirs) = run_case(&plugins, Side::Reference, c);
        let d = diff(&ours, &theirs, skip);
        if !d.is_empty() {
            failures.push(format!("{}:\n{}", c.name, d.join("\n")));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases differ:\n\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n\n")
    );
}
