//! Delegation against real executables: small shell-script plugins in a temp dir.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use cni::invoke::{self, DelegateEnv};
use cni::{Code, Command};
use serde_json::json;

/// Writes an executable `#!/bin/sh` plugin named `name` into `dir`.
fn plugin(dir: &Path, name: &str, body: &str) -> PathBuf {
    let path = dir.join(name);
    fs::write(&path, format!("#!/bin/sh\n{body}\n")).expect("write plugin");
    fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).expect("chmod plugin");
    path
}

fn env(path: &[PathBuf]) -> DelegateEnv<'_> {
    DelegateEnv {
        container_id: "ctr1",
        netns: "/var/run/netns/pod",
        ifname: "eth0",
        args: "IgnoreUnknown=1;K8S_POD_NAME=web",
        path,
        addresses_in_use: "",
    }
}

const CONF_040: &[u8] = br#"{"cniVersion":"0.4.0","name":"net","type":"fake"}"#;

#[test]
fn passes_the_cni_environment_and_stdin() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("seen");
    plugin(
        dir.path(),
        "fake",
        &format!(
            r#"out={out}
cat > "$out.stdin"
{{
  echo "CNI_COMMAND=$CNI_COMMAND"
  echo "CNI_CONTAINERID=$CNI_CONTAINERID"
  echo "CNI_NETNS=$CNI_NETNS"
  echo "CNI_IFNAME=$CNI_IFNAME"
  echo "CNI_ARGS=$CNI_ARGS"
  echo "CNI_PATH=$CNI_PATH"
  echo "PATH=$PATH"
  echo "IPAM_ADDRESSES_IN_USE=${{IPAM_ADDRESSES_IN_USE-unset}}"
}} > "$out.env"
echo '{{"cniVersion":"0.4.0","ips":[{{"version":"4","address":"10.1.0.5/24"}}]}}'"#,
            out = out.display()
        ),
    );
    let path = [PathBuf::from("/nonexistent"), dir.path().to_owned()];
    let result = invoke::delegate_add("fake", &env(&path), CONF_040).unwrap();
    assert_eq!(result.ips[0].address.to_string(), "10.1.0.5/24");

    let seen = fs::read_to_string(out.with_extension("env")).unwrap();
    let expected = format!(
        "CNI_COMMAND=ADD\nCNI_CONTAINERID=ctr1\nCNI_NETNS=/var/run/netns/pod\nCNI_IFNAME=eth0\n\
         CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAME=web\nCNI_PATH=/nonexistent:{}\nPATH={}\n\
         IPAM_ADDRESSES_IN_USE=unset\n",
        dir.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    assert_eq!(seen, expected);
    assert_eq!(fs::read(out.with_extension("stdin")).unwrap(), CONF_040);

    // An IPAM DEL after a conflict probe is told which addresses are in use.
    let in_use = DelegateEnv {
        addresses_in_use: "10.1.0.5=02:42:ac:11:00:02",
        ..env(&path)
    };
    invoke::delegate("fake", Command::Del, &in_use, CONF_040).unwrap();
    let seen = fs::read_to_string(out.with_extension("env")).unwrap();
    assert!(seen.starts_with("CNI_COMMAND=DEL\n"), "{seen}");
    assert!(
        seen.ends_with("\nIPAM_ADDRESSES_IN_USE=10.1.0.5=02:42:ac:11:00:02\n"),
        "{seen}"
    );
}

#[test]
fn a_plugin_error_object_is_returned_as_is() {
    let dir = tempfile::tempdir().unwrap();
    let bin = plugin(
        dir.path(),
        "failing",
        r#"echo '{"cniVersion":"0.4.0","code":11,"msg":"try later","details":"lock held"}'
echo 'some diagnostics' >&2
exit 1"#,
    );
    let path = [dir.path().to_owned()];
    let err = invoke::exec_plugin(&bin, Command::Add, &env(&path), CONF_040).unwrap_err();
    assert_eq!(err.code, Code::TryAgainLater as u32);
    assert_eq!(err.msg, "try later");
    assert_eq!(err.details, "lock held");
    assert_eq!(err.cni_version, "0.4.0");
}

