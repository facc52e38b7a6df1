//! Go's duration syntax (`time.ParseDuration`), which the reference's flags and keys take:
//! `1m30s`, `1.5h`, `500ms`. Signs are not taken: every duration read here is a length of time.

use std::time::Duration;

/// The duration `text` spells, or `None`. Units: h, m, s, ms, us (or µs), ns.
pub fn parse(text: &str) -> Option<Duration> {
    let mut rest = text;
    if rest.is_empty() {
        return None;
    }
    let mut total = Duration::ZERO;
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit() && c != '.')?;
        let number: f64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 1e-3,
            "us" | "µs" => 1e-6,
            "ns" => 1e-9,
            _ => return None,
        };
        rest = &rest[unit_len..];
        total = total.checked_add(Duration::try_from_secs_f64(number * scale).ok()?)?;
    }
    Some(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_read_as_go_reads_them() {
        let d = |s| parse(s).map(|d| d.as_secs_f64());
        assert_eq!(d("10m"), Some(600.0));
        assert_eq!(d("1h30m"), Some(5400.0));
        assert_eq!(d("1.5h"), Some(5400.0));
        assert_eq!(d("90s"), Some(90.0));
        assert_eq!(d("1500ms"), Some(1.5));
        assert_eq!(d("0s"), Some(0.0));
        for bad in ["", "10", "ten minutes", "5d", "m", "-5m", "1..5s"] {
            assert_eq!(parse(bad), None, "{bad}");
        }
    }
}
