//! The server's secret key: 32 bytes that seal the endpoints' signing secrets (AES-256-GCM).
//!
//! From `KICKOFF_SECRET_KEY` (base64 of 32 bytes; every node sharing a database needs the same),
//! else from `secret.key` in the data directory, made on the first start (0600, like the bootstrap
//! token). Its id (the start of its SHA-256) is stored beside each sealed secret, so a node with
//! another key refuses to sign, and says why, instead of signing with garbage.

use std::path::Path;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use password_hash::rand_core::{OsRng, RngCore};
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM, NONCE_LEN};
use sha2::{Digest, Sha256};

/// The file in the data directory that holds the key when `KICKOFF_SECRET_KEY` is not set.
pub const KEY_FILE: &str = "secret.key";

pub struct SecretKey {
    key: LessSafeKey,
    id: String,
    /// For tags (see [`SecretKey::tag`]): a key of its own, derived from the raw key, so that no
    /// tag says anything about the sealing key.
    mac: ring::hmac::Key,
}

impl std::fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SecretKey({})", self.id)
    }
}

/// Where the key came from.
#[derive(Debug, Clone, PartialEq)]
pub enum KeySource {
    Configured,
    Kept,
    Created,
}

impl SecretKey {
    /// The key of 32 raw bytes.
    pub fn from_bytes(raw: &[u8]) -> Result<Self, String> {
        if raw.len() != 32 {
            return Err(format!("a secret key is 32 bytes, not {}", raw.len()));
        }
        let unbound = UnboundKey::new(&AES_256_GCM, raw).map_err(|_| "not a key".to_string())?;
        let digest = Sha256::digest(raw);
        let id = digest[..6].iter().map(|b| format!("{b:02x}")).collect();
        let mac = Sha256::new()
            .chain_update(b"kickoff tag key\0")
            .chain_update(raw)
            .finalize();
        Ok(SecretKey {
            key: LessSafeKey::new(unbound),
            id,
            mac: ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &mac),
        })
    }

    /// The key written as base64 (as in `KICKOFF_SECRET_KEY`).
    pub fn from_base64(text: &str) -> Result<Self, String> {
        let raw = STANDARD.decode(text.trim()).map_err(|_| {
            "KICKOFF_SECRET_KEY: not base64 (make one with `openssl rand -base64 32`)".to_string()
        })?;
        SecretKey::from_bytes(&raw).map_err(|e| format!("KICKOFF_SECRET_KEY: {e}"))
    }

    /// A new random key.
    pub fn generate() -> (Self, String) {
        let mut raw = [0u8; 32];
        OsRng.fill_bytes(&mut raw);
        let text = STANDARD.encode(raw);
        (SecretKey::from_bytes(&raw).expect("32 bytes"), text)
    }

    /// `configured` (KICKOFF_SECRET_KEY) if given, else the data directory's key file, made now
    /// if there is none.
    pub fn open(configured: Option<&str>, data_dir: &Path) -> Result<(Self, KeySource), String> {
        if let Some(text) = configured {
            return Ok((SecretKey::from_base64(text)?, KeySource::Configured));
        }
        let dir = crate::data_dir::prepare(data_dir).map_err(|e| e.to_string())?;
        let path = dir.join(KEY_FILE);
        if let Some(text) = crate::data_dir::read_private(&path).map_err(|e| e.to_string())? {
            let key =
                SecretKey::from_base64(&text).map_err(|e| format!("{}: {e}", path.display()))?;
            return Ok((key, KeySource::Kept));
        }
        // Written whole beside it, then linked into place, which fails if another process made
        // one meanwhile (several nodes starting on one data directory): then that one is used.
        let (key, text) = SecretKey::generate();
        let tmp = path.with_extension(format!("new-{}", crate::accounts::secret::random_hex(4)));
        crate::data_dir::create_private(&tmp, &format!("{text}\n")).map_err(|e| e.to_string())?;
        let linked = std::fs::hard_link(&tmp, &path);
        let _ = std::fs::remove_file(&tmp);
        match linked {
            Ok(()) => Ok((key, KeySource::Created)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                let text = crate::data_dir::read_private(&path)
                    .map_err(|e| e.to_string())?
                    .ok_or_else(|| format!("{}: vanished", path.display()))?;
                let key = SecretKey::from_base64(&text)
                    .map_err(|e| format!("{}: {e}", path.display()))?;
                Ok((key, KeySource::Kept))
            }
            Err(e) => Err(format!("{}: {e}", path.display())),
        }
    }

    /// A tag of `data` for `purpose` (HMAC-SHA256, hex): the same on every node holding this key,
    /// made by no one without it.
    pub fn tag(&self, purpose: &str, data: &[u8]) -> String {
        let mut ctx = ring::hmac::Context::with_key(&self.mac);
        ctx.update(purpose.as_bytes());
        ctx.update(b"\0");
        ctx.update(data);
        ctx.sign()
            .as_ref()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    /// The key's id, stored beside what it seals.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// `plain` sealed and bound to `context` (associated data: the row and field it is kept in,
    /// see [`endpoint_context`]): a random nonce, then the ciphertext and its tag. It opens only
    /// with the same key and the same context, so a sealed value copied into another row or field
    /// does not open.
    pub fn seal_bound(&self, plain: &[u8], context: &str) -> Vec<u8> {
        let mut nonce = [0u8; NONCE_LEN];
        OsRng.fill_bytes(&mut nonce);
        let mut out = plain.to_vec();
        self.key
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(context.as_bytes()),
                &mut out,
            )
            .expect("sealing a short secret");
        let mut sealed = nonce.to_vec();
        sealed.extend_from_slice(&out);
        sealed
    }

    /// What [`Self::seal_bound`] sealed for `context`; an error when it was sealed with another
    /// key or for another context, or changed.
    pub fn unseal_bound(&self, sealed: &[u8], context: &str) -> Result<Vec<u8>, String> {
        self.open_sealed(sealed, Aad::from(context.as_bytes()))
    }

    /// A value sealed before values were bound to where they are kept (no associated data): read
    /// once, by the start that binds it (`service::Endpoints::bind_sealed`).
    pub fn unseal_unbound(&self, sealed: &[u8]) -> Result<Vec<u8>, String> {
        self.open_sealed(sealed, Aad::from(&[][..]))
    }

    fn open_sealed(&self, sealed: &[u8], aad: Aad<&[u8]>) -> Result<Vec<u8>, String> {
        if sealed.len() < NONCE_LEN {
            return Err("a sealed secret is too short".into());
        }
        let (nonce, rest) = sealed.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| "bad nonce".to_string())?;
        let mut buf = rest.to_vec();
        let plain = self.key.open_in_place(nonce, aad, &mut buf).map_err(|_| {
            "the sealed secret does not open with this key for this endpoint".to_string()
        })?;
        Ok(plain.to_vec())
    }

    /// [`Self::seal_bound`] without a context: only to make values as they were sealed before
    /// binding (tests of the binding start).
    pub fn seal_unbound(&self, plain: &[u8]) -> Vec<u8> {
        let mut nonce = [0u8; NONCE_LEN];
        OsRng.fill_bytes(&mut nonce);
        let mut out = plain.to_vec();
        self.key
            .seal_in_place_append_tag(Nonce::assume_unique_for_key(nonce), Aad::empty(), &mut out)
            .expect("sealing a short secret");
        let mut sealed = nonce.to_vec();
        sealed.extend_from_slice(&out);
        sealed
    }
}

