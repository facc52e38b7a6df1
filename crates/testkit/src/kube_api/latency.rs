//! How long the server takes to answer, as a real API server does: reads come from its watch
//! cache, writes go through etcd first and take longer.

use std::time::Duration;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Latency {
    /// GET (one object or a list).
    pub read: Duration,
    /// Every other method: POST, PUT, PATCH, DELETE.
    pub write: Duration,
}

impl Latency {
    /// Answers at once.
    pub const ZERO: Latency = Latency {
        read: Duration::ZERO,
        write: Duration::ZERO,
    };
    /// A quiet cluster in a datacenter.
    pub const DATACENTER: Latency = Latency {
        read: Duration::from_millis(2),
        write: Duration::from_millis(6),
    };
    /// An edge machine whose etcd is on an SD card.
    pub const EDGE: Latency = Latency {
        read: Duration::from_millis(5),
        write: Duration::from_millis(30),
    };

    /// The same delay for every request.
    pub fn uniform(delay: Duration) -> Latency {
        Latency {
            read: delay,
            write: delay,
        }
    }

    /// The profile named `zero`, `datacenter` or `edge`.
    pub fn profile(name: &str) -> Option<Latency> {
        match name {
            "zero" => Some(Latency::ZERO),
            "datacenter" => Some(Latency::DATACENTER),
            "edge" => Some(Latency::EDGE),
            _ => None,
        }
    }

    /// The delay of a request with this method.
    pub fn of(&self, method: &str) -> Duration {
        if method == "GET" {
            self.read
        } else {
            self.write
        }
    }
}
