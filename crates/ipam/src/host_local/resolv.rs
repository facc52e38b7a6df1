//! `resolvConf`: a resolv.conf file turned into the result's DNS settings.

use std::path::Path;

use cni::Dns;

use crate::error::{Error, Result};

pub fn load(path: &Path) -> Result<Dns> {
    let text = cni::input::read_file_to_string(path)
        .map_err(|e| Error::io(format!("cannot read resolvConf {}", path.display()), e))?;
    Ok(parse(&text))
}

/// `nameserver`, `domain`, `search` and `options` lines; the rest is ignored, like the reference.
fn parse(text: &str) -> Dns {
    let mut dns = Dns::default();
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with(['#', ';']) {
            continue;
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [key, values @ ..] = fields.as_slice() else {
            continue;
        };
        let Some(first) = values.first() else {
            continue;
        };
        let owned = || values.iter().map(|v| (*v).to_owned());
        match *key {
            "nameserver" => dns.nameservers.push((*first).to_owned()),
            "domain" => dns.domain = (*first).to_owned(),
            "search" => dns.search.extend(owned()),
            "options" => dns.options.extend(owned()),
            _ => {}
        }
    }
    dns
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_all_keys() {
        let dns = parse(
            "# comment\n; other comment\nnameserver 10.0.0.1\nnameserver  fd00::53 extra\n\
             domain example.com\nsearch a.example b.example\noptions ndots:2 edns0\n\
             nameserver\nsortlist 10.0.0.0\n",
        );
        assert_eq!(dns.nameservers, ["10.0.0.1", "fd00::53"]);
        assert_eq!(dns.domain, "example.com");
        assert_eq!(dns.search, ["a.example", "b.example"]);
        assert_eq!(dns.options, ["ndots:2", "edns0"]);
    }

    #[test]
    fn missing_file_is_io() {
        let e = load(Path::new("/nonexistent/resolv.conf")).unwrap_err();
        assert_eq!(cni::CniError::from(e).code, 5);
    }
}
