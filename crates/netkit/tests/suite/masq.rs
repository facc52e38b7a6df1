//! Masquerade rules, set up and torn down inside a "node" namespace the test owns.

use anyhow::{Context, Result};
use ipnet::IpNet;
use netkit::firewall::masq::{self, Backend};
use netkit::NetNs;
use serde_json::Value;

fn nets(list: &[&str]) -> Vec<IpNet> {
    list.iter().map(|s| s.parse().expect("test CIDR")).collect()
}

struct Node {
    sandbox: testkit::Netns,
    ns: NetNs,
}

impl Node {
    fn new(tag: &str) -> Result<Node> {
        let sandbox = testkit::Netns::new(tag);
        let ns = NetNs::open(sandbox.path())?;
        Ok(Node { sandbox, ns })
    }

    fn setup(&self, backend: Option<Backend>, cid: &str, addrs: &[IpNet]) -> Result<()> {
        Ok(self
            .ns
            .run(|| masq::setup(backend, "mynet", cid, "eth0", addrs))??)
    }

    fn teardown(&self, cid: &str, addrs: &[IpNet]) -> Result<()> {
        Ok(self
            .ns
            .run(|| masq::teardown("mynet", cid, "eth0", addrs))??)
    }

    fn stdout(&self, program: &str, args: &[&str]) -> Result<String> {
        let out = self.sandbox.command(program).args(args).output()?;
        anyhow::ensure!(
            out.status.success(),
            "{program}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(String::from_utf8(out.stdout)?)
    }

    /// The rules of our nftables table, as JSON objects.
    fn nft_rules(&self) -> Result<Vec<Value>> {
        let ruleset: Value =
            serde_json::from_str(&self.stdout("nft", &["-j", "list", "ruleset"])?)?;
        Ok(ruleset["nftables"]
            .as_array()
            .context("nftables array")?
            .iter()
            .filter_map(|item| item.get("rule"))
            .filter(|r| r["table"] == "cni_plugins_masquerade")
            .cloned()
            .collect())
    }

    /// Comments of the rules in `masq_checks` that belong to container `cid`.
    fn masq_rules_of(&self, cid: &str) -> Result<Vec<Value>> {
        Ok(self
            .nft_rules()?
            .into_iter()
            .filter(|r| r["chain"] == "masq_checks")
            .filter(|r| {
                r["comment"]
                    .as_str()
                    .is_some_and(|c| c.ends_with(&format!("id: {cid}")))
            })
            .collect())
    }
}

#[test]
fn nftables_setup_replace_and_teardown() -> Result<()> {
    let node = Node::new("nft")?;
    let addrs = nets(&["10.88.0.5/16", "fd00:88::5/64"]);
    node.setup(Some(Backend::Nftables), "cid1", &addrs)?;

    let mine = node.masq_rules_of("cid1")?;
    assert_eq!(mine.len(), 2, "{mine:#?}");
    let text = node.stdout("nft", &["list", "table", "inet", "cni_plugins_masquerade"])?;
    assert!(
        text.contains("ip saddr 10.88.0.5 ip daddr != 10.88.0.0/16 masquerade"),
        "{text}"
    );
    assert!(
        text.contains("ip6 saddr fd00:88::5 ip6 daddr != fd00:88::/64 masquerade"),
        "{text}"
    );
    assert!(text.contains("hook postrouting priority srcnat"), "{text}");
    assert!(text.contains("ip daddr 224.0.0.0/4 return"), "{text}");
    assert!(text.contains("ip6 daddr ff00::/8 return"), "{text}");
    assert!(text.contains("goto masq_checks"), "{text}");
    let comment = mine[0]["comment"].as_str().context("comment")?;
    assert!(
        comment.ends_with(", net: mynet, if: eth0, id: cid1"),
        "{comment}"
    );

    // Again for the same attachment: its rules are replaced, not duplicated; postrouting is
    // rebuilt, not appended to.
    node.setup(Some(Backend::Nftables), "cid1", &addrs[..1])?;
    assert_eq!(node.masq_rules_of("cid1")?.len(), 1);
    let postrouting = node
        .nft_rules()?
        .into_iter()
        .filter(|r| r["chain"] == "postrouting")
        .count();
    assert_eq!(postrouting, 3);

    // A second attachment, then teardown of the first leaves the second alone.
    node.setup(Some(Backend::Nftables), "cid2", &nets(&["10.88.0.6/16"]))?;
    assert_eq!(node.masq_rules_of("cid2")?.len(), 1);
    node.teardown("cid1", &addrs)?;
    assert!(node.masq_rules_of("cid1")?.is_empty());
    assert_eq!(node.masq_rules_of("cid2")?.len(), 1);
    // Idempotent, and addresses are not needed to find the rules.
    node.teardown("cid1", &addrs)?;
    node.teardown("cid2", &[])?;
    assert!(node.masq_rules_of("cid2")?.is_empty());
    Ok(())
}

#[test]
fn default_backend_is_iptables_when_installed() -> Result<()> {
    let node = Node::new("default")?;
    let addrs = nets(&["10.87.0.5/24"]);
    node.setup(None, "cid0", &addrs)?;
    // Like the reference, so its DEL can remove the rules after a switch back.
    let saved = node.stdout("iptables-save", &["-t", "nat"])?;
    assert!(saved.contains("-s 10.87.0.5/32"), "{saved}");
    assert!(node.masq_rules_of("cid0")?.is_empty());
    node.teardown("cid0", &addrs)?;
    assert!(!node
        .stdout("iptables-save", &["-t", "nat"])?
        .contains("CNI-"));
    Ok(())
}

#[test]
fn teardown_without_any_rules_or_table_succeeds() -> Result<()> {
    let node = Node::new("nftnone")?;
    node.teardown("never", &nets(&["10.1.0.2/24", "fd00::2/64"]))?;
    node.teardown("never", &[])?;
    Ok(())
}

#[test]
fn teardown_after_the_pod_namespace_is_gone() -> Result<()> {
    let node = Node::new("nftgone")?;
    let pod = testkit::Netns::new("gonepod");
    let addrs = nets(&["10.89.0.7/24"]);
    node.setup(Some(Backend::Nftables), "cid3", &addrs)?;
    node.setup(Some(Backend::Iptables), "cid3", &addrs)?;
    drop(pod);
    node.teardown("cid3", &addrs)?;
    assert!(node.masq_rules_of("cid3")?.is_empty());
    assert!(!node
        .stdout("iptables-save", &["-t", "nat"])?
        .contains("CNI-"));
    Ok(())
}

#[test]
fn iptables_setup_is_idempotent_and_teardown_removes_everything() -> Result<()> {
    let node = Node::new("ipt")?;
    let addrs = nets(&["10.90.0.5/24", "fd00:90::5/64"]);
    node.setup(Some(Backend::Iptables), "cid4", &addrs)?;
    node.setup(Some(Backend::Iptables), "cid4", &addrs)?;

    // Reference naming: CNI- + 24 hex digits of sha512("mynet" + "cid4").
    let v4 = node.stdout("iptables-save", &["-t", "nat"])?;
    let chain = v4
        .lines()
        .find_map(|l| l.strip_prefix(':').filter(|c| c.starts_with("CNI-")))
        .and_then(|l| l.split_whitespace().next())
        .context("CNI chain declared")?
        .to_string();
    assert_eq!(chain.len(), 28);
    let comment = r#"--comment "name: \"mynet\" id: \"cid4\"""#;
    let jump = format!("-A POSTROUTING -s 10.90.0.5/32 -m comment {comment} -j {chain}");
    let accept = format!("-A {chain} -d 10.90.0.0/24 -m comment {comment} -j ACCEPT");
    let masq = format!("-A {chain} ! -d 224.0.0.0/4 -m comment {comment} -j MASQUERADE");
    for rule in [&jump, &accept, &masq] {
        assert_eq!(
            v4.lines().filter(|l| l == rule).count(),
            1,
            "{rule} once in:\n{v4}"
        );
    }
    let v6 = node.stdout("ip6tables-save", &["-t", "nat"])?;
    assert!(
        v6.contains(&format!(
            "-A POSTROUTING -s fd00:90::5/128 -m comment {comment} -j {chain}"
        )),
        "{v6}"
    );
    assert!(
        v6.contains(&format!("! -d ff00::/8 -m comment {comment} -j MASQUERADE")),
        "{v6}"
    );
    // Nothing went to nftables' own table.
    assert!(node.masq_rules_of("cid4")?.is_empty());

    node.teardown("cid4", &addrs)?;
    node.teardown("cid4", &addrs)?;
    assert!(!node
        .stdout("iptables-save", &["-t", "nat"])?
        .contains(&chain));
    assert!(!node
        .stdout("ip6tables-save", &["-t", "nat"])?
        .contains(&chain));
    Ok(())
}

#[test]
fn iptables_teardown_without_addresses_checks_both_families() -> Result<()> {
    let node = Node::new("iptnoaddr")?;
    node.setup(
        Some(Backend::Iptables),
        "cid5",
        &nets(&["10.91.0.5/24", "fd00:91::5/64"]),
    )?;
    node.teardown("cid5", &[])?;
    assert!(!node
        .stdout("iptables-save", &["-t", "nat"])?
        .contains("CNI-"));
    assert!(!node
        .stdout("ip6tables-save", &["-t", "nat"])?
        .contains("CNI-"));
    Ok(())
}

/// Drop-in check against the Go reference (v1.9.1, its iptables backend): our teardown
/// removes what the reference's ADD set up, and the reference's DEL removes what we set up.
#[test]
fn interoperates_with_the_reference_iptables_rules() -> Result<()> {
    let bridge = testkit::reference_dir().join("bridge");
    assert!(
        bridge.exists(),
        "{} is missing: run `scripts/peers.sh build cni-plugins`",
        bridge.display()
    );
    let node = Node::new("refnode")?;
    let pod = testkit::Netns::new("refpod");
    let data_dir = std::env::temp_dir().join(format!("netkit-masq-{}", std::process::id()));
    let conf = serde_json::json!({
        "cniVersion": "0.4.0", "name": "mynet", "type": "bridge", "bridge": "cni0",
        "isGateway": true, "ipMasq": true,
        "ipam": {"type": "host-local", "subnet": "10.99.0.0/24", "dataDir": data_dir},
    })
    .to_string();
    let call = |command: &str| {
        let mut call = testkit::CniCall::new(command, &conf);
        call.netns = pod.path().display().to_string();
        call.path = testkit::reference_dir().display().to_string();
        call.container_id = "refcid".into();
        call.run(&bridge, Some(&node.sandbox))
    };

    // Reference ADD, our teardown.
    let result = call("ADD").ok();
    let ip: IpNet = result["ips"][0]["address"]
        .as_str()
        .context("address")?
        .parse()?;
    let saved_ref = node.stdout("iptables-save", &["-t", "nat"])?;
    assert!(saved_ref.contains("-j CNI-"), "{saved_ref}");
    node.ns
        .run(|| masq::teardown("mynet", "refcid", "eth0", &[ip]))??;
    assert!(!node
        .stdout("iptables-save", &["-t", "nat"])?
        .contains("CNI-"));

    // Our setup makes the very same rules, and the reference DEL removes them. (The reference
    // DEL fails when its chain is already gone, so it is only called here.)
    node.ns
        .run(|| masq::setup(Some(Backend::Iptables), "mynet", "refcid", "eth0", &[ip]))??;
    let saved_ours = node.stdout("iptables-save", &["-t", "nat"])?;
    let rules = |s: &str| -> Vec<String> {
        let mut v: Vec<String> = s
            .lines()
            .filter(|l| l.starts_with("-A") || l.starts_with(":CNI"))
            .map(str::to_owned)
            .collect();
        v.sort();
        v
    };
    assert_eq!(
        rules(&saved_ours),
        rules(&saved_ref),
        "same rules as the reference"
    );
    call("DEL").ok();
    assert!(!node
        .stdout("iptables-save", &["-t", "nat"])?
        .contains("CNI-"));
    let _ = std::fs::remove_dir_all(&data_dir);
    Ok(())
}
