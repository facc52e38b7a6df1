//! The `tuning` plugin, chained after an interface plugin: sets network sysctls in the pod and
//! the interface's MAC, MTU, promiscuous and all-multicast modes and transmit queue length, and
//! passes the `prevResult` on (with the new MAC). What it changes on the link is saved in
//! `dataDir` and put back by DEL, before the interface plugin's own DEL gives the link back or
//! deletes it.
//!
//! Behaviour follows containernetworking/plugins' tuning, with these deliberate changes: a
//! failed ADD puts back what it had changed on the link; DEL of a namespace that is gone
//! removes the saved state instead of leaving it; keys outside `net.` or with `..` are refused
//! before anything is written; the saved state is never written through a symlink.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use cni::keys::Keys;
use cni::path_roots::PathRoots;
use cni::{CmdArgs, CniError, CniResult, NetConf};
use netkit::netlink::Link;
use netkit::Netlink;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::support::state_file::StateFile;
use crate::support::sys::{open_netns, open_netns_for_del, sys, sys_ctx};

/// The plugin, as registered in the multi-call binary's table.
pub struct Tuning;

const DEFAULT_DATA_DIR: &str = "/run/cni/tuning";
/// The admin's list of sysctls a config may set (regular expressions, one per line); without
/// it, any network sysctl may be set.
const ALLOWLIST: &str = "/etc/cni/tuning/allowlist.conf";

/// `sysctl`, in the config's order; a key given twice is an error, as in the reference.
#[derive(Default, Debug)]
struct Sysctls(Vec<(String, String)>);

impl<'de> Deserialize<'de> for Sysctls {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Sysctls, D::Error> {
        struct Entries;
        impl<'de> Visitor<'de> for Entries {
            type Value = Sysctls;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object of sysctl keys and string values")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Sysctls, A::Error> {
                let mut out: Vec<(String, String)> = Vec::new();
                while let Some((key, value)) = map.next_entry::<String, String>()? {
                    if out.iter().any(|(k, _)| *k == key) {
                        return Err(de::Error::custom(format!(
                            "{key:?} is given twice: duplicated sysctl keys are not allowed"
                        )));
                    }
                    out.push((key, value));
                }
                Ok(Sysctls(out))
            }
        }
        d.deserialize_map(Entries)
    }
}

/// Only the sysctls, read from the raw bytes: a JSON value would already have merged
/// duplicated keys.
#[derive(Deserialize)]
struct RawSysctls {
    #[serde(default)]
    sysctl: Option<Sysctls>,
}

/// tuning's own keys, as written (`args.cni` overrides them).
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct Raw {
    #[serde(default)]
    data_dir: String,
    #[serde(default)]
    mac: String,
    #[serde(default)]
    promisc: bool,
    #[serde(default)]
    mtu: u32,
    #[serde(default, rename = "txQLen")]
    tx_qlen: Option<u32>,
    #[serde(default)]
    allmulti: Option<bool>,
}

/// What DEL reads.
#[derive(Deserialize)]
struct RawDataDir {
    #[serde(default, rename = "dataDir")]
    data_dir: String,
}

/// `args.cni`: every key overrides the config's.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct RawArgs {
    #[serde(default)]
    sysctl: Option<BTreeMap<String, String>>,
    #[serde(default)]
    mac: Option<String>,
    #[serde(default)]
    promisc: Option<bool>,
    #[serde(default)]
    mtu: Option<u32>,
    #[serde(default, rename = "txQLen")]
    tx_qlen: Option<u32>,
    #[serde(default)]
    allmulti: Option<bool>,
}

/// The keys of its own tuning reads.
pub(crate) fn keys() -> Keys {
    Keys::of::<Raw>().and::<RawSysctls>()
}

/// The checked configuration.
struct Conf {
    net: NetConf,
    data_dir: PathBuf,
    sysctls: Vec<(String, String)>,
    mac: Option<[u8; 6]>,
    promisc: bool,
    mtu: Option<u32>,
    tx_qlen: Option<u32>,
    allmulti: Option<bool>,
}