#[test]
fn a_failure_without_an_error_object_is_999_with_path_status_and_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let bin = plugin(
        dir.path(),
        "garbage",
        "echo 'not json at all'\necho 'first line' >&2\necho 'panic: boom' >&2\nexit 2",
    );
    let path = [dir.path().to_owned()];
    let err = invoke::exec_plugin(&bin, Command::Del, &env(&path), CONF_040).unwrap_err();
    assert_eq!(err.code, 999);
    assert!(err.msg.contains(&bin.display().to_string()), "{err}");
    assert!(err.msg.contains("exit status: 2"), "{err}");
    assert!(err.details.contains("stdout: not json at all"), "{err}");
    assert!(err.details.contains("panic: boom"), "{err}");

    // JSON that is not an error object is no error object either.
    let bin = plugin(dir.path(), "json", "echo '{\"ips\":[]}'\nexit 1");
    let err = invoke::exec_plugin(&bin, Command::Del, &env(&path), CONF_040).unwrap_err();
    assert_eq!(err.code, 999);
}

#[test]
fn a_silent_failure_or_a_signal_names_the_status() {
    let dir = tempfile::tempdir().unwrap();
    let path = [dir.path().to_owned()];
    let bin = plugin(dir.path(), "quiet", "exit 3");
    let err = invoke::exec_plugin(&bin, Command::Check, &env(&path), CONF_040).unwrap_err();
    assert_eq!((err.code, err.details.as_str()), (999, ""));
    assert!(err.msg.contains("exit status: 3"), "{err}");

    let bin = plugin(dir.path(), "killed", "kill -9 $$");
    let err = invoke::exec_plugin(&bin, Command::Del, &env(&path), CONF_040).unwrap_err();
    assert!(err.msg.contains("signal: 9"), "{err}");
}

#[test]
fn add_needs_a_json_result_other_commands_ignore_stdout() {
    let dir = tempfile::tempdir().unwrap();
    let path = [dir.path().to_owned()];
    let bin = plugin(dir.path(), "chatty", "echo 'hello'");
    let err = invoke::exec_plugin(&bin, Command::Add, &env(&path), CONF_040).unwrap_err();
    assert_eq!(err.code, Code::Decoding as u32);
    assert!(err.msg.contains(&bin.display().to_string()), "{err}");
    assert_eq!(err.details, "hello");
    let err = invoke::delegate_add("chatty", &env(&path), CONF_040).unwrap_err();
    assert_eq!(err.code, Code::Decoding as u32);

    for command in [Command::Del, Command::Check, Command::Status, Command::Gc] {
        let out = invoke::exec_plugin(&bin, command, &env(&path), CONF_040).unwrap();
        assert_eq!(out, None, "{command:?}");
    }
    plugin(dir.path(), "silent", "true");
    invoke::delegate_del("silent", &env(&path), CONF_040).unwrap();
}

#[test]
fn version_returns_the_plugin_info() {
    let dir = tempfile::tempdir().unwrap();
    let path = [dir.path().to_owned()];
    plugin(
        dir.path(),
        "v",
        r#"[ "$CNI_COMMAND" = VERSION ] || exit 9
echo '{"cniVersion":"1.0.0","supportedVersions":["0.4.0","1.0.0"]}'"#,
    );
    let out = invoke::delegate("v", Command::Version, &env(&path), b"{}").unwrap();
    assert_eq!(out.unwrap()["supportedVersions"], json!(["0.4.0", "1.0.0"]));
}

#[test]
fn a_result_without_cni_version_is_read_as_the_config_version() {
    let dir = tempfile::tempdir().unwrap();
    let path = [dir.path().to_owned()];
    plugin(
        dir.path(),
        "old",
        r#"cat >/dev/null; echo '{"ip4":{"ip":"10.0.0.2/8","gateway":"10.0.0.1"}}'"#,
    );
    let conf = br#"{"cniVersion":"0.2.0","name":"net","type":"old"}"#;
    let result = invoke::delegate_add("old", &env(&path), conf).unwrap();
    assert_eq!(result.cni_version, "0.2.0");
    assert_eq!(result.ips[0].address.to_string(), "10.0.0.2/8");
    assert_eq!(result.ips[0].gateway.unwrap().to_string(), "10.0.0.1");

    plugin(dir.path(), "array", "echo '[1]'");
    let err = invoke::delegate_add("array", &env(&path), conf).unwrap_err();
    assert_eq!(err.code, Code::Decoding as u32);
}

