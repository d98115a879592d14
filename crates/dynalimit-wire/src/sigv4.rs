//! AWS Signature Version 4 for the fast path's one request shape: `POST /` with a JSON body
//! and the headers `content-type`, `host`, `x-amz-date`, `x-amz-security-token` (temporary
//! credentials only) and `x-amz-target`.
//!
//! The key derivation and the final signature are the maintained `aws-sigv4` crate's
//! ([`v4::generate_signing_key`], [`v4::calculate_signature`]); this module only writes the
//! canonical request of the one shape. The signing key depends only on the secret, the UTC
//! day, the region and the service, so it is derived once per day and credential and reused; a
//! request then costs two SHA-256 digests and one HMAC.

use std::fmt::Write as _;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_sigv4::sign::v4;
use sha2::{Digest, Sha256};

/// The JSON protocol's content type, a signed header.
pub(crate) const CONTENT_TYPE: &str = "application/x-amz-json-1.0";

/// The signature's inputs besides the credentials.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Request<'a> {
    /// `Host` header value (`host` or `host:port`).
    pub(crate) host: &'a str,
    /// `X-Amz-Target` header value.
    pub(crate) target: &'a str,
    /// The body.
    pub(crate) body: &'a [u8],
}

/// The `x-amz-date` stamp (`20261122T061502Z`) and the day (`20261122`) of an instant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Stamp {
    /// `YYYYMMDDTHHMMSSZ`.
    pub(crate) amz_date: String,
    /// `YYYYMMDD`.
    pub(crate) day: String,
    /// The instant itself.
    pub(crate) time: SystemTime,
}

impl Stamp {
    /// The stamp of `epoch_millis` (UTC).
    pub(crate) fn at(epoch_millis: i64) -> Stamp {
        let t = dynalimit_core::time::utc_datetime(epoch_millis);
        let day = format!("{:04}{:02}{:02}", t.year(), t.month(), t.day());
        let amz_date = format!("{day}T{:02}{:02}{:02}Z", t.hour(), t.minute(), t.second());
        let time = if epoch_millis >= 0 {
            UNIX_EPOCH + Duration::from_millis(epoch_millis.unsigned_abs())
        } else {
            UNIX_EPOCH - Duration::from_millis(epoch_millis.unsigned_abs())
        };
        Stamp {
            amz_date,
            day,
            time,
        }
    }
}

/// The derived signing key of one secret, day, region and service.
#[derive(Clone)]
pub(crate) struct SigningKey {
    key: Vec<u8>,
    /// `day/region/service/aws4_request`.
    scope: String,
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningKey")
            .field("scope", &self.scope)
            .finish_non_exhaustive()
    }
}

impl SigningKey {
    /// Derives the key of the day of `stamp`.
    pub(crate) fn derive(secret: &str, stamp: &Stamp, region: &str, service: &str) -> SigningKey {
        let key = v4::generate_signing_key(secret, stamp.time, region, service);
        SigningKey {
            key: key.as_ref().to_vec(),
            scope: format!("{}/{region}/{service}/aws4_request", stamp.day),
        }
    }

    /// Whether the key was derived for `day`.
    pub(crate) fn is_for_day(&self, day: &str) -> bool {
        self.scope.starts_with(day) && self.scope.as_bytes().get(day.len()) == Some(&b'/')
    }

    /// The `Authorization` header of `request` sent at `amz_date` with access key
    /// `access_key_id` (and `session_token` for temporary credentials).
    pub(crate) fn authorization(
        &self,
        access_key_id: &str,
        session_token: Option<&str>,
        amz_date: &str,
        request: &Request<'_>,
    ) -> String {
        let signed_headers = if session_token.is_some() {
            "content-type;host;x-amz-date;x-amz-security-token;x-amz-target"
        } else {
            "content-type;host;x-amz-date;x-amz-target"
        };
        let mut canonical = String::with_capacity(512);
        canonical.push_str("POST\n/\n\ncontent-type:");
        canonical.push_str(CONTENT_TYPE);
        let _ = write!(
            canonical,
            "\nhost:{}\nx-amz-date:{amz_date}\n",
            request.host
        );
        if let Some(token) = session_token {
            let _ = writeln!(canonical, "x-amz-security-token:{token}");
        }
        let _ = write!(
            canonical,
            "x-amz-target:{}\n\n{signed_headers}\n{}",
            request.target,
            hex::encode(Sha256::digest(request.body))
        );
        let string_to_sign = format!(
            "AWS4-HMAC-SHA256\n{amz_date}\n{}\n{}",
            self.scope,
            hex::encode(Sha256::digest(canonical.as_bytes()))
        );
        let signature = v4::calculate_signature(&self.key, string_to_sign.as_bytes());
        format!(
            "AWS4-HMAC-SHA256 Credential={access_key_id}/{}, SignedHeaders={signed_headers}, Signature={signature}",
            self.scope
        )
    }
}