impl Conf {
    fn parse(stdin: &[u8], cni_args: &str) -> Result<Conf, CniError> {
        let config = cni::decode::read(stdin)?;
        // From the bytes again: the JSON value has merged a key given twice.
        let sysctls: RawSysctls = serde_json::from_slice(stdin).map_err(|e| {
            // serde's own position means nothing in a one-line config.
            let text = e.to_string();
            let text = text.split(" at line ").next().unwrap_or_default();
            CniError::decoding(format!("sysctl: {}", cni::quote::shorten(text)))
        })?;
        let net: NetConf = cni::decode::from_value(&config)?;
        let raw: Raw = cni::decode::from_value(&config)?;
        let mut sysctls = sysctls.sysctl.unwrap_or_default().0;
        // The MAC's sources, later ones winning: `mac`, `CNI_ARGS` MAC=, `runtimeConfig.mac`,
        // `args.cni.mac`.
        let mut mac = (!raw.mac.is_empty()).then(|| (raw.mac.clone(), "mac"));
        if !cni_args.is_empty() {
            let args = cni::args::CniArgs::parse(cni_args)?;
            args.check_known(&["MAC"])?;
            if let Some(m) = args.get("MAC").filter(|m| !m.is_empty()) {
                mac = Some((m.to_owned(), "CNI_ARGS MAC"));
            }
        }
        match net.runtime_config("mac") {
            Some(Value::String(m)) if !m.is_empty() => mac = Some((m.clone(), "runtimeConfig.mac")),
            None | Some(Value::Null | Value::String(_)) => {}
            Some(other) => {
                return Err(CniError::invalid_config(format!(
                    "runtimeConfig.mac: {} is not a string",
                    cni::quote::quote_value(other)
                )))
            }
        }
        let (mut promisc, mut mtu, mut tx_qlen, mut allmulti) =
            (raw.promisc, raw.mtu, raw.tx_qlen, raw.allmulti);
        if let Some(args) = net.args.as_ref().and_then(|a| a.get("cni")) {
            let args: RawArgs = cni::decode::from_value(args)
                .map_err(|e| CniError::from(e.under_key("cni").under_key("args")))?;
            for (key, value) in args.sysctl.unwrap_or_default() {
                match sysctls.iter_mut().find(|(k, _)| *k == key) {
                    Some(entry) => entry.1 = value,
                    None => sysctls.push((key, value)),
                }
            }
            if let Some(m) = args.mac {
                mac = Some((m, "args.cni.mac"));
            }
            promisc = args.promisc.unwrap_or(promisc);
            mtu = args.mtu.unwrap_or(mtu);
            tx_qlen = args.tx_qlen.or(tx_qlen);
            allmulti = args.allmulti.or(allmulti);
        }
        let mac = mac
            .map(|(text, source)| {
                netkit::parse_mac(&text).map_err(|_| {
                    CniError::invalid_config(format!(
                        "{source}: {} is not a MAC address: write six hex bytes like 0a:58:0a:f4:00:01",
                        cni::quote::quote(&text)
                    ))
                })
            })
            .transpose()?;
        for (key, _) in &sysctls {
            sysctl_path(key, "eth0")?;
        }
        check_allowlist(Path::new(ALLOWLIST), &sysctls)?;
        Ok(Conf {
            net,
            data_dir: data_dir(&raw.data_dir),
            sysctls,
            mac,
            promisc,
            mtu: (mtu != 0).then_some(mtu),
            tx_qlen,
            allmulti,
        })
    }

    fn changes_link(&self) -> bool {
        self.mac.is_some()
            || self.promisc
            || self.mtu.is_some()
            || self.tx_qlen.is_some()
            || self.allmulti.is_some()
    }
}

fn data_dir(given: &str) -> PathBuf {
    PathBuf::from(if given.is_empty() {
        DEFAULT_DATA_DIR
    } else {
        given
    })
}

