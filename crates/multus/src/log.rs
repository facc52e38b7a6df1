//! Logging as multus's `logFile`, `logLevel` and `logToStderr` ask: multus's tracing events
//! become the node's log lines ([`nodelog`]), with the call's span in front of the message:
//!
//! ```text
//! 2026-11-30T01:54:36.791647Z  INFO multus{command="ADD" pod=default/web ...}: Add net1 ...
//! ```

use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt::{self, Write as _};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use tracing::field::{Field, Visit};
use tracing::level_filters::LevelFilter;
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

use crate::config::{LogLevel, LogSettings, MultusConf};

/// Installs the logger for this process. A log file that cannot be opened is reported on
/// stderr (when allowed) and otherwise ignored: logging must not fail a pod.
pub fn init(conf: &MultusConf) {
    init_with(&conf.log);
}

/// [`init`] from the settings themselves (a daemon's, read from its own config).
pub fn init_with(settings: &LogSettings) {
    let max = match settings.level {
        LogLevel::Panic => None,
        LogLevel::Error => Some(nodelog::Level::Warn),
        LogLevel::Verbose => Some(nodelog::Level::Info),
        LogLevel::Debug => Some(nodelog::Level::Debug),
    };
    let node_settings = nodelog::Settings {
        max,
        to_stderr: settings.to_stderr,
    };
    match &settings.file {
        None => nodelog::init(node_settings),
        Some(path) => {
            let opened = nodelog::init_with_file(node_settings, path, &settings.options);
            if let (Err(e), true) = (opened, settings.to_stderr) {
                eprintln!("multus: cannot open logFile {}: {e}", path.display());
            }
        }
    }
    let _ = tracing::subscriber::set_global_default(Lines::default());
}

/// tracing's events as node log lines. The spans are few (one per call), so their text is
/// made once, when they open.
#[derive(Default)]
struct Lines {
    spans: Mutex<HashMap<u64, OpenSpan>>,
    last_id: AtomicU64,
}

struct OpenSpan {
    name: &'static str,
    fields: String,
    handles: usize,
}

thread_local! {
    /// The spans this thread is in, innermost last.
    static ENTERED: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
}

fn level_of(level: &tracing::Level) -> Option<nodelog::Level> {
    Some(match *level {
        tracing::Level::ERROR => nodelog::Level::Error,
        tracing::Level::WARN => nodelog::Level::Warn,
        tracing::Level::INFO => nodelog::Level::Info,
        tracing::Level::DEBUG => nodelog::Level::Debug,
        _ => return None,
    })
}

/// Fields as `key=value`, space-separated; an event's message as itself.
struct Fields<'a>(&'a mut String);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if !self.0.is_empty() {
            self.0.push(' ');
        }
        let _ = if field.name() == "message" {
            write!(self.0, "{value:?}")
        } else {
            write!(self.0, "{}={value:?}", field.name())
        };
    }
}

impl Lines {
    fn open_spans(&self) -> std::sync::MutexGuard<'_, HashMap<u64, OpenSpan>> {
        // A thread that panicked while logging leaves the map as it was: still usable.
        self.spans
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Subscriber for Lines {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        level_of(metadata.level()).is_some_and(nodelog::enabled)
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        Some(match nodelog::max_level() {
            None => LevelFilter::OFF,
            Some(nodelog::Level::Error) => LevelFilter::ERROR,
            Some(nodelog::Level::Warn) => LevelFilter::WARN,
            Some(nodelog::Level::Info) => LevelFilter::INFO,
            Some(nodelog::Level::Debug) => LevelFilter::DEBUG,
        })
    }

    fn new_span(&self, span: &Attributes<'_>) -> Id {
        let mut fields = String::new();
        span.record(&mut Fields(&mut fields));
        let open = OpenSpan {
            name: span.metadata().name(),
            fields,
            handles: 1,
        };
        let id = self.last_id.fetch_add(1, Ordering::Relaxed) + 1;
        self.open_spans().insert(id, open);
        Id::from_u64(id)
    }

    fn record(&self, span: &Id, values: &Record<'_>) {
        if let Some(open) = self.open_spans().get_mut(&span.into_u64()) {
            values.record(&mut Fields(&mut open.fields));
        }
    }

    fn record_follows_from(&self, _span: &Id, _follows: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let Some(level) = level_of(event.metadata().level()) else {
            return;
        };
        let context = ENTERED.with_borrow(|entered| {
            let spans = self.open_spans();
            let names: Vec<String> = entered
                .iter()
                .filter_map(|id| spans.get(id))
                .map(|s| format!("{}{{{}}}", s.name, s.fields))
                .collect();
            if names.is_empty() {
                String::new()
            } else {
                format!("{}: ", names.join(":"))
            }
        });
        let mut message = String::new();
        event.record(&mut Fields(&mut message));
        nodelog::write(level, format_args!("{context}{message}"));
    }

    fn enter(&self, span: &Id) {
        ENTERED.with_borrow_mut(|entered| entered.push(span.into_u64()));
    }

    fn exit(&self, span: &Id) {
        ENTERED.with_borrow_mut(|entered| {
            if let Some(at) = entered.iter().rposition(|id| *id == span.into_u64()) {
                entered.remove(at);
            }
        });
    }

    fn clone_span(&self, span: &Id) -> Id {
        if let Some(open) = self.open_spans().get_mut(&span.into_u64()) {
            open.handles += 1;
        }
        span.clone()
    }

    fn try_close(&self, span: Id) -> bool {
        let mut spans = self.open_spans();
        let id = span.into_u64();
        let closed = spans.get_mut(&id).is_some_and(|open| {
            open.handles -= 1;
            open.handles == 0
        });
        if closed {
            spans.remove(&id);
        }
        closed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// The thick daemon opens a span per call for as long as it runs: each is forgotten once
    /// its last handle goes.
    #[test]
    fn a_closed_span_is_forgotten() {
        let lines = Arc::new(Lines::default());
        tracing::subscriber::with_default(Arc::clone(&lines), || {
            for _ in 0..3 {
                let span = tracing::error_span!("multus", pod = "default/web");
                let _entered = span.enter();
                let copy = span.clone();
                drop(copy);
                assert_eq!(lines.open_spans().len(), 1);
            }
        });
        assert!(lines.open_spans().is_empty());
        ENTERED.with_borrow(|entered| assert!(entered.is_empty()));
    }
}
