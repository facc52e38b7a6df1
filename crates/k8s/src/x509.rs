//! What multus reads of X.509 (RFC 5280) and PKCS #10 (RFC 2986), from PEM: a certificate's
//! validity, and a signing request's subject. The DER is walked to those fields, no further.

use base64::Engine as _;

/// A certificate's `notBefore` and `notAfter`, in Unix seconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Validity {
    pub not_before: i64,
    pub not_after: i64,
}

/// The validity of the first certificate in `pem`.
pub fn validity(pem: &str) -> Option<Validity> {
    let der = pem_block(pem, "CERTIFICATE")?;
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
    let (rest, not_before) = any_time(validity)?;
    let (_, not_after) = any_time(rest)?;
    Some(Validity {
        not_before,
        not_after,
    })
}

/// The names a certificate signing request asks for: its subject's common name and
/// organizations, in order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Subject {
    pub common_name: Option<String>,
    pub organizations: Vec<String>,
}

const COMMON_NAME: &[u8] = &[0x55, 0x04, 0x03];
const ORGANIZATION: &[u8] = &[0x55, 0x04, 0x0a];

/// The subject of the first certificate signing request in `pem`. A subject with a second
/// common name is refused: which one counts would be a guess.
pub fn request_subject(pem: &str) -> Option<Subject> {
    let der = pem_block(pem, "CERTIFICATE REQUEST")?;
    let (_, request) = element(&der, 0x30)?;
    let (_, info) = element(request, 0x30)?;
    let (rest, _version) = element(info, 0x02)?;
    let (_, mut name) = element(rest, 0x30)?;
    let mut subject = Subject::default();
    while !name.is_empty() {
        let (after, mut set) = element(name, 0x31)?;
        name = after;
        while !set.is_empty() {
            let (after, attribute) = element(set, 0x30)?;
            set = after;
            let (rest, oid) = element(attribute, 0x06)?;
            let tag = *rest.first()?;
            let (_, value) = element(rest, tag)?;
            // UTF8String, PrintableString or IA5String.
            if ![0x0c, 0x13, 0x16].contains(&tag) {
                continue;
            }
            let value = std::str::from_utf8(value).ok()?.to_owned();
            if oid == COMMON_NAME {
                if subject.common_name.replace(value).is_some() {
                    return None;
                }
            } else if oid == ORGANIZATION {
                subject.organizations.push(value);
            }
        }
    }
    Some(subject)
}

/// The DER of the first PEM block labelled `label`.
fn pem_block(pem: &str, label: &str) -> Option<Vec<u8>> {
    let body: String = pem
        .split(&format!("-----BEGIN {label}-----"))
        .nth(1)?
        .split(&format!("-----END {label}-----"))
        .next()?
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect();
    base64::engine::general_purpose::STANDARD.decode(body).ok()
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
        assert_eq!(validity(&pem).map(|v| v.not_after), Some(1_935_792_000));
    }

    #[test]
    fn dates_count_from_1970() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        assert_eq!(days_from_civil(2026, 12, 4), 20_791);
    }

    #[test]
    fn what_is_not_a_certificate_has_no_expiry() {
        assert_eq!(validity("no pem here"), None);
        assert_eq!(
            validity("-----BEGIN CERTIFICATE-----\nMAA=\n-----END CERTIFICATE-----"),
            None
        );
    }

    #[test]
    fn a_requests_subject_is_read_as_made() {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        let name = &mut params.distinguished_name;
        name.push(rcgen::DnType::CommonName, "system:multus:node-1");
        name.push(rcgen::DnType::OrganizationName, "system:multus");
        let pem = params.serialize_request(&key).unwrap().pem().unwrap();
        assert_eq!(
            request_subject(&pem),
            Some(Subject {
                common_name: Some("system:multus:node-1".into()),
                organizations: vec!["system:multus".into()],
            })
        );
        // A certificate is not a request, and a request is not a certificate.
        let certificate = params.self_signed(&key).unwrap().pem();
        assert_eq!(request_subject(&certificate), None);
        assert_eq!(validity(&pem), None);
    }
}
