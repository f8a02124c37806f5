//! The Standard Webhooks signature: `v1,` + base64 (standard, padded) of HMAC-SHA256 over
//! `id.timestamp.body`, with the raw bytes of the endpoint's secret as the key; secrets are shown
//! as `whsec_` + base64 of those bytes.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use ring::hmac;

/// A secret as receivers configure it.
pub fn whsec(raw: &[u8]) -> String {
    format!("whsec_{}", STANDARD.encode(raw))
}

/// One `v1,` signature of a call.
pub fn sign(raw_key: &[u8], id: &str, timestamp: i64, body: &[u8]) -> String {
    let key = hmac::Key::new(hmac::HMAC_SHA256, raw_key);
    let mut ctx = hmac::Context::with_key(&key);
    ctx.update(id.as_bytes());
    ctx.update(b".");
    ctx.update(timestamp.to_string().as_bytes());
    ctx.update(b".");
    ctx.update(body);
    format!("v1,{}", STANDARD.encode(ctx.sign().as_ref()))
}

/// The `webhook-signature` header: a signature per key (the current one first), space-separated.
pub fn signature_header(keys: &[Vec<u8>], id: &str, timestamp: i64, body: &[u8]) -> String {
    keys.iter()
        .map(|k| sign(k, id, timestamp, body))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signs_as_the_standard_webhooks_example() {
        // The specification's example: secret, id, timestamp, body and signature.
        let raw = STANDARD.decode("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let body = br#"{"test": 2432232314}"#;
        assert_eq!(
            sign(&raw, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
        assert_eq!(whsec(&raw), "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw");
        let two = signature_header(&[raw.clone(), raw], "m", 1, b"");
        assert_eq!(two.split(' ').count(), 2);
    }
}
