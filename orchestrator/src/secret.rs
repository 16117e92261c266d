//! Random secrets and their digests: what API keys, authorization codes and OAuth tokens are
//! made of, and the SHA-256 the store keeps instead of them. No IO; a leaf of the module tree.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use rand::RngCore;
use sha2::{Digest, Sha256};

/// `N` random bytes from the thread's CSPRNG.
pub fn random<const N: usize>() -> [u8; N] {
    let mut bytes = [0; N];
    rand::thread_rng().fill_bytes(&mut bytes);
    bytes
}

/// `prefix` and 256 random bits, base64url: 43 characters after the prefix.
pub fn token(prefix: &str) -> String {
    format!("{prefix}{}", URL_SAFE_NO_PAD.encode(random::<32>()))
}

/// Lowercase hex.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The SHA-256 of `text`, lowercase hex: what the store keeps of a secret.
pub fn sha256_hex(text: &str) -> String {
    hex(&Sha256::digest(text.as_bytes()))
}

#[cfg(test)]
mod tests {
    #[test]
    fn tokens_are_long_random_and_prefixed() {
        let (a, b) = (super::token("hk_"), super::token("hk_"));
        assert!(a.starts_with("hk_") && a.len() == 46, "{a}");
        assert_ne!(a, b);
        assert_eq!(
            super::sha256_hex("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
