//! Signed calls a partner makes to us: the Standard Webhooks signature checked as `signing` signs
//! ours, with the secret of the partner's endpoint (the one its calls are signed with), or the
//! previous one while a rotation's overlap lasts. A call is taken when one of its `v1,`
//! signatures matches (compared in constant time) and its `webhook-timestamp` is within
//! [`TOLERANCE_SECS`] of the database's clock (every node alike, whatever its own says); a replay inside that window is harmless to what it
//! carries (a workflow's signal: the first of a name stands).

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use ring::hmac;

/// How far a call's `webhook-timestamp` may be from this server's clock, either way (the
/// specification's and its libraries' default).
pub const TOLERANCE_SECS: i64 = 300;

/// The most characters of a `webhook-id` taken.
pub const MAX_ID_CHARS: usize = 256;

/// A call's signature headers and its body, as received.
#[derive(Debug, Clone, Copy)]
pub struct Signed<'a> {
    pub id: Option<&'a str>,
    pub timestamp: Option<&'a str>,
    pub signature: Option<&'a str>,
    pub body: &'a [u8],
}

/// Why a call is not taken as signed. The words name the header and the rule; never the secret
/// or the signature expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unsigned {
    #[error("the call has no `{0}` header (Standard Webhooks: webhook-id, webhook-timestamp, webhook-signature)")]
    Missing(&'static str),
    #[error("webhook-id: 1 to 256 characters")]
    BadId,
    #[error("webhook-timestamp: whole seconds since 1970 (UTC)")]
    BadTimestamp,
    #[error("webhook-timestamp: {0} s away from the server's clock, past the {TOLERANCE_SECS} s allowed (a replay, or a clock that is off)")]
    Stale(i64),
    #[error("webhook-signature: no `v1,` signature matches the endpoint's secret")]
    NoMatch,
    #[error("webhook endpoint {0} takes no signed calls here (none such, or its `signal_workflows` is empty)")]
    NotTaking(i64),
}

/// Whether `signed` is signed with one of `keys` (raw secrets) at a time within the tolerance of
/// `now` (seconds since 1970).
pub fn verify(keys: &[Vec<u8>], signed: &Signed<'_>, now: i64) -> Result<(), Unsigned> {
    let id = signed.id.ok_or(Unsigned::Missing("webhook-id"))?;
    let timestamp = signed
        .timestamp
        .ok_or(Unsigned::Missing("webhook-timestamp"))?;
    let signature = signed
        .signature
        .ok_or(Unsigned::Missing("webhook-signature"))?;
    if id.is_empty() || id.chars().count() > MAX_ID_CHARS {
        return Err(Unsigned::BadId);
    }
    let at: i64 = timestamp
        .trim()
        .parse()
        .map_err(|_| Unsigned::BadTimestamp)?;
    let off = now.saturating_sub(at);
    if off.saturating_abs() > TOLERANCE_SECS {
        return Err(Unsigned::Stale(off));
    }
    let mut message = Vec::with_capacity(id.len() + timestamp.len() + signed.body.len() + 2);
    message.extend_from_slice(id.as_bytes());
    message.push(b'.');
    message.extend_from_slice(at.to_string().as_bytes());
    message.push(b'.');
    message.extend_from_slice(signed.body);
    let tags: Vec<Vec<u8>> = signature
        .split(' ')
        .filter_map(|s| s.strip_prefix("v1,"))
        .filter_map(|b64| STANDARD.decode(b64).ok())
        .collect();
    let matches = keys.iter().any(|raw| {
        let key = hmac::Key::new(hmac::HMAC_SHA256, raw);
        tags.iter()
            .any(|tag| hmac::verify(&key, &message, tag).is_ok())
    });
    if matches {
        Ok(())
    } else {
        Err(Unsigned::NoMatch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::webhooks::signing::{sign, signature_header};

    const NOW: i64 = 1_700_000_000;

    fn call<'a>(signature: &'a str, body: &'a [u8], at: &'a str) -> Signed<'a> {
        Signed {
            id: Some("msg_1"),
            timestamp: Some(at),
            signature: Some(signature),
            body,
        }
    }

    #[test]
    fn a_call_signed_with_the_secret_or_the_previous_one_is_taken() {
        let (current, previous) = (vec![1u8; 32], vec![2u8; 32]);
        let body = br#"{"key":"game:1","name":"final"}"#;
        let at = NOW.to_string();
        let by_current = sign(&current, "msg_1", NOW, body);
        assert_eq!(
            verify(
                std::slice::from_ref(&current),
                &call(&by_current, body, &at),
                NOW
            ),
            Ok(())
        );
        // A sender signing with both during its own rotation: any one match is enough.
        let both = signature_header(&[vec![9u8; 32], previous.clone()], "msg_1", NOW, body);
        assert_eq!(
            verify(&[current, previous], &call(&both, body, &at), NOW),
            Ok(())
        );
    }

    #[test]
    fn a_changed_body_another_secret_or_a_stale_time_is_refused() {
        let key = vec![1u8; 32];
        let body = br#"{"name":"final"}"#;
        let at = NOW.to_string();
        let signature = sign(&key, "msg_1", NOW, body);
        let changed = br#"{"name":"final "}"#;
        assert_eq!(
            verify(
                std::slice::from_ref(&key),
                &call(&signature, changed, &at),
                NOW
            ),
            Err(Unsigned::NoMatch)
        );
        assert_eq!(
            verify(&[vec![3u8; 32]], &call(&signature, body, &at), NOW),
            Err(Unsigned::NoMatch)
        );
        assert_eq!(
            verify(
                std::slice::from_ref(&key),
                &call(&signature, body, &at),
                NOW + TOLERANCE_SECS + 1
            ),
            Err(Unsigned::Stale(TOLERANCE_SECS + 1))
        );
        assert_eq!(
            verify(
                std::slice::from_ref(&key),
                &call(&signature, body, &at),
                NOW + TOLERANCE_SECS
            ),
            Ok(())
        );
        assert_eq!(
            verify(
                std::slice::from_ref(&key),
                &call(&signature, body, "soon"),
                NOW
            ),
            Err(Unsigned::BadTimestamp)
        );
        let unsigned = Signed {
            signature: None,
            ..call(&signature, body, &at)
        };
        assert_eq!(
            verify(std::slice::from_ref(&key), &unsigned, NOW),
            Err(Unsigned::Missing("webhook-signature"))
        );
        // Not a v1 signature, or not base64: nothing matches, nothing panics.
        assert_eq!(
            verify(&[key], &call("v2,abc v1,%%%", body, &at), NOW),
            Err(Unsigned::NoMatch)
        );
    }
}
