//! Accounts: the signed-in operator (`Me`), signing in and out, the first admin's setup link,
//! the users page (admins), and one's own account page with its API tokens and password.

use leptos::prelude::*;
use serde::{Deserialize, Serialize};

#[cfg(feature = "ssr")]
use super::port::{fail, Refusal};

/// The server's implementation of this area (see `port::console`).
#[cfg(feature = "ssr")]
fn console() -> Result<std::sync::Arc<dyn AccountsConsole>, ServerFnError> {
    super::port::console()
}

/// The signed-in operator, as the pages need them: the server's request guard puts it in the
/// request; the browser reads it from the page's `<meta>` tags.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Me {
    pub name: String,
    /// `viewer`, `operator` or `admin`.
    pub role: String,
    /// The session's CSRF token, which every form posts back.
    pub csrf: String,
    /// Signed in by the application Kickoff is mounted in (its own sign-in: no sign-out here).
    #[serde(default)]
    pub by_application: bool,
}

impl Me {
    /// Whether the role may act on jobs, queues and questions (not only read).
    pub fn may_act(&self) -> bool {
        self.role != "viewer"
    }
}

/// The signed-in operator of this request (server) or page (browser).
pub fn current_me() -> Option<Me> {
    #[cfg(feature = "ssr")]
    {
        use_context::<http::request::Parts>().and_then(|p| p.extensions.get::<Me>().cloned())
    }
    #[cfg(all(feature = "hydrate", not(feature = "ssr")))]
    {
        let document = web_sys::window()?.document()?;
        let meta = |name: &str| -> Option<String> {
            document
                .query_selector(&format!("meta[name=\"{name}\"]"))
                .ok()
                .flatten()
                .and_then(|m| m.get_attribute("content"))
        };
        Some(Me {
            name: meta("kickoff-user")?,
            role: meta("kickoff-role")?,
            csrf: meta("csrf-token")?,
            by_application: meta("kickoff-signed-in-by").is_some(),
        })
    }
    #[cfg(not(any(feature = "ssr", feature = "hydrate")))]
    None
}

/// One account, for the users page.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UserRow {
    pub id: i64,
    pub name: String,
    pub role: String,
    pub disabled: bool,
    pub created_ms: i64,
    /// The signed-in admin's own row (the page offers no way to lock oneself out).
    pub is_me: bool,
}

/// One API token: never its secret, only its first characters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TokenRow {
    pub id: i64,
    pub owner: String,
    pub name: String,
    /// `read` or `write`.
    pub scope: String,
    /// The token's first characters (`ko_1a2b3c4d`).
    pub prefix: String,
    pub created_ms: i64,
    pub last_used_ms: Option<i64>,
    pub revoked_ms: Option<i64>,
}

/// The users page (admins): every account and every API token.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UsersPage {
    pub now_ms: i64,
    pub users: Vec<UserRow>,
    pub tokens: Vec<TokenRow>,
}

/// The signed-in user's own page: their tokens.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AccountPage {
    pub now_ms: i64,
    pub name: String,
    pub role: String,
    pub tokens: Vec<TokenRow>,
}

/// A token just made: its text, shown this once.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewToken {
    pub id: i64,
    pub token: String,
}

/// What the login page says.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoginInfo {
    /// False on a fresh install: the page points to the setup link in the server's output.
    pub has_users: bool,
    /// The name a refused plain form post came back with (see [`login`]); empty otherwise.
    #[serde(default)]
    pub typed_name: String,
}

/// What the server provides for sign-in, setup, users, tokens and one's own account.
#[cfg(feature = "ssr")]
#[async_trait::async_trait]
pub trait AccountsConsole: Send + Sync + 'static {
    /// Admins: every user and token.
    async fn users(&self) -> Result<UsersPage, Refusal>;
    /// Admins: a new user; returns its id.
    async fn create_user(
        &self,
        name: String,
        role: String,
        password: String,
    ) -> Result<i64, Refusal>;
    /// Admins: `role` (with `role`), `disable`, `enable` or `password` (a reset, with `password`).
    async fn update_user(
        &self,
        id: i64,
        action: String,
        role: Option<String>,
        password: Option<String>,
    ) -> Result<(), Refusal>;
    /// The signed-in user's page.
    async fn account(&self) -> Result<AccountPage, Refusal>;
    /// A token for the signed-in user, who confirms with their password.
    async fn create_token(
        &self,
        name: String,
        scope: String,
        password: String,
    ) -> Result<NewToken, Refusal>;
    /// Revokes one of the signed-in user's tokens (admins: anyone's).
    async fn revoke_token(&self, id: i64) -> Result<(), Refusal>;
    /// The signed-in user changes their password (their other sessions end).
    async fn change_password(&self, current: String, new: String) -> Result<(), Refusal>;
    async fn login_info(&self) -> Result<LoginInfo, Refusal>;
    /// Signs in (a new session id) or says why not.
    async fn login(&self, name: String, password: String) -> Result<(), Refusal>;
    /// Ok if `code` is the server's live setup link; 404 otherwise (a wrong code counts like a
    /// failed sign-in).
    async fn setup_check(&self, code: String) -> Result<(), Refusal>;
    /// Creates the first admin through the setup link and signs them in; 404 as above, and once
    /// any user exists.
    async fn setup(&self, code: String, name: String, password: String) -> Result<(), Refusal>;
    async fn logout(&self) -> Result<(), Refusal>;
}

