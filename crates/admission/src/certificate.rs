//! The webhook's serving certificate: made here (self-signed, for the Service's DNS names), or
//! read from files another tool keeps (cert-manager), and swapped under the server while it
//! runs.

use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rcgen::{CertificateParams, DnType, ExtendedKeyUsagePurpose, KeyPair, KeyUsagePurpose};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

/// A certificate and its key, in PEM, and when the certificate expires (Unix seconds).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pair {
    pub cert: String,
    pub key: String,
    pub expires: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error("cannot make a certificate: {0}")]
    Make(#[from] rcgen::Error),
    #[error("the certificate {0}")]
    Load(String),
}

pub fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A self-signed server certificate for `dns_names`, valid from a minute ago (clocks differ)
/// for `lifetime`. It is its own CA: the webhook configuration's caBundle holds it.
pub fn make(dns_names: &[String], lifetime: Duration) -> Result<Pair, CertError> {
    let mut params = CertificateParams::new(dns_names.to_vec())?;
    params
        .distinguished_name
        .push(DnType::CommonName, "multus-rs admission webhook");
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
        KeyUsagePurpose::KeyCertSign,
    ];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let start = time::OffsetDateTime::now_utc() - time::Duration::minutes(1);
    let end = start + time::Duration::minutes(1) + lifetime;
    params.not_before = start;
    params.not_after = end;
    let key = KeyPair::generate()?;
    let cert = params.self_signed(&key)?;
    Ok(Pair {
        cert: cert.pem(),
        key: key.serialize_pem(),
        expires: u64::try_from(end.unix_timestamp()).unwrap_or(0),
    })
}

/// The certificate rustls serves, from PEM.
pub fn certified_key(cert_pem: &[u8], key_pem: &[u8]) -> Result<CertifiedKey, CertError> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| CertError::Load(format!("is not PEM: {e}")))?;
    if chain.is_empty() {
        return Err(CertError::Load("file holds no certificate".into()));
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem)
        .map_err(|e| CertError::Load(format!("key is not a PEM private key: {e}")))?;
    let provider = rustls::crypto::ring::default_provider();
    let signer = provider
        .key_provider
        .load_private_key(key)
        .map_err(|e| CertError::Load(format!("key cannot sign: {e}")))?;
    let certified = CertifiedKey::new(chain, signer);
    certified
        .keys_match()
        .map_err(|e| CertError::Load(format!("and its key do not belong together: {e}")))?;
    Ok(certified)
}

/// The certificate the server hands every handshake; replaced whole while connections run.
#[derive(Debug)]
pub struct Serving(RwLock<Arc<CertifiedKey>>);

impl Serving {
    pub fn new(key: CertifiedKey) -> Serving {
        Serving(RwLock::new(Arc::new(key)))
    }

    pub fn replace(&self, key: CertifiedKey) {
        if let Ok(mut current) = self.0.write() {
            *current = Arc::new(key);
        }
    }
}

impl ResolvesServerCert for Serving {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.0.read().ok().map(|k| Arc::clone(&k))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_made_certificate_loads_and_expires_when_it_says() {
        let pair = make(&["svc.ns.svc".into()], Duration::from_secs(3600)).unwrap();
        let left = pair.expires.saturating_sub(now());
        assert!((3590..=3610).contains(&left), "{left}");
        certified_key(pair.cert.as_bytes(), pair.key.as_bytes()).unwrap();
    }

    #[test]
    fn a_key_of_another_certificate_or_no_pem_is_refused() {
        let a = make(&["a".into()], Duration::from_secs(60)).unwrap();
        let b = make(&["b".into()], Duration::from_secs(60)).unwrap();
        let e = certified_key(a.cert.as_bytes(), b.key.as_bytes()).unwrap_err();
        assert!(e.to_string().contains("do not belong together"), "{e}");
        let e = certified_key(b"nothing", a.key.as_bytes()).unwrap_err();
        assert!(e.to_string().contains("no certificate"), "{e}");
    }
}
