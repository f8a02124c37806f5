//! The webhook endpoints page's server side (admins): make an endpoint (its secret in that
//! answer only), change its default headers and what it allows, rotate, delete; refused to
//! operators; audited without the secret or a header's value.

use axum::http::StatusCode;
use serde_json::Value;

use crate::common::dashboard::{dashboard_as, Dashboard};
use kickoff::accounts::Role;

async fn page(d: &Dashboard) -> Value {
    let (status, text) = d.server_fn("webhook_endpoints", "").await;
    assert_eq!(status, StatusCode::OK, "{text}");
    serde_json::from_str(&text).unwrap()
}

#[tokio::test]
async fn an_admin_makes_rotates_and_deletes_an_endpoint_and_sees_each_secret_once() {
    let d = dashboard_as(Role::Admin).await;
    assert_eq!(page(&d).await["endpoints"], serde_json::json!([]));
    let (status, text) = d
        .server_fn(
            "create_endpoint",
            "url_prefix=https%3A%2F%2Fpartner.example%2Fhooks%2F",
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let made: Value = serde_json::from_str(&text).unwrap();
    let secret = made["secret"].as_str().unwrap().to_string();
    assert!(secret.starts_with("whsec_"), "{made}");
    let id = made["id"].as_i64().unwrap();

    // The page lists it, never its secret; the page as rendered neither.
    let listed = page(&d).await;
    assert_eq!(
        listed["endpoints"][0]["url_prefix"],
        "https://partner.example/hooks/"
    );
    assert!(!listed.to_string().contains(&secret[6..]));
    let (status, html) = d.page("/webhooks").await;
    assert_eq!(status, StatusCode::OK);
    assert!(html.contains("https://partner.example/hooks/"), "{html}");
    assert!(!html.contains(&secret[6..]));

    // Bad input is refused with a reason and changes nothing.
    for (function, form) in [
        (
            "create_endpoint",
            "url_prefix=ftp%3A%2F%2Fx.example%2F".to_string(),
        ),
        (
            "create_endpoint",
            "url_prefix=https%3A%2F%2Fpartner.example%2Fhooks%2F".to_string(),
        ),
        ("rotate_endpoint", format!("id={id}&overlap_hours=soon")),
        ("rotate_endpoint", format!("id={id}&overlap_hours=500")),
        ("rotate_endpoint", "id=999999&overlap_hours=1".to_string()),
    ] {
        let (status, text) = d.server_fn(function, &form).await;
        assert!(
            status.is_client_error(),
            "{function} {form}: {status} {text}"
        );
    }
    assert_eq!(page(&d).await["endpoints"].as_array().unwrap().len(), 1);

    let (status, text) = d
        .server_fn("rotate_endpoint", &format!("id={id}&overlap_hours=1.5"))
        .await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let rotated: Value = serde_json::from_str(&text).unwrap();
    let second = rotated["secret"].as_str().unwrap().to_string();
    assert_ne!(second, secret);
    let listed = page(&d).await;
    let until = listed["endpoints"][0]["previous_until_ms"]
        .as_i64()
        .unwrap();
    let now = listed["now_ms"].as_i64().unwrap();
    assert!((until - now - 5_400_000).abs() < 60_000, "{listed}");

    // Audited, without a secret.
    let audit: Vec<String> = sqlx::query_scalar(
        "SELECT row_to_json(a)::text FROM audit_log a WHERE action LIKE 'webhook_endpoint.%'",
    )
    .fetch_all(&d.pool)
    .await
    .unwrap();
    assert!(audit.len() >= 2, "{audit:?}");
    for entry in &audit {
        assert!(
            !entry.contains(&secret[6..]) && !entry.contains(&second[6..]),
            "{entry}"
        );
    }

    let (status, text) = d.server_fn("delete_endpoint", &format!("id={id}")).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert_eq!(page(&d).await["endpoints"], serde_json::json!([]));
}

#[tokio::test]
async fn an_admin_gives_an_endpoint_default_headers_and_lets_it_allow_calls() {
    let d = dashboard_as(Role::Admin).await;
    // Checkboxes come as `on` when ticked; the headers one `Name: value` a line.
    let (status, text) = d
        .server_fn(
            "create_endpoint",
            "url_prefix=https%3A%2F%2Fpartner.example%2Fhooks%2F&allow_calls=on\
             &headers=Authorization%3A%20Bearer%20dash-cred-77%0AX-Team%3A%20blue",
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let id = serde_json::from_str::<Value>(&text).unwrap()["id"]
        .as_i64()
        .unwrap();
    let listed = page(&d).await;
    let endpoint = &listed["endpoints"][0];
    assert_eq!(
        endpoint["header_names"],
        serde_json::json!(["Authorization", "X-Team"])
    );
    assert_eq!(endpoint["allow_calls"], true);
    assert_eq!(endpoint["private_network"], false);
    let (_, html) = d.page("/webhooks").await;
    assert!(html.contains("Authorization"), "{html}");
    assert!(!html.contains("dash-cred-77") && !listed.to_string().contains("dash-cred-77"));

    // A change with the header field left empty keeps the headers; unticked boxes switch off.
    let (status, text) = d
        .server_fn("update_endpoint", &format!("id={id}&headers="))
        .await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let endpoint = page(&d).await["endpoints"][0].clone();
    assert_eq!(
        endpoint["header_names"],
        serde_json::json!(["Authorization", "X-Team"])
    );
    assert_eq!(endpoint["allow_calls"], false);

    // A bad line or a private network without calls: refused, by line number, nothing changed.
    for form in [
        format!("id={id}&headers=no-colon-dash-cred-88"),
        format!("id={id}&private_network=on"),
    ] {
        let (status, text) = d.server_fn("update_endpoint", &form).await;
        assert!(status.is_client_error(), "{form}: {status} {text}");
        assert!(!text.contains("dash-cred-88"), "{text}");
    }
    let (status, text) = d
        .server_fn(
            "update_endpoint",
            &format!("id={id}&allow_calls=on&private_network=on&clear_headers=on"),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let endpoint = page(&d).await["endpoints"][0].clone();
    assert_eq!(endpoint["header_names"], serde_json::json!([]));
    assert_eq!(endpoint["private_network"], true);

    // Audited by the headers' names and the settings, never a value.
    let audit: Vec<String> = sqlx::query_scalar(
        "SELECT target FROM audit_log WHERE action LIKE 'webhook_endpoint.%' ORDER BY id",
    )
    .fetch_all(&d.pool)
    .await
    .unwrap();
    assert!(
        audit[0].contains("allows calls") && audit[0].contains("headers Authorization, X-Team"),
        "{audit:?}"
    );
    assert!(audit.iter().all(|a| !a.contains("dash-cred")), "{audit:?}");
}

#[tokio::test]
async fn an_operator_may_not_see_or_change_endpoints() {
    let d = dashboard_as(Role::Operator).await;
    let (status, _) = d.server_fn("webhook_endpoints", "").await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _) = d
        .server_fn("create_endpoint", "url_prefix=https%3A%2F%2Fx.example%2F")
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _) = d.server_fn("update_endpoint", "id=1&allow_calls=on").await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let count: i64 = sqlx::query_scalar("SELECT count(*) FROM webhook_endpoints")
        .fetch_one(&d.pool)
        .await
        .unwrap();
    assert_eq!(count, 0);
}

/// Issue 30, point 12: the audit entry of a new endpoint names its prefix without the user info
/// or query a pasted URL may carry (whether the prefix was taken or refused).
#[tokio::test]
async fn the_audit_entry_of_a_new_endpoint_holds_no_credential_of_its_prefix() {
    let d = dashboard_as(Role::Admin).await;
    for prefix in [
        "https%3A%2F%2Fsvc%3Ahunter2%40partner.example%2Fhooks%2F",
        "https%3A%2F%2Fpartner.example%2Fhooks%2F%3Fapi_key%3Dhunter2",
    ] {
        let (status, text) = d
            .server_fn("create_endpoint", &format!("url_prefix={prefix}"))
            .await;
        assert!(
            status == StatusCode::OK || status.is_client_error(),
            "{status} {text}"
        );
    }
    let targets: Vec<Option<String>> = sqlx::query_scalar(
        "SELECT target FROM audit_log WHERE action = 'webhook_endpoint.create' ORDER BY id",
    )
    .fetch_all(&d.pool)
    .await
    .unwrap();
    assert_eq!(targets.len(), 2, "{targets:?}");
    for target in targets.iter().flatten() {
        assert!(!target.contains("hunter2"), "{target}");
        assert!(target.contains("partner.example"), "{target}");
    }
}
