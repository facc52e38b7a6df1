//! Fetches one pod with multus's Kubernetes client and prints its UID and annotations:
//! `kube_get_pod <kubeconfig> <namespace> <name>` (an empty kubeconfig means in-cluster).

use std::path::PathBuf;
use std::process::ExitCode;

use multus::k8s::{ClientOptions, KubeClient};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [kubeconfig, namespace, name] = args.as_slice() else {
        eprintln!("usage: kube_get_pod <kubeconfig> <namespace> <name>");
        return ExitCode::from(2);
    };
    let opts = ClientOptions {
        kubeconfig: (!kubeconfig.is_empty()).then(|| PathBuf::from(kubeconfig)),
        ..ClientOptions::default()
    };
    let pod = KubeClient::new(&opts).and_then(|client| client.get_pod(namespace, name));
    match pod {
        Ok(pod) => {
            println!("uid {}", pod.metadata.uid.unwrap_or_default());
            for (key, value) in pod.metadata.annotations.unwrap_or_default() {
                println!("{key}: {value}");
            }
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("{err}");
            ExitCode::FAILURE
        }
    }
}
