//! When an X.509 client certificate expires: its PEM block decoded, and the DER walked to the
//! validity's `notAfter` (RFC 5280 4.1), no further.

use base64::Engine as _;

/// `notAfter` of the first certificate in `pem`, in Unix seconds.
pub fn not_after(pem: &str) -> Option<i64> {
    let body: String = pem
        .split("-----BEGIN CERTIFICATE-----")
        .nth(1)?
        .split("-----END CERTIFICATE-----")
        .next()?
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect();
    let der = base64::engine::general_purpose::STANDARD
        .decode(body)
        .ok()?;
    let (_, certificate) = element(&der, 0x30)?;
    let (_, mut tbs) = element(certificate, 0x30)?;
    // [0] version, when present.
    if tbs.first() == Some(&0xa0) {
        tbs = element(tbs, 0xa0)?.0;
    }
    let (rest, _serial) = element(tbs, 0x02)?;
    let (rest, _signature) = element(rest, 0x30)?;
    let (rest, _issuer) = element(rest, 0x30)?;
    let (_, validity) = element(rest, 0x30)?;
    let (rest, _not_before) = any_time(validity)?;
    let (_, not_after) = any_time(rest)?;
    Some(not_after)
}

/// One DER element of tag `tag`: what follows it, and its contents.
fn element(der: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
    if *der.first()? != tag {
        return None;
    }
    let first = usize::from(*der.get(1)?);
    let (len, header) = if first < 0x80 {
        (first, 2)
    } else {
        let octets = first & 0x7f;
        if octets == 0 || octets > 4 {
            return None;
        }
        let len = der
            .get(2..2 + octets)?
            .iter()
            .fold(0usize, |n, b| (n << 8) | usize::from(*b));
        (len, 2 + octets)
    };
    let contents = der.get(header..header.checked_add(len)?)?;
    Some((&der[header + len..], contents))
}

/// A UTCTime or GeneralizedTime, as Unix seconds.
fn any_time(der: &[u8]) -> Option<(&[u8], i64)> {
    let tag = *der.first()?;
    let (rest, text) = element(der, tag)?;
    let text = std::str::from_utf8(text).ok()?.strip_suffix('Z')?;
    let (year, rest_text) = match tag {
        // UTCTime: YYMMDDHHMMSS, years 1950-2049.
        0x17 => {
            let yy: i64 = text.get(0..2)?.parse().ok()?;
            (if yy < 50 { 2000 + yy } else { 1900 + yy }, text.get(2..)?)
        }
        0x18 => (text.get(0..4)?.parse().ok()?, text.get(4..)?),
        _ => return None,
    };
    let field = |i: usize| -> Option<i64> { rest_text.get(i..i + 2)?.parse().ok() };
    let days = days_from_civil(year, field(0)?, field(2)?);
    Some((
        rest,
        days * 86_400 + field(4)? * 3_600 + field(6)? * 60 + field(8)?,
    ))
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_made_certificate_expires_when_it_was_made_to() {
        // rcgen's certificate, valid until 2031-05-06 00:00:00 UTC.
        let mut params = rcgen::CertificateParams::new(vec!["node".to_owned()]).unwrap();
        params.not_after = rcgen::date_time_ymd(2031, 5, 6);
        let key = rcgen::KeyPair::generate().unwrap();
        let pem = params.self_signed(&key).unwrap().pem();
        assert_eq!(not_after(&pem), Some(1_935_792_000));
    }

    #[test]
    fn dates_count_from_1970() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        assert_eq!(days_from_civil(2026, 12, 4), 20_791);
    }

    #[test]
    fn what_is_not_a_certificate_has_no_expiry() {
        assert_eq!(not_after("no pem here"), None);
        assert_eq!(
            not_after("-----BEGIN CERTIFICATE-----\nMAA=\n-----END CERTIFICATE-----"),
            None
        );
    }
}