#[test]
fn no_deadlock_when_the_plugin_prints_before_reading_or_never_reads() {
    let dir = tempfile::tempdir().unwrap();
    let path = [dir.path().to_owned()];
    let big_stdin = vec![b' '; 4 << 20];
    // More output than a pipe holds, written before stdin is read.
    plugin(
        dir.path(),
        "loud",
        "head -c 1000000 /dev/zero | tr '\\0' ' '\ncat >/dev/null",
    );
    invoke::delegate_del("loud", &env(&path), &big_stdin).unwrap();
    // Exits without reading stdin at all.
    plugin(dir.path(), "deaf", "exit 0");
    invoke::delegate_del("deaf", &env(&path), &big_stdin).unwrap();
    // A config that fits in a new pipe is written without a thread, and it is whole.
    let page = vec![b' '; 4096];
    invoke::delegate_del("loud", &env(&path), &page).unwrap();
    invoke::delegate_del("deaf", &env(&path), &page).unwrap();
    plugin(dir.path(), "counts", "test \"$(wc -c)\" = 4096");
    invoke::delegate_del("counts", &env(&path), &page).unwrap();
    let err = invoke::delegate_del("counts", &env(&path), &page[1..]).unwrap_err();
    assert!(
        err.msg.contains("without printing a CNI error object"),
        "{err}"
    );
}

#[test]
fn a_binary_that_cannot_run_is_an_io_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = [dir.path().to_owned()];
    let bin = dir.path().join("noexec");
    fs::write(&bin, "#!/bin/sh\n").unwrap();
    let err = invoke::delegate_del("noexec", &env(&path), b"{}").unwrap_err();
    assert_eq!(err.code, Code::Io as u32);
    assert!(err.msg.contains(&bin.display().to_string()), "{err}");
}

#[test]
fn find_in_path_refuses_anything_but_a_name() {
    let dir = tempfile::tempdir().unwrap();
    let path = [dir.path().to_owned()];
    plugin(dir.path(), "ok", "true");
    for bad in ["", ".", "..", "a/b", "/bin/sh", "../ok", "ok/"] {
        let err = invoke::find_in_path(bad, &path).unwrap_err();
        assert_eq!(err.code, Code::InvalidConfig as u32, "{bad:?}");
        assert!(err.msg.contains("looked up in CNI_PATH"), "{bad:?}: {err}");
    }
    let err = invoke::delegate("../ok", Command::Del, &env(&path), b"{}").unwrap_err();
    assert_eq!(err.code, Code::InvalidConfig as u32);
}

#[test]
fn find_in_path_takes_the_first_regular_file_and_names_what_it_searched() {
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    fs::create_dir(a.path().join("p")).unwrap(); // a directory is no plugin
    let in_b = plugin(b.path(), "p", "true");
    let in_a = plugin(a.path(), "q", "true");
    plugin(b.path(), "q", "true");
    let path = [a.path().to_owned(), b.path().to_owned()];
    assert_eq!(invoke::find_in_path("p", &path).unwrap(), in_b);
    assert_eq!(invoke::find_in_path("q", &path).unwrap(), in_a);

    let err = invoke::find_in_path("missing", &path).unwrap_err();
    assert_eq!(err.code, Code::InvalidConfig as u32);
    assert_eq!(
        err.msg,
        format!(
            "failed to find plugin \"missing\" in path [{} {}]",
            a.path().display(),
            b.path().display()
        )
    );
    let err = invoke::find_in_path("missing", &[]).unwrap_err();
    assert_eq!(err.msg, "failed to find plugin \"missing\" in path []");
}

#[test]
fn delegate_env_from_cmd_args_is_the_same_attachment() {
    let args = cni::CmdArgs {
        command: Command::Add,
        container_id: "c".into(),
        netns: "/n".into(),
        ifname: "net1".into(),
        args: "A=B".into(),
        path: vec![PathBuf::from("/opt/cni/bin")],
        stdin: Vec::new(),
        path_roots_file: None,
    };
    let env = DelegateEnv::from(&args);
    assert_eq!(
        (env.container_id, env.netns, env.ifname, env.args, env.path),
        ("c", "/n", "net1", "A=B", &args.path[..])
    );
}
