//! Standard Webhooks signatures (<https://www.standardwebhooks.com>): a delivery's
//! `webhook-signature` is `v1,` + base64 of HMAC-SHA256 over `<webhook-id>.<webhook-timestamp>.
//! <body>`, keyed with the secret's bytes (base64 after `whsec_`); one signature per key,
//! space-separated, while a key is rotated.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The keys of one endpoint.
#[derive(Clone)]
pub struct Signer {
    keys: Vec<Vec<u8>>,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Signer({} keys)", self.keys.len())
    }
}

impl Signer {
    /// The keys of `secrets` (`whsec_` + base64); an error names what is wrong with one (never
    /// the secret itself).
    pub fn new<'a>(secrets: impl IntoIterator<Item = &'a str>) -> Result<Signer, String> {
        let mut keys = Vec::new();
        for (i, secret) in secrets.into_iter().enumerate() {
            let encoded = secret
                .strip_prefix("whsec_")
                .ok_or_else(|| format!("secret {} does not start with `whsec_`", i + 1))?;
            let key = STANDARD
                .decode(encoded)
                .map_err(|_| format!("secret {} is not base64 after `whsec_`", i + 1))?;
            if key.len() < 16 {
                return Err(format!("secret {} is shorter than 16 bytes", i + 1));
            }
            keys.push(key);
        }
        if keys.is_empty() {
            return Err("no secret: set `secret` (or `secrets`) to a `whsec_…` key".into());
        }
        Ok(Signer { keys })
    }

    /// A new random secret, `whsec_` + base64 of 24 random bytes.
    pub fn generate_secret() -> String {
        let bytes: [u8; 24] = rand::random();
        format!("whsec_{}", STANDARD.encode(bytes))
    }

    /// The `webhook-signature` header of a delivery.
    pub fn sign(&self, id: &str, timestamp: i64, body: &str) -> String {
        self.keys
            .iter()
            .map(|key| {
                // A key of any length is a valid HMAC key.
                let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key)
                    .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
                mac.update(format!("{id}.{timestamp}.{body}").as_bytes());
                format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
            })
            .collect::<Vec<_>>()
            .join(" ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example of the Standard Webhooks specification and reference libraries.
    #[test]
    fn signs_the_specifications_example() {
        let signer = Signer::new(["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]).unwrap();
        assert_eq!(
            signer.sign(
                "msg_p5jXN8AQM9LWM0D4loKWxJek",
                1614265330,
                r#"{"test": 2432232314}"#
            ),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
    }

    #[test]
    fn two_keys_sign_twice_and_bad_secrets_are_named() {
        let one = Signer::generate_secret();
        let two = Signer::generate_secret();
        let both = Signer::new([one.as_str(), two.as_str()]).unwrap();
        let signature = both.sign("msg_1", 1, "{}");
        let parts: Vec<&str> = signature.split(' ').collect();
        assert_eq!(parts.len(), 2);
        assert_eq!(
            parts[0],
            Signer::new([one.as_str()]).unwrap().sign("msg_1", 1, "{}")
        );
        assert_eq!(
            parts[1],
            Signer::new([two.as_str()]).unwrap().sign("msg_1", 1, "{}")
        );
        assert_ne!(parts[0], parts[1]);
        for (bad, why) in [
            ("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "does not start"),
            ("whsec_!!!", "not base64"),
            ("whsec_c2hvcnQ=", "shorter than 16"),
        ] {
            let err = Signer::new([bad]).unwrap_err();
            assert!(err.contains(why), "{err}");
            assert!(!err.contains(bad), "the secret is not repeated: {err}");
        }
        assert!(Signer::new([]).is_err());
    }
}
