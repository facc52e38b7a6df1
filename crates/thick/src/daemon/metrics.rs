//! What the daemon counts, and `/metrics` in Prometheus' text format (version 0.0.4).
//!
//! - `multus_requests_total{command,result}`: CNI calls by command and how they ended (`ok`,
//!   `error`, `rejected`: the queue was full, `expired`: they waited past the deadline,
//!   `abandoned`: the shim had gone before a worker took the call);
//! - `multus_request_duration_seconds{command}`: a histogram of the calls' time, waiting
//!   included;
//! - `multus_requests_in_flight`, `multus_requests_queued`, and `multus_requests_held_bytes`,
//!   the bytes of the calls queued and in hand;
//! - `multus_api_errors_total{call}`: failed Kubernetes API calls by call;
//! - `multus_cache_objects{kind}`: pods and NADs the daemon's caches hold, and
//!   `multus_cache_resource_version{kind}`, the last version each has seen;
//! - `multus_events_queued`, `multus_events_failed_total`;
//! - `multus_pods_missing_networks`: the node's pods found, at the last look, running without
//!   networks they asked for (`missing`);
//! - `multus_hot_plug_syncs_total{result}`: running pods brought to their networks annotation
//!   (docs/hotplug.md): `changed`, `unchanged`, or `failed` (in part or whole);
//! - `multus_server_request_total{handler,code,method}`: upstream's one family, for dashboards
//!   made for it.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

/// Upper bounds of the histogram's buckets, in seconds.
const BUCKETS: [f64; 12] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 60.0,
];

#[derive(Default)]
struct Histogram {
    counts: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
}

#[derive(Default)]
struct Counts {
    requests: BTreeMap<(String, &'static str), u64>,
    durations: BTreeMap<String, Histogram>,
    api_errors: BTreeMap<String, u64>,
    server: BTreeMap<(String, u16, String), u64>,
    events_failed: u64,
    hot_plug_syncs: BTreeMap<&'static str, u64>,
}

#[derive(Default)]
pub struct Metrics {
    counts: Mutex<Counts>,
    pub in_flight: AtomicI64,
    pub queued: AtomicI64,
    pub held_bytes: AtomicI64,
    pub events_queued: AtomicI64,
    pub cached_pods: AtomicI64,
    pub cached_nads: AtomicI64,
    /// The last resourceVersion each cache has seen (when the server's are numbers).
    pub pods_version: AtomicI64,
    pub nads_version: AtomicI64,
    pub pods_missing_networks: AtomicI64,
}

/// A label value, escaped as the text format asks.
fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

impl Metrics {
    fn counts(&self) -> std::sync::MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn request(&self, command: &str, result: &'static str, took: Duration) {
        let mut c = self.counts();
        *c.requests.entry((command.to_owned(), result)).or_default() += 1;
        let h = c.durations.entry(command.to_owned()).or_default();
        let secs = took.as_secs_f64();
        for (i, bound) in BUCKETS.iter().enumerate() {
            if secs <= *bound {
                h.counts[i] += 1;
            }
        }
        h.count += 1;
        h.sum += secs;
    }

    pub fn api_error(&self, call: &str) {
        *self.counts().api_errors.entry(call.to_owned()).or_default() += 1;
    }

    pub fn event_failed(&self) {
        self.counts().events_failed += 1;
    }

    /// One hot-plug sync of a pod, and how it ended.
    pub fn hot_plug_sync(&self, result: &'static str) {
        *self.counts().hot_plug_syncs.entry(result).or_default() += 1;
    }

    /// One request on the socket, as upstream counts them.
    pub fn served(&self, handler: &str, code: u16, method: &str) {
        // Any method can be sent; only these two are labels of their own.
        let method = match method {
            "GET" | "get" => "get",
            "POST" | "post" => "post",
            _ => "other",
        };
        let key = (handler.to_owned(), code, method.to_owned());
        *self.counts().server.entry(key).or_default() += 1;
    }

