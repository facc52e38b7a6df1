//! `multus`: run by the container runtime as a CNI plugin (`CNI_COMMAND` set).

fn main() {
    let about = format!("multus-rs meta-plugin v{}", env!("CARGO_PKG_VERSION"));
    let plugin = multus::cmd::Multus {
        connect: multus::connect,
    };
    std::process::exit(cni::plugin_main(&plugin, &about));
}
