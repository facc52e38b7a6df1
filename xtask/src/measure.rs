//! Timing one exec of a plugin, with the child's peak RSS from wait4(2).

use std::io::Write;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use testkit::{CniCall, Netns};

pub struct Sample {
    pub elapsed: Duration,
    pub max_rss_kb: i64,
    pub status: ExitStatus,
    pub stdout: String,
}

/// Runs `bin` with `call`'s environment inside `node`, timing fork to exit. The sample's
/// `max_rss_kb` is an upper bound: the kernel counts the pages this process has when it forks
/// the child (see [`peak_rss_kb`]).
pub fn run(bin: &Path, call: &CniCall, node: &Netns) -> Result<Sample> {
    run_command(call.command(bin, Some(node)), call)
}

/// The peak RSS of one call of `bin` alone, in KB. The call runs under `/usr/bin/time`, whose
/// own pages are few, so the pages of this (large) process, which the kernel folds into a
/// child's peak at fork and exec, do not count.
pub fn peak_rss_kb(bin: &Path, call: &CniCall, node: &Netns) -> Result<i64> {
    let report = tempfile::NamedTempFile::new()?;
    let mut cmd = call.command(Path::new("/usr/bin/time"), Some(node));
    cmd.arg("-f")
        .arg("%M")
        .arg("-o")
        .arg(report.path())
        .arg(bin);
    let sample = run_command(cmd, call)?;
    if !sample.status.success() {
        bail!(
            "{} {} failed: {}",
            bin.display(),
            call.command,
            sample.stdout
        );
    }
    let text = std::fs::read_to_string(report.path())?;
    text.trim()
        .parse()
        .with_context(|| format!("/usr/bin/time printed {text:?}"))
}

/// Runs `cmd`, made by [`CniCall::command`], with `call`'s stdin.
fn run_command(mut cmd: Command, call: &CniCall) -> Result<Sample> {
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let start = Instant::now();
    let mut child = cmd
        .spawn()
        .with_context(|| format!("spawn {:?}", cmd.get_program()))?;
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(call.stdin.as_bytes());
    }
    let mut stdout = String::new();
    if let Some(mut out) = child.stdout.take() {
        use std::io::Read;
        out.read_to_string(&mut stdout)?;
    }
    let pid = libc::pid_t::try_from(child.id()).context("the child's pid")?;
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value for wait4 to fill.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `pid` is our own child, not yet reaped (we never call child.wait()), and both
    // out-pointers are valid for writes.
    let rc = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    let elapsed = start.elapsed();
    if rc != pid {
        bail!("wait4: {}", std::io::Error::last_os_error());
    }
    Ok(Sample {
        elapsed,
        max_rss_kb: usage.ru_maxrss,
        status: ExitStatus::from_raw(status),
        stdout,
    })
}

/// Runs `call(i, pod)` for every pod at once, each on its own thread; returns the wall time of
/// them all and their samples.
pub fn at_once<F>(pods: &[Netns], call: F) -> Result<(Duration, Vec<Sample>)>
where
    F: Fn(usize, &Netns) -> Result<Sample> + Sync,
{
    let start = Instant::now();
    let samples = std::thread::scope(|scope| {
        let handles: Vec<_> = pods
            .iter()
            .enumerate()
            .map(|(i, pod)| {
                let call = &call;
                scope.spawn(move || call(i, pod))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().map_err(|_| anyhow::anyhow!("thread panicked"))?)
            .collect::<Result<Vec<Sample>>>()
    })?;
    Ok((start.elapsed(), samples))
}

/// Median and 90th percentile, in milliseconds.
pub fn percentiles(samples: &mut [Duration]) -> (f64, f64) {
    samples.sort();
    // The sample nearest the quantile, rounding halves up.
    let at = |per_mille: usize| {
        let i = (samples.len().saturating_sub(1) * per_mille + 500) / 1000;
        samples[i].as_secs_f64() * 1000.0
    };
    (at(500), at(900))
}
