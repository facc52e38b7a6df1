//! The self-made certificate's life, kept in a Secret that every replica shares, and the
//! webhook configuration's caBundle kept trusting it.
//!
//! A renewal never leaves the API server distrusting the certificate a replica serves: the
//! next certificate is written beside the current one and added to the caBundle first, and is
//! served only once it has been in the caBundle for two rounds (every replica has seen it by
//! then). The one it replaces stays in the caBundle until it expires. Every write is
//! conditional on the version read, so replicas racing one another lose a round, not a
//! certificate.

use std::time::Duration;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use k8s::{Created, K8sError, KubeClient, Resource, Written};
use serde_json::{json, Map, Value};

use super::certificate::{self, now, CertError, Pair};

const SECRETS: Resource = Resource {
    group: "",
    version: "v1",
    plural: "secrets",
};

const WEBHOOK_CONFIGURATIONS: Resource = Resource {
    group: "admissionregistration.k8s.io",
    version: "v1",
    plural: "validatingwebhookconfigurations",
};

#[derive(Debug, thiserror::Error)]
pub enum KeepError {
    #[error(transparent)]
    Api(#[from] K8sError),
    #[error(transparent)]
    Certificate(#[from] CertError),
    #[error(
        "the ValidatingWebhookConfiguration {0} does not exist (yet): its caBundle cannot be kept"
    )]
    NoConfiguration(String),
    #[error("another replica wrote {0} first: the next round reads it again")]
    Raced(&'static str),
}

/// What the Secret holds.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Stored {
    /// Served.
    current: Pair,
    /// Trusted, and served once it has been trusted long enough: the pair and when it was
    /// written (Unix seconds).
    next: Option<(Pair, u64)>,
    /// Served before `current`: trusted until it expires.
    previous: Option<(String, u64)>,
}

impl Stored {
    fn from_secret(secret: &Value) -> Option<Stored> {
        let data = secret.get("data")?.as_object()?;
        let text = |key: &str| -> Option<String> {
            let bytes = STANDARD.decode(data.get(key)?.as_str()?).ok()?;
            String::from_utf8(bytes).ok()
        };
        let number = |key: &str| text(key)?.trim().parse::<u64>().ok();
        let pair = |prefix: &str| {
            Some(Pair {
                cert: text(&format!("{prefix}.crt"))?,
                key: text(&format!("{prefix}.key"))?,
                expires: number(&format!("{prefix}.expires"))?,
            })
        };
        Some(Stored {
            current: pair("tls")?,
            next: pair("next").zip(number("next.since")),
            previous: text("previous.crt").zip(number("previous.expires")),
        })
    }

    fn data(&self) -> Map<String, Value> {
        let mut data = Map::new();
        let mut put = |key: &str, value: &str| {
            data.insert(key.to_owned(), STANDARD.encode(value).into());
        };
        put("tls.crt", &self.current.cert);
        put("tls.key", &self.current.key);
        put("tls.expires", &self.current.expires.to_string());
        if let Some((next, since)) = &self.next {
            put("next.crt", &next.cert);
            put("next.key", &next.key);
            put("next.expires", &next.expires.to_string());
            put("next.since", &since.to_string());
        }
        if let Some((cert, expires)) = &self.previous {
            put("previous.crt", cert);
            put("previous.expires", &expires.to_string());
        }
        data
    }

    /// Every certificate the API server should trust: the unexpired ones.
    fn bundle(&self, at: u64) -> String {
        let mut bundle = self.current.cert.clone();
        if let Some((next, _)) = &self.next {
            bundle.push_str(&next.cert);
        }
        if let Some((cert, expires)) = &self.previous {
            if *expires > at {
                bundle.push_str(cert);
            }
        }
        bundle
    }
}

/// Where the certificate lives and how long it lasts.
pub struct Keeper {
    pub client: KubeClient,
    pub namespace: String,
    pub secret: String,
    pub configuration: String,
    pub dns_names: Vec<String>,
    pub lifetime: Duration,
    /// How often a round runs: a next certificate is served two rounds after it is trusted.
    pub interval: Duration,
}

impl Keeper {
    /// One round: the Secret made, renewed or promoted as its time has come, and the caBundle
    /// brought up to date. Returns the pair to serve.
    pub fn round(&self) -> Result<Pair, KeepError> {
        let (stored, version) = self.read_or_create()?;
        let at = now();
        let trusted_next = self.sync_bundle(&stored, at)?;
        let want = self.advance(&stored, at, trusted_next)?;
        if want == stored {
            return Ok(stored.current);
        }
        self.write(&want, version.as_deref())?;
        self.sync_bundle(&want, at)?;
        Ok(want.current)
    }

    /// The stored pairs as they should be now.
    fn advance(&self, stored: &Stored, at: u64, trusted_next: bool) -> Result<Stored, KeepError> {
        let mut want = stored.clone();
        want.previous = want.previous.filter(|(_, expires)| *expires > at);
        let renew_at = stored
            .current
            .expires
            .saturating_sub(self.lifetime.as_secs() / 3);
        match &stored.next {
            None if at >= renew_at => {
                want.next = Some((certificate::make(&self.dns_names, self.lifetime)?, at));
            }
            // Served once every replica has seen it trusted, or at once when the current one
            // has expired (a round that could not run in time).
            Some((next, since))
                if trusted_next
                    && (at >= since + 2 * self.interval.as_secs()
                        || at >= stored.current.expires) =>
            {
                want.previous = Some((stored.current.cert.clone(), stored.current.expires));
                want.current = next.clone();
                want.next = None;
            }
            _ => {}
        }
        Ok(want)
    }