#[server(prefix = "/_console", endpoint = "login_info")]
pub async fn get_login_info() -> Result<LoginInfo, ServerFnError> {
    let mut info = console()?.login_info().await.map_err(fail)?;
    info.typed_name = take_typed_name();
    Ok(info)
}

/// The cookie that carries a refused plain sign-in's name back to the login page: the browser's
/// own (HttpOnly, for `/login` only, a minute at most), never the URL, where a password typed
/// into the name field would stay in the history and the server's logs.
#[cfg(feature = "ssr")]
const TYPED_NAME_COOKIE: &str = "kickoff_login_name";

/// The name [`back_to_login`] left in the request's cookie, and the cookie cleared.
#[cfg(feature = "ssr")]
fn take_typed_name() -> String {
    let typed = use_context::<http::request::Parts>()
        .into_iter()
        .flat_map(|p| {
            p.headers
                .get_all(http::header::COOKIE)
                .iter()
                .cloned()
                .collect::<Vec<_>>()
        })
        .filter_map(|v| v.to_str().ok().map(str::to_string))
        .flat_map(|v| {
            v.split(';')
                .map(|c| c.trim().to_string())
                .collect::<Vec<_>>()
        })
        .find_map(|c| {
            c.strip_prefix(TYPED_NAME_COOKIE)
                .and_then(|rest| rest.strip_prefix('='))
                .map(|value| {
                    url::form_urlencoded::parse(format!("n={value}").as_bytes())
                        .map(|(_, v)| v.into_owned())
                        .next()
                        .unwrap_or_default()
                })
        })
        .unwrap_or_default();
    if !typed.is_empty() {
        set_typed_name_cookie("", 0);
    }
    typed.chars().take(200).collect()
}

#[cfg(feature = "ssr")]
fn set_typed_name_cookie(name: &str, max_age_secs: u32) {
    let value: String = url::form_urlencoded::byte_serialize(name.as_bytes()).collect();
    // The login page's path under the base: no other page (nor the application the dashboard
    // is mounted in) is sent it.
    let cookie = format!(
        "{TYPED_NAME_COOKIE}={value}; Path={}; Max-Age={max_age_secs}; HttpOnly; SameSite=Strict",
        crate::base::href("/login")
    );
    if let (Some(options), Ok(cookie)) = (
        use_context::<leptos_axum::ResponseOptions>(),
        http::HeaderValue::from_str(&cookie),
    ) {
        options.append_header(http::header::SET_COOKIE, cookie);
    }
}

/// Where to go after signing in: a path of this site, else the overview.
///
/// Only a path written without control characters (browsers drop tabs and newlines from a URL, so
/// `/\t/x` would be `//x`, another site), backslashes (`/\x` is `//x` to them) or a `//` start,
/// which parses by the URL standard browsers follow to a path of this site and stays a one-slash
/// path once its dot segments are resolved (`/.//x` is `//x`). What comes back is that parsed path,
/// query and fragment, percent-encoded: printable ASCII that a `Location` header can hold.
pub fn safe_next(next: Option<&str>) -> String {
    next.and_then(same_site_path)
        .unwrap_or_else(|| "/".to_string())
}

fn same_site_path(next: &str) -> Option<String> {
    let plain = next.starts_with('/')
        && !next.starts_with("//")
        && !next.chars().any(|c| c.is_control() || c == '\\');
    if !plain {
        return None;
    }
    // Any base does: only whether the result leaves it matters.
    let base = url::Url::parse("http://kickoff.invalid/").ok()?;
    let parsed = base.join(next).ok()?;
    if parsed.origin() != base.origin() {
        return None;
    }
    let mut path = parsed.path().to_string();
    if path.starts_with("//") || path.contains('\\') {
        return None;
    }
    if let Some(query) = parsed.query() {
        path.push('?');
        path.push_str(query);
    }
    if let Some(fragment) = parsed.fragment() {
        path.push('#');
        path.push_str(fragment);
    }
    Some(path)
}

/// Signs in and goes on to `next` (a redirect, also without JavaScript).
#[server(prefix = "/_console", endpoint = "login")]
pub async fn login(
    name: String,
    password: String,
    next: Option<String>,
) -> Result<String, ServerFnError> {
    let next = safe_next(next.as_deref());
    if let Err(refused) = console()?.login(name.clone(), password).await {
        let refused = fail(refused);
        back_to_login(&name, &next, &refused);
        return Err(refused);
    }
    leptos_axum::redirect(&crate::base::href(&next));
    Ok(next)
}