    pub fn text(&self) -> String {
        let c = self.counts();
        let mut out = String::new();
        let gauge = |out: &mut String, name: &str, help: &str, v: i64| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {v}");
        };
        let _ = writeln!(
            out,
            "# HELP multus_requests_total CNI calls by command and how they ended.\n\
             # TYPE multus_requests_total counter"
        );
        for ((command, result), n) in &c.requests {
            let _ = writeln!(
                out,
                "multus_requests_total{{command=\"{}\",result=\"{result}\"}} {n}",
                label(command)
            );
        }
        let _ = writeln!(
            out,
            "# HELP multus_request_duration_seconds How long CNI calls took, waiting included.\n\
             # TYPE multus_request_duration_seconds histogram"
        );
        for (command, h) in &c.durations {
            let command = label(command);
            for (bound, n) in BUCKETS.iter().zip(h.counts) {
                let _ = writeln!(
                    out,
                    "multus_request_duration_seconds_bucket{{command=\"{command}\",le=\"{bound}\"}} {n}"
                );
            }
            let _ = writeln!(
                out,
                "multus_request_duration_seconds_bucket{{command=\"{command}\",le=\"+Inf\"}} {}\n\
                 multus_request_duration_seconds_sum{{command=\"{command}\"}} {}\n\
                 multus_request_duration_seconds_count{{command=\"{command}\"}} {}",
                h.count, h.sum, h.count
            );
        }
        let load = |a: &AtomicI64| a.load(Ordering::Relaxed);
        gauge(
            &mut out,
            "multus_requests_in_flight",
            "CNI calls being served.",
            load(&self.in_flight),
        );
        gauge(
            &mut out,
            "multus_requests_queued",
            "CNI calls waiting for a worker.",
            load(&self.queued),
        );
        gauge(
            &mut out,
            "multus_requests_held_bytes",
            "Bytes of the CNI calls queued and in hand.",
            load(&self.held_bytes),
        );
        let _ = writeln!(
            out,
            "# HELP multus_api_errors_total Failed Kubernetes API calls.\n\
             # TYPE multus_api_errors_total counter"
        );
        for (call, n) in &c.api_errors {
            let _ = writeln!(
                out,
                "multus_api_errors_total{{call=\"{}\"}} {n}",
                label(call)
            );
        }
        let _ = writeln!(
            out,
            "# HELP multus_cache_objects Objects the daemon's caches hold.\n\
             # TYPE multus_cache_objects gauge\n\
             multus_cache_objects{{kind=\"pods\"}} {}\n\
             multus_cache_objects{{kind=\"nads\"}} {}\n\
             # HELP multus_cache_resource_version The last resourceVersion a cache has seen.\n\
             # TYPE multus_cache_resource_version gauge\n\
             multus_cache_resource_version{{kind=\"pods\"}} {}\n\
             multus_cache_resource_version{{kind=\"nads\"}} {}",
            load(&self.cached_pods),
            load(&self.cached_nads),
            load(&self.pods_version),
            load(&self.nads_version)
        );
        gauge(
            &mut out,
            "multus_events_queued",
            "Events waiting to be sent to the API.",
            load(&self.events_queued),
        );
        let _ = writeln!(
            out,
            "# HELP multus_hot_plug_syncs_total Running pods brought to their networks annotation.\n\
             # TYPE multus_hot_plug_syncs_total counter"
        );
        for (result, n) in &c.hot_plug_syncs {
            let _ = writeln!(
                out,
                "multus_hot_plug_syncs_total{{result=\"{result}\"}} {n}"
            );
        }
        gauge(
            &mut out,
            "multus_pods_missing_networks",
            "The node's pods running without networks they asked for, at the last look.",
            load(&self.pods_missing_networks),
        );
        let _ = writeln!(
            out,
            "# HELP multus_events_failed_total Events the API did not take after retries.\n\
             # TYPE multus_events_failed_total counter\nmultus_events_failed_total {}",
            c.events_failed
        );
        let _ = writeln!(
            out,
            "# HELP multus_server_request_total Counter of HTTP requests\n\
             # TYPE multus_server_request_total counter"
        );
        for ((handler, code, method), n) in &c.server {
            let _ = writeln!(
                out,
                "multus_server_request_total{{code=\"{code}\",handler=\"{}\",method=\"{}\"}} {n}",
                label(handler),
                label(method)
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_format() {
        let m = Metrics::default();
        m.request("ADD", "ok", Duration::from_millis(30));
        m.request("ADD", "ok", Duration::from_secs(3));
        m.api_error("patch pods/status");
        m.served("/cni", 200, "POST");
        m.in_flight.store(2, Ordering::Relaxed);
        let text = m.text();
        for line in [
            "multus_requests_total{command=\"ADD\",result=\"ok\"} 2",
            "multus_request_duration_seconds_bucket{command=\"ADD\",le=\"0.05\"} 1",
            "multus_request_duration_seconds_bucket{command=\"ADD\",le=\"5\"} 2",
            "multus_request_duration_seconds_bucket{command=\"ADD\",le=\"+Inf\"} 2",
            "multus_request_duration_seconds_count{command=\"ADD\"} 2",
            "multus_requests_in_flight 2",
            "multus_api_errors_total{call=\"patch pods/status\"} 1",
            "multus_server_request_total{code=\"200\",handler=\"/cni\",method=\"post\"} 1",
        ] {
            assert!(text.contains(line), "{line}\n{text}");
        }
        assert_eq!(label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