    fn secret_object(&self, stored: &Stored, version: Option<&str>) -> Value {
        let mut metadata = json!({
            "name": self.secret,
            "namespace": self.namespace,
            "labels": {"app.kubernetes.io/name": "multus-admission"},
        });
        if let Some(v) = version {
            metadata["resourceVersion"] = v.into();
        }
        json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": metadata,
            "type": "Opaque",
            "data": stored.data(),
        })
    }

    /// The Secret's pairs and version; a missing, empty (as the manifests ship it) or
    /// unusable Secret gets a fresh pair.
    fn read_or_create(&self) -> Result<(Stored, Option<String>), KeepError> {
        let secret = self
            .client
            .get_object(SECRETS, &self.namespace, &self.secret)?;
        let version = secret
            .as_ref()
            .and_then(|s| s.pointer("/metadata/resourceVersion"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        // A pair that does not load (a key of another certificate, an edit by hand) is as
        // good as none: its certificate never goes into the caBundle.
        let usable = secret.as_ref().and_then(Stored::from_secret).filter(|s| {
            certificate::certified_key(s.current.cert.as_bytes(), s.current.key.as_bytes()).is_ok()
        });
        if let Some(stored) = usable {
            return Ok((stored, version));
        }
        let fresh = Stored {
            current: certificate::make(&self.dns_names, self.lifetime)?,
            next: None,
            previous: None,
        };
        match version {
            // There, but empty or unusable: written over, still conditionally.
            Some(v) => self.write(&fresh, Some(&v))?,
            None => {
                let object = self.secret_object(&fresh, None);
                match self
                    .client
                    .create_object(SECRETS, &self.namespace, &object)?
                {
                    Created::Created(_) => {}
                    Created::AlreadyExists => return Err(KeepError::Raced("the Secret")),
                }
            }
        }
        Ok((fresh, None))
    }

    fn write(&self, stored: &Stored, version: Option<&str>) -> Result<(), KeepError> {
        let object = self.secret_object(stored, version);
        match self
            .client
            .replace_object(SECRETS, &self.namespace, &self.secret, &object)?
        {
            Written::Done(_) => Ok(()),
            Written::Stale => Err(KeepError::Raced("the Secret")),
        }
    }

    /// Makes every webhook of the configuration trust exactly the stored certificates.
    /// Returns whether each one trusted the next certificate before this round.
    fn sync_bundle(&self, stored: &Stored, at: u64) -> Result<bool, KeepError> {
        let Some(config) = self
            .client
            .get_cluster_object(WEBHOOK_CONFIGURATIONS, &self.configuration)?
        else {
            return Err(KeepError::NoConfiguration(self.configuration.clone()));
        };
        let want = STANDARD.encode(stored.bundle(at));
        let next = stored.next.as_ref().map(|(p, _)| p.cert.as_str());
        let webhooks = config
            .get("webhooks")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let version = config
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let mut ops =
            vec![json!({"op": "test", "path": "/metadata/resourceVersion", "value": version})];
        let mut trusted_next = true;
        for (i, webhook) in webhooks.iter().enumerate() {
            let have = webhook
                .pointer("/clientConfig/caBundle")
                .and_then(Value::as_str)
                .unwrap_or_default();
            if let Some(next) = next {
                let trusted = STANDARD
                    .decode(have)
                    .ok()
                    .and_then(|b| String::from_utf8(b).ok())
                    .is_some_and(|b| b.contains(next));
                trusted_next &= trusted;
            }
            if have != want {
                ops.push(json!({"op": "add", "path": format!("/webhooks/{i}/clientConfig/caBundle"), "value": want}));
            }
        }
        if ops.len() > 1 {
            match self.client.json_patch_cluster_object(
                WEBHOOK_CONFIGURATIONS,
                &self.configuration,
                &Value::Array(ops),
            )? {
                Written::Done(_) => {}
                Written::Stale => return Err(KeepError::Raced("the caBundle")),
            }
        }
        Ok(trusted_next && next.is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(name: &str, expires: u64) -> Pair {
        Pair {
            cert: format!("-----{name} cert-----\n"),
            key: format!("{name} key"),
            expires,
        }
    }

    #[test]
    fn the_secret_holds_what_it_was_given() {
        let stored = Stored {
            current: pair("a", 100),
            next: Some((pair("b", 200), 50)),
            previous: Some(("old".into(), 90)),
        };
        let secret = json!({"data": stored.data()});
        assert_eq!(Stored::from_secret(&secret), Some(stored.clone()));
        assert_eq!(stored.bundle(80), "-----a cert-----\n-----b cert-----\nold");
        assert_eq!(stored.bundle(95), "-----a cert-----\n-----b cert-----\n");
        assert_eq!(
            Stored::from_secret(&json!({"data": {"tls.crt": "!!"}})),
            None
        );
    }
}