/// A refused sign-in sent as a plain form post (before the page's script ran, or without
/// JavaScript) goes back to the login page with the reason, as any server function's does, and
/// with the name typed (in a cookie for the login page, not in the URL), so that a second try
/// needs only the password. Never the password. A call from the hydrated page keeps its form as
/// it is and needs none of this.
#[cfg(feature = "ssr")]
fn back_to_login(name: &str, next: &str, refused: &ServerFnError) {
    use leptos::server_fn::error::ServerFnUrlError;
    use leptos::server_fn::ServerFn;

    let plain_post = use_context::<http::request::Parts>().is_some_and(|p| {
        p.headers
            .get(http::header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.contains("text/html"))
    });
    if !plain_post {
        return;
    }
    let mut back = match url::Url::parse("http://kickoff.invalid/login") {
        Ok(url) => url,
        Err(_) => return,
    };
    back.query_pairs_mut().append_pair("next", next);
    set_typed_name_cookie(name.trim(), 60);
    // The error as the page reads it back (`__path`, `__err`), the way server functions say it.
    let Ok(back) =
        ServerFnUrlError::new(<Login as ServerFn>::PATH, refused.clone()).to_url(back.as_str())
    else {
        return;
    };
    leptos_axum::redirect(&crate::base::href(&format!(
        "{}?{}",
        back.path(),
        back.query().unwrap_or("")
    )));
}

#[server(prefix = "/_console", endpoint = "logout")]
pub async fn logout(csrf: Option<String>) -> Result<(), ServerFnError> {
    // Checked by the server's session guard before this runs; carried here so the form's
    // field survives the browser's encoding of the arguments.
    let _ = csrf;
    console()?.logout().await.map_err(fail)?;
    leptos_axum::redirect(&crate::base::href("/login"));
    Ok(())
}

/// 404 unless `code` is the server's live setup link (the setup page asks first).
#[server(prefix = "/_console", endpoint = "setup_check")]
pub async fn check_setup_code(code: String) -> Result<(), ServerFnError> {
    console()?.setup_check(code).await.map_err(fail)
}

/// Creates the first admin through the setup link, signs them in and goes on to the overview (a
/// redirect, also without JavaScript).
#[server(prefix = "/_console", endpoint = "setup")]
pub async fn set_up(
    code: String,
    name: String,
    password: String,
    confirm: String,
) -> Result<String, ServerFnError> {
    if password != confirm {
        return Err(fail(Refusal::invalid("the two passwords differ")));
    }
    console()?.setup(code, name, password).await.map_err(fail)?;
    leptos_axum::redirect(&crate::base::href("/"));
    Ok("/".to_string())
}

#[server(prefix = "/_console", endpoint = "users")]
pub async fn get_users() -> Result<UsersPage, ServerFnError> {
    console()?.users().await.map_err(fail)
}

#[server(prefix = "/_console", endpoint = "create_user")]
pub async fn create_user(
    csrf: Option<String>,
    name: String,
    role: String,
    password: String,
) -> Result<i64, ServerFnError> {
    // Checked by the server's session guard before this runs; carried here so the form's
    // field survives the browser's encoding of the arguments.
    let _ = csrf;
    console()?
        .create_user(name, role, password)
        .await
        .map_err(fail)
}

#[server(prefix = "/_console", endpoint = "update_user")]
pub async fn update_user(
    csrf: Option<String>,
    id: i64,
    action: String,
    role: Option<String>,
    password: Option<String>,
) -> Result<(), ServerFnError> {
    // Checked by the server's session guard before this runs; carried here so the form's
    // field survives the browser's encoding of the arguments.
    let _ = csrf;
    console()?
        .update_user(id, action, role, password)
        .await
        .map_err(fail)
}

#[server(prefix = "/_console", endpoint = "account")]
pub async fn get_account() -> Result<AccountPage, ServerFnError> {
    console()?.account().await.map_err(fail)
}

#[server(prefix = "/_console", endpoint = "create_token")]
pub async fn create_token(
    csrf: Option<String>,
    name: String,
    scope: String,
    password: String,
) -> Result<NewToken, ServerFnError> {
    // Checked by the server's session guard before this runs; carried here so the form's
    // field survives the browser's encoding of the arguments.
    let _ = csrf;
    console()?
        .create_token(name, scope, password)
        .await
        .map_err(fail)
}

#[server(prefix = "/_console", endpoint = "revoke_token")]
pub async fn revoke_token(csrf: Option<String>, id: i64) -> Result<(), ServerFnError> {
    // Checked by the server's session guard before this runs; carried here so the form's
    // field survives the browser's encoding of the arguments.
    let _ = csrf;
    console()?.revoke_token(id).await.map_err(fail)
}

#[server(prefix = "/_console", endpoint = "change_password")]
pub async fn change_password(
    csrf: Option<String>,
    current: String,
    new: String,
) -> Result<(), ServerFnError> {
    // Checked by the server's session guard before this runs; carried here so the form's
    // field survives the browser's encoding of the arguments.
    let _ = csrf;
    console()?.change_password(current, new).await.map_err(fail)
}
