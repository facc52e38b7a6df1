//! Persistent tap devices, made through `/dev/net/tun` in the calling thread's network
//! namespace (run it inside [`crate::NetNs::run`] for a pod's).
//!
//! The device is created with `IFF_TAP | IFF_NO_PI | IFF_VNET_HDR` (and `IFF_MULTI_QUEUE` when
//! asked), given its owner and group, made persistent, and the file closed: whoever opens it
//! later (a VM's hypervisor) sets the packet-info and virtio-header flags it wants; only the
//! multi-queue flag must match.

use std::fs::OpenOptions;
use std::os::fd::AsRawFd;

use crate::error::{Error, Result};
use crate::netlink::validate_ifname;

const TUN_DEVICE: &str = "/dev/net/tun";

/// How to make a tap.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TapOpts {
    pub multi_queue: bool,
    /// The uid allowed to attach to it; `None`: only root.
    pub owner: Option<u32>,
    /// The gid allowed to attach to it; `None`: only root.
    pub group: Option<u32>,
}

/// `struct ifreq` as TUNSETIFF reads it: the name, then the flags.
#[repr(C)]
struct IfReq {
    name: [u8; libc::IFNAMSIZ],
    flags: libc::c_short,
    _pad: [u8; 22],
}

/// Creates the persistent tap `name` in this thread's namespace.
pub fn create(name: &str, opts: TapOpts) -> Result<()> {
    validate_ifname(name)?;
    let op = || format!("creating tap {name:?}");
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(TUN_DEVICE)
        .map_err(|e| Error::io(format!("{}: opening {TUN_DEVICE}", op()), e))?;
    let mut req = IfReq {
        name: [0; libc::IFNAMSIZ],
        flags: 0,
        _pad: [0; 22],
    };
    req.name[..name.len()].copy_from_slice(name.as_bytes());
    let mut flags = libc::IFF_TAP | libc::IFF_NO_PI | libc::IFF_VNET_HDR;
    if opts.multi_queue {
        flags |= libc::IFF_MULTI_QUEUE;
    }
    req.flags = libc::c_short::try_from(flags)
        .map_err(|_| Error::Invalid(format!("{}: flags {flags:#x} do not fit", op())))?;
    let fd = file.as_raw_fd();
    // SAFETY: `fd` is an open /dev/net/tun; TUNSETIFF reads an ifreq, which `req` is, laid
    // out as the kernel's and alive for the call.
    let ret = unsafe { libc::ioctl(fd, libc::TUNSETIFF, &mut req) };
    ioctl(ret, || format!("{}: TUNSETIFF", op()))?;
    let set = |request, value: libc::c_ulong, what: &str| {
        // SAFETY: these TUN ioctls take an integer argument by value; `fd` is open.
        let ret = unsafe { libc::ioctl(fd, request, value) };
        ioctl(ret, || format!("{}: {what}", op()))
    };
    // A failure now leaves a device that is not persistent: it goes when `file` closes.
    if let Some(uid) = opts.owner {
        set(libc::TUNSETOWNER, uid.into(), "setting its owner")?;
    }
    if let Some(gid) = opts.group {
        set(libc::TUNSETGROUP, gid.into(), "setting its group")?;
    }
    set(libc::TUNSETPERSIST, 1, "making it persistent")
}

fn ioctl(ret: libc::c_int, op: impl FnOnce() -> String) -> Result<()> {
    if ret < 0 {
        return Err(Error::io(op(), std::io::Error::last_os_error()));
    }
    Ok(())
}

/// Like [`create`], but the device is made by `ip tuntap` running under the SELinux label
/// `context`, so it carries that label (the label of the task that creates it).
pub fn create_labelled(name: &str, opts: TapOpts, context: &str) -> Result<()> {
    validate_ifname(name)?;
    let attr = "/proc/thread-self/attr/exec";
    let set_label = |label: &str| {
        std::fs::write(attr, label).map_err(|e| {
            Error::io(
                format!("setting the SELinux exec label {label:?} (is SELinux enabled?)"),
                e,
            )
        })
    };
    set_label(context)?;
    let mut args = vec!["tuntap", "add", "mode", "tap", "name", name];
    if opts.multi_queue {
        args.push("multi_queue");
    }
    let (owner, group) = (
        opts.owner.map(|u| u.to_string()),
        opts.group.map(|g| g.to_string()),
    );
    if let Some(uid) = &owner {
        args.extend(["user", uid]);
    }
    if let Some(gid) = &group {
        args.extend(["group", gid]);
    }
    // The child forks from this thread: it is in this namespace, under this label.
    let made = crate::tool::run_installed("ip", &args, None);
    // Back to the plugin's own label for whatever it runs next.
    let reset = std::fs::write(attr, "");
    made?;
    reset.map_err(|e| Error::io("clearing the SELinux exec label", e))
}