/// What a sealed value of an endpoint is bound to: the endpoint and the field. A previous secret
/// keeps the context of the secret it was (a rotation moves the sealed bytes as they are).
pub fn endpoint_context(endpoint_id: i64, field: SealedField) -> String {
    let field = match field {
        SealedField::Secret => "secret",
        SealedField::Headers => "headers",
    };
    format!("kickoff webhook endpoint {endpoint_id} {field}")
}

/// The sealed fields of an endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SealedField {
    Secret,
    Headers,
}

#[cfg(test)]
mod tests {
    use super::{endpoint_context, SealedField, SecretKey};

    #[test]
    fn sealed_secrets_open_only_with_their_key() {
        let (key, text) = SecretKey::generate();
        let here = endpoint_context(1, SealedField::Secret);
        let sealed = key.seal_bound(b"a signing secret", &here);
        assert_ne!(&sealed[12..28], b"a signing secret");
        assert_eq!(
            key.unseal_bound(&sealed, &here).unwrap(),
            b"a signing secret"
        );
        let again = SecretKey::from_base64(&text).unwrap();
        assert_eq!(again.id(), key.id());
        assert_eq!(
            again.unseal_bound(&sealed, &here).unwrap(),
            b"a signing secret"
        );
        let (other, _) = SecretKey::generate();
        assert_ne!(other.id(), key.id());
        assert!(other.unseal_bound(&sealed, &here).is_err());
        let mut changed = sealed.clone();
        changed[20] ^= 1;
        assert!(key.unseal_bound(&changed, &here).is_err());
        assert!(SecretKey::from_base64("c2hvcnQ=").is_err());
    }

    #[test]
    fn a_sealed_value_opens_only_in_its_endpoint_and_field() {
        let (key, _) = SecretKey::generate();
        let sealed = key.seal_bound(b"Bearer t", &endpoint_context(1, SealedField::Headers));
        assert!(key
            .unseal_bound(&sealed, &endpoint_context(2, SealedField::Headers))
            .is_err());
        assert!(key
            .unseal_bound(&sealed, &endpoint_context(1, SealedField::Secret))
            .is_err());
        assert!(key.unseal_unbound(&sealed).is_err());
        let legacy = key.seal_unbound(b"old");
        assert_eq!(key.unseal_unbound(&legacy).unwrap(), b"old");
        assert!(key
            .unseal_bound(&legacy, &endpoint_context(1, SealedField::Secret))
            .is_err());
    }
}