/// A sysctl key as the file under /proc/sys it names (slash form), for the interface
/// `ifname`: dots become slashes and the first `IFNAME` becomes the interface, as in the
/// reference. Only network sysctls, and nothing that climbs out of them.
fn sysctl_path(key: &str, ifname: &str) -> Result<String, CniError> {
    let path = key.replace('.', "/").replacen("IFNAME", ifname, 1);
    let mut parts = path.split('/');
    let under_net = parts.next() == Some("net");
    let clean = path.split('/').all(|p| !p.is_empty() && p != "..");
    if !under_net || !clean || !path.contains('/') {
        return Err(CniError::invalid_config(format!(
            "sysctl: {} is not a network sysctl (net.*) the pod owns",
            cni::quote::quote(key)
        )));
    }
    Ok(path)
}

/// The admin's allowlist, when there is one: every key must match one of its patterns.
fn check_allowlist(file: &Path, sysctls: &[(String, String)]) -> Result<(), CniError> {
    if sysctls.is_empty() || !file.exists() {
        return Ok(());
    }
    let text = cni::input::read_file_to_string(file).map_err(|e| {
        CniError::io(format!(
            "reading the sysctl allowlist {}: {e}",
            file.display()
        ))
    })?;
    let patterns = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(|l| {
            regex_lite::Regex::new(l).map_err(|e| {
                CniError::invalid_config(format!(
                    "the sysctl allowlist {} has a bad pattern {l:?}: {e}",
                    file.display()
                ))
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    for (key, _) in sysctls {
        if !patterns.iter().any(|p| p.is_match(key)) {
            return Err(CniError::invalid_config(format!(
                "sysctl: {key} is not allowed by {}",
                file.display()
            )));
        }
    }
    Ok(())
}

/// What ADD changed on the link, to put back: the reference's file, so either implementation
/// can DEL the other's ADD.
#[derive(Serialize, Deserialize, Default, Debug, Clone, PartialEq, Eq)]
struct Saved {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    mac: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    promisc: Option<bool>,
    #[serde(default, skip_serializing_if = "is_zero")]
    mtu: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    allmulti: Option<bool>,
    #[serde(default, rename = "txQLen", skip_serializing_if = "Option::is_none")]
    tx_qlen: Option<u32>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl Saved {
    fn of(link: &Link, conf: &Conf) -> Saved {
        Saved {
            mac: match (conf.mac, link.mac) {
                (Some(_), Some(mac)) => netkit::format_mac(&mac),
                _ => String::new(),
            },
            promisc: conf.promisc.then_some(link.promisc),
            mtu: if conf.mtu.is_some() { link.mtu } else { 0 },
            allmulti: conf.allmulti.map(|_| is_allmulti(link)),
            tx_qlen: conf.tx_qlen.and(link.txqlen),
        }
    }

    /// These values, with `later`'s for what these do not have.
    fn keeping(&self, later: &Saved) -> Saved {
        Saved {
            mac: if self.mac.is_empty() {
                later.mac.clone()
            } else {
                self.mac.clone()
            },
            promisc: self.promisc.or(later.promisc),
            mtu: if self.mtu == 0 { later.mtu } else { self.mtu },
            allmulti: self.allmulti.or(later.allmulti),
            tx_qlen: self.tx_qlen.or(later.tx_qlen),
        }
    }

    /// Puts it back on `link`; every failure is reported, none stops the others.
    fn restore(&self, nl: &Netlink, link: &Link) -> Vec<String> {
        let mut failures = Vec::new();
        let mut step = |what: &str, done: netkit::Result<()>| {
            if let Err(e) = done {
                failures.push(format!("restoring the {what}: {e}"));
            }
        };
        if self.mtu != 0 {
            step("MTU", nl.set_mtu(link.index, self.mtu));
        }
        if !self.mac.is_empty() {
            match netkit::parse_mac(&self.mac) {
                Ok(mac) => step("MAC address", nl.set_mac(link.index, mac)),
                Err(e) => step("MAC address", Err(e)),
            }
        }
        if let Some(on) = self.promisc {
            step("promiscuous mode", nl.set_promisc(link.index, on));
        }
        if let Some(on) = self.allmulti {
            step("all-multicast mode", nl.set_allmulti(link.index, on));
        }
        if let Some(q) = self.tx_qlen {
            step("transmit queue length", nl.set_txqlen(link.index, q));
        }
        failures
    }
}

fn is_allmulti(link: &Link) -> bool {
    link.flags & libc::IFF_ALLMULTI.unsigned_abs() != 0
}

/// `<dataDir>/<containerID>_<ifname>.json`, as the reference names it; `dataDir` is a
/// config's, so it is opened beneath the node's path roots. `None`: it does not exist.
fn saved_file(
    roots: &PathRoots,
    data_dir: &Path,
    args: &CmdArgs,
    create: bool,
) -> Result<Option<StateFile>, CniError> {
    let name = format!("{}_{}.json", args.container_id, args.ifname);
    StateFile::beneath(roots, "dataDir", data_dir, name, create)
}

impl cni::Plugin for Tuning {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, CniError> {
        let conf = Conf::parse(&args.stdin, &args.args)?;
        // dataDir is refused before anything changes, whether or not there is state to save.
        let roots = PathRoots::for_call(args)?;
        roots.check("dataDir", &conf.data_dir)?;
        let mut prev = prev_result(&conf.net)?;
        let pod = open_netns(&args.netns)?;
        // Made once nothing else can refuse the call, and before the pod changes.
        let file = if conf.changes_link() {
            saved_file(&roots, &conf.data_dir, args, true)?
        } else {
            None
        };
        let ctx = format!("interface {:?} in netns {}", args.ifname, args.netns);
        for (key, value) in &conf.sysctls {
            let path = sysctl_path(key, &args.ifname)?;
            netkit::sysctl::write_in(&pod, &path, value).map_err(sys)?;
        }
        let Some(file) = file else {
            return Ok(prev);
        };
        let nl = Netlink::in_ns(&pod).map_err(sys)?;
        let link = nl.link(&args.ifname).map_err(sys_ctx(&ctx))?;
        let saved = Saved::of(&link, &conf);
        // Another tuning earlier in the chain saved the originals of what it changed: they
        // stay, and only what it left alone is added.
        let earlier: Option<Saved> = file.load("tuning's saved state")?;
        let merged = match &earlier {
            Some(earlier) => earlier.keeping(&saved),
            None => saved.clone(),
        };
        file.save(&merged)?;
        if let Err(e) = apply(&nl, &link, &conf) {
            let failures = saved.restore(&nl, &link);
            if failures.is_empty() {
                let _ = match &earlier {
                    Some(earlier) => file.save(earlier),
                    None => file.remove(),
                };
            }
            return Err(crate::support::sys::with_cleanup_failures(
                sys_ctx(&ctx)(e),
                &failures,
            ));
        }
        if let Some(mac) = conf.mac {
            let text = netkit::format_mac(&mac);
            for iface in prev.interfaces.iter_mut().filter(|i| i.name == args.ifname) {
                iface.mac.clone_from(&text);
            }
        }
        Ok(prev)
    }

    fn del(&self, args: &CmdArgs) -> Result<(), CniError> {
        // Only where the saved state is: a config whose other keys no longer validate must
        // still let the attachment go.
        let raw: RawDataDir = cni::config::parse_plugin_config(&args.stdin)?;
        let file = match saved_file(
            &PathRoots::for_call(args)?,
            &data_dir(&raw.data_dir),
            args,
            false,
        ) {
            Ok(Some(file)) => file,
            Ok(None) => return Ok(()),
            // A dataDir this node refuses: ADD never wrote there, so there is nothing to put
            // back (and nothing to remove).
            Err(e) if e.is(cni::Code::InvalidConfig) => return Ok(()),
            Err(e) => return Err(e),
        };
        let saved: Saved = match file.load("tuning's saved state")? {
            Some(saved) => saved,
            None => return Ok(()),
        };
        let link = match open_netns_for_del(&args.netns)? {
            Some(pod) => {
                let nl = Netlink::in_ns(&pod).map_err(sys)?;
                nl.link_by_name(&args.ifname)
                    .map_err(sys)?
                    .map(|link| (nl, link))
            }
            None => None,
        };
        // With the interface gone there is nothing to put back, and the file goes too. What
        // cannot be put back is said, not returned: a failed DEL would stop the runtime's
        // DEL of the whole list before the interface plugin's, and fail the same way again.
        if let Some((nl, link)) = link {
            for failure in saved.restore(&nl, &link) {
                eprintln!(
                    "tuning: interface {:?} in netns {}: {failure}",
                    args.ifname, args.netns
                );
            }
        }
        file.remove()
    }

    fn check(&self, args: &CmdArgs) -> Result<(), CniError> {
        let conf = Conf::parse(&args.stdin, &args.args)?;
        prev_result(&conf.net)?;
        let pod = open_netns(&args.netns)?;
        let fail = crate::support::check::fail;
        for (key, want) in &conf.sysctls {
            let path = sysctl_path(key, &args.ifname)?;
            let have = netkit::sysctl::read_in(&pod, &path).map_err(sys)?;
            if have != *want {
                return Err(fail(format!(
                    "sysctl {key} is {have:?}, the config says {want:?}"
                )));
            }
        }
        let nl = Netlink::in_ns(&pod).map_err(sys)?;
        let link = crate::support::check::pod_link(&nl, args)?;
        let name = &args.ifname;
        if let Some(mac) = conf.mac {
            if link.mac != Some(mac) {
                return Err(fail(format!(
                    "{name} has MAC {}, the config says {}",
                    link.mac.map(|m| netkit::format_mac(&m)).unwrap_or_default(),
                    netkit::format_mac(&mac)
                )));
            }
        }
        if link.promisc != conf.promisc {
            return Err(fail(format!(
                "{name} is {}promiscuous, the config says promisc {}",
                if link.promisc { "" } else { "not " },
                conf.promisc
            )));
        }
        if let Some(mtu) = conf.mtu.filter(|m| *m != link.mtu) {
            return Err(fail(format!(
                "{name} has MTU {}, the config says {mtu}",
                link.mtu
            )));
        }
        if let Some(on) = conf.allmulti.filter(|on| *on != is_allmulti(&link)) {
            return Err(fail(format!(
                "{name} all-multicast is {}, the config says {on}",
                !on
            )));
        }
        if let Some(q) = conf.tx_qlen.filter(|q| Some(*q) != link.txqlen) {
            return Err(fail(format!(
                "{name} has txqueuelen {}, the config says {q}",
                link.txqlen.unwrap_or_default()
            )));
        }
        Ok(())
    }

    fn validate(&self, config: &[u8]) -> Result<(), CniError> {
        Conf::parse(config, "").map(drop)
    }
}

/// The result of the plugin tuning is chained after, which it passes on.
fn prev_result(net: &NetConf) -> Result<CniResult, CniError> {
    let prev = net.prev_result.as_ref().ok_or_else(|| {
        CniError::invalid_config(
            "tuning needs prevResult: chain it after the plugin that makes the interface",
        )
    })?;
    CniResult::from_value_at(prev, Some("prevResult"))
}

/// The link changes, in the reference's order.
fn apply(nl: &Netlink, link: &Link, conf: &Conf) -> netkit::Result<()> {
    if let Some(mac) = conf.mac {
        nl.set_mac(link.index, mac)?;
    }
    if conf.promisc {
        nl.set_promisc(link.index, true)?;
    }
    if let Some(mtu) = conf.mtu {
        nl.set_mtu(link.index, mtu)?;
    }
    if let Some(on) = conf.allmulti {
        nl.set_allmulti(link.index, on)?;
    }
    if let Some(q) = conf.tx_qlen {
        nl.set_txqlen(link.index, q)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(extra: &str, cni_args: &str) -> Result<Conf, CniError> {
        let json = format!(r#"{{"cniVersion":"1.0.0","name":"n","type":"tuning"{extra}}}"#);
        Conf::parse(json.as_bytes(), cni_args)
    }

    #[test]
    fn sysctl_keys_stay_in_the_pods_network_sysctls() {
        assert_eq!(
            sysctl_path("net.ipv4.conf.IFNAME.arp_filter", "net1.100").unwrap(),
            "net/ipv4/conf/net1.100/arp_filter"
        );
        assert_eq!(
            sysctl_path("net/core/somaxconn", "eth0").unwrap(),
            "net/core/somaxconn"
        );
        for bad in [
            "kernel.shmmax",
            "net",
            "net..ipv4",
            "net/../kernel/x",
            "net.ipv4.conf...x",
            "/net/core/x",
            "vm.swappiness",
        ] {
            let e = sysctl_path(bad, "eth0").unwrap_err();
            assert_eq!(e.code, 7, "{bad}");
        }
    }

    #[test]
    fn duplicated_sysctls_and_the_mac_precedence() {
        let e = parse(
            r#","sysctl":{"net.core.somaxconn":"1","net.core.somaxconn":"2"}"#,
            "",
        )
        .err()
        .unwrap();
        assert!(e.msg.contains("given twice"), "{e}");
        let c = parse(
            r#","mac":"02:00:00:00:00:01","runtimeConfig":{"mac":"02:00:00:00:00:03"},"args":{"cni":{"mac":"02:00:00:00:00:04","mtu":1300}}"#,
            "IgnoreUnknown=1;MAC=02:00:00:00:00:02",
        )
        .unwrap();
        assert_eq!(c.mac, Some([2, 0, 0, 0, 0, 4]));
        assert_eq!(c.mtu, Some(1300));
        let c = parse(
            r#","mac":"02:00:00:00:00:01""#,
            "IgnoreUnknown=1;MAC=02:00:00:00:00:02",
        )
        .unwrap();
        assert_eq!(c.mac, Some([2, 0, 0, 0, 0, 2]));
        let e = parse(r#","mac":"02:00""#, "").err().unwrap();
        assert!(e.msg.starts_with("mac: "), "{e}");
    }

    #[test]
    fn a_second_tuning_keeps_the_first_ones_originals() {
        let first = Saved {
            mac: "02:00:00:00:00:01".into(),
            ..Saved::default()
        };
        let second = Saved {
            mac: "02:00:00:00:00:77".into(),
            mtu: 1500,
            ..Saved::default()
        };
        let merged = first.keeping(&second);
        assert_eq!(merged.mac, "02:00:00:00:00:01");
        assert_eq!(merged.mtu, 1500);
    }

    #[test]
    fn the_allowlist_is_matched_as_the_reference_matches_it() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("allowlist.conf");
        std::fs::write(
            &file,
            "^net\\.ipv4\\.conf\\.IFNAME\\.[a-z_]*$\n\nnet.core.somaxconn\n",
        )
        .unwrap();
        let keys = |k: &[&str]| {
            k.iter()
                .map(|k| (k.to_string(), "1".to_string()))
                .collect::<Vec<_>>()
        };
        check_allowlist(
            &file,
            &keys(&["net.ipv4.conf.IFNAME.arp_filter", "net.core.somaxconn"]),
        )
        .unwrap();
        let e = check_allowlist(&file, &keys(&["net.ipv4.ip_forward"])).unwrap_err();
        assert!(e.msg.contains("not allowed"), "{e}");
        check_allowlist(&dir.path().join("none"), &keys(&["net.ipv4.ip_forward"])).unwrap();
    }

    #[test]
    fn the_saved_state_reads_as_the_reference_writes_it() {
        let theirs = r#"{
 "mac": "02:00:00:00:00:01",
 "promisc": false,
 "mtu": 1500,
 "txQLen": 1000
}"#;
        let saved: Saved = serde_json::from_str(theirs).unwrap();
        assert_eq!(
            saved,
            Saved {
                mac: "02:00:00:00:00:01".into(),
                promisc: Some(false),
                mtu: 1500,
                allmulti: None,
                tx_qlen: Some(1000),
            }
        );
        let ours: Value = serde_json::to_value(&saved).unwrap();
        assert_eq!(ours, serde_json::from_str::<Value>(theirs).unwrap());
    }
}