#[cfg(test)]
mod tests {
    use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign};
    use proptest::prelude::*;

    use super::*;

    /// The reference signer of the AWS SDK for the same request.
    fn reference(
        akid: &str,
        secret: &str,
        token: Option<&str>,
        millis: i64,
        region: &str,
        request: &Request<'_>,
    ) -> String {
        let stamp = Stamp::at(millis);
        let identity = aws_credential_types::Credentials::new(
            akid,
            secret,
            token.map(str::to_string),
            None,
            "test",
        )
        .into();
        let params = v4::SigningParams::builder()
            .identity(&identity)
            .region(region)
            .name("dynamodb")
            .time(stamp.time)
            .settings(SigningSettings::default())
            .build()
            .unwrap()
            .into();
        let headers = [
            ("content-type", CONTENT_TYPE),
            ("host", request.host),
            ("x-amz-date", stamp.amz_date.as_str()),
            ("x-amz-target", request.target),
        ];
        let signable = SignableRequest::new(
            "POST",
            format!("http://{}/", request.host),
            headers.into_iter(),
            SignableBody::Bytes(request.body),
        )
        .unwrap();
        let (instructions, _) = sign(signable, &params).unwrap().into_parts();
        let (headers, _) = instructions.into_parts();
        headers
            .iter()
            .find(|h| h.name() == "authorization")
            .map(|h| h.value().to_string())
            .unwrap()
    }

    #[test]
    fn stamps_are_utc_calendar_dates() {
        assert_eq!(Stamp::at(0).amz_date, "19700101T000000Z");
        assert_eq!(Stamp::at(951_782_400_000).day, "20000229");
        let s = Stamp::at(1_795_327_199_999);
        assert_eq!(s.amz_date, "20261122T055959Z");
        assert_eq!(s.day, "20261122");
    }

    #[test]
    fn a_key_knows_its_day() {
        let key = SigningKey::derive("s", &Stamp::at(1_795_327_199_999), "us-east-1", "dynamodb");
        assert!(key.is_for_day("20261122"));
        assert!(!key.is_for_day("20261123"));
        assert!(!key.is_for_day("2026112"));
    }

    #[test]
    fn signatures_match_the_sdk_signer_with_and_without_session_token() {
        let body = br#"{"TableName":"t","Key":{"PK":{"S":"a"}}}"#;
        for token in [None, Some("FwoGZXIvYXdzEJr//token+/=")] {
            let request = Request {
                host: "dynamodb.eu-west-1.amazonaws.com",
                target: "DynamoDB_20120810.UpdateItem",
                body,
            };
            let millis = 1_795_327_199_123;
            let stamp = Stamp::at(millis);
            let key = SigningKey::derive("wJalrXUtnFEMI/K7MDENG", &stamp, "eu-west-1", "dynamodb");
            let ours = key.authorization("AKIDEXAMPLE", token, &stamp.amz_date, &request);
            let theirs = reference(
                "AKIDEXAMPLE",
                "wJalrXUtnFEMI/K7MDENG",
                token,
                millis,
                "eu-west-1",
                &request,
            );
            assert_eq!(ours, theirs, "session token {token:?}");
        }
    }

    proptest! {
        #[test]
        fn any_body_host_and_instant_sign_like_the_sdk(
            body in proptest::collection::vec(any::<u8>(), 0..300),
            port in 1u16..,
            millis in 0i64..4_102_444_800_000,
        ) {
            let host = format!("127.0.0.1:{port}");
            let request = Request { host: &host, target: "DynamoDB_20120810.GetItem", body: &body };
            let stamp = Stamp::at(millis);
            let key = SigningKey::derive("secret", &stamp, "us-east-1", "dynamodb");
            let ours = key.authorization("AKID", None, &stamp.amz_date, &request);
            prop_assert_eq!(ours, reference("AKID", "secret", None, millis, "us-east-1", &request));
        }
    }
}
