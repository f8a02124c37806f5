//! Accounts: signing in and out, the first admin's setup link, the users page (admins), and one's
//! own account page with its API tokens and password.
//!
//! Signing in and the setup link start a session; everything else acts within one.

use kickoff_app::console::accounts::{
    AccountPage, AccountsConsole, LoginInfo, NewToken, TokenRow, UserRow, UsersPage,
};
use kickoff_app::console::Refusal;

use super::{conn, ms, operator, refused, request, unavailable, Act, ServerConsole};
use crate::accounts::{AccountError, ApiToken, LoginError, Role, SetupError, TokenScope};
use crate::audit::{AuditEntry, NotRecorded};
use crate::http::error::AppError;
use crate::http::session;

fn token_row(t: &ApiToken) -> TokenRow {
    TokenRow {
        id: t.id,
        owner: t.user_name.clone(),
        name: t.name.clone(),
        scope: t.scope.as_str().to_string(),
        prefix: t.prefix.clone(),
        created_ms: ms(t.created_at),
        last_used_ms: t.last_used_at.map(ms),
        revoked_ms: t.revoked_at.map(ms),
    }
}

/// An action's own error, or [`NotRecorded`]: for actions whose errors are told apart after.
enum Unrecorded<E> {
    Failed(E),
    NotRecorded(NotRecorded),
}

impl<E> From<NotRecorded> for Unrecorded<E> {
    fn from(e: NotRecorded) -> Self {
        Unrecorded::NotRecorded(e)
    }
}

impl From<SetupError> for Unrecorded<SetupError> {
    fn from(e: SetupError) -> Self {
        Unrecorded::Failed(e)
    }
}

impl From<AccountError> for Unrecorded<SetupError> {
    fn from(e: AccountError) -> Self {
        Unrecorded::Failed(e.into())
    }
}

impl ServerConsole {
    /// Signs `user` in on `session` (a new session id) and records it.
    async fn start_session(
        &self,
        session: &tower_sessions::Session,
        user: &crate::accounts::User,
        address: std::net::IpAddr,
    ) -> Result<(), Refusal> {
        // Recorded first: a session the log cannot name is not started.
        self.auditor
            .record_first(&AuditEntry {
                actor: user.name.clone(),
                role: user.role.as_str().to_string(),
                action: "session.sign_in".into(),
                target: None,
                filter: None,
                count: None,
                address: Some(address),
                result: Ok(()),
            })
            .await?;
        session::sign_in(session, user).await.map_err(unavailable)?;
        tracing::info!(user = %user.name, %address, "signed in");
        Ok(())
    }
}

/// The session and client address of a request that starts a session (signing in, the setup
/// link). It carries no session token yet, so it must come from this site: 403 with `refused`
/// otherwise.
fn session_starter(refused: &str) -> Result<(tower_sessions::Session, std::net::IpAddr), Refusal> {
    let parts = request().ok_or(AppError::Unavailable)?;
    if !session::same_origin(&parts) {
        return Err(AppError::Forbidden(refused.into()).into());
    }
    let session = parts
        .extensions
        .get::<tower_sessions::Session>()
        .cloned()
        .ok_or(AppError::Unavailable)?;
    Ok((session, session::client_address(&parts.extensions)))
}

#[async_trait::async_trait]
impl AccountsConsole for ServerConsole {
    async fn users(&self) -> Result<UsersPage, Refusal> {
        let op = self.operator_for(Role::Admin, "users.read", None).await?;
        let now_ms = self.now_ms().await?;
        let users = self.accounts.list().await.map_err(refused)?;
        let tokens = self.accounts.tokens(None).await.map_err(refused)?;
        Ok(UsersPage {
            now_ms,
            users: users
                .into_iter()
                .map(|u| UserRow {
                    is_me: u.id == op.user.id,
                    id: u.id,
                    name: u.name,
                    role: u.role.as_str().to_string(),
                    disabled: u.disabled,
                    created_ms: ms(u.created_at),
                })
                .collect(),
            tokens: tokens.iter().map(token_row).collect(),
        })
    }

    async fn create_user(
        &self,
        name: String,
        role: String,
        password: String,
    ) -> Result<i64, Refusal> {
        let act = Act {
            action: "user.create".into(),
            target: Some(format!(
                "user {}",
                name.trim().chars().take(64).collect::<String>()
            )),
            filter: None,
        };
        self.act_as(
            Role::Admin,
            act,
            |_| None,
            async |work| {
                let role: Role = role.parse().map_err(Refusal::invalid)?;
                crate::accounts::normalize_name(&name).map_err(refused)?;
                let password = self
                    .accounts
                    .new_password(&password)
                    .await
                    .map_err(refused)?;
                self.accounts
                    .create_with(conn(work).await?, &name, &password, role)
                    .await
                    .map(|u| u.id)
                    .map_err(refused)
            },
        )
        .await
    }

    async fn update_user(
        &self,
        id: i64,
        action: String,
        role: Option<String>,
        password: Option<String>,
    ) -> Result<(), Refusal> {
        let tried = match action.as_str() {
            "role" | "disable" | "enable" => format!("user.{action}"),
            "password" => "user.password_reset".to_string(),
            _ => "user.update".to_string(),
        };
        let me = self
            .operator_for(Role::Admin, &tried, Some(&format!("user {id}")))
            .await?;
        let target = match self.accounts.get(id).await.map_err(refused)? {
            Some(u) => format!("user {}", u.name),
            None => format!("user {id}"),
        };
        let audit_action = match action.as_str() {
            "role" | "disable" | "enable" => format!("user.{action}"),
            "password" => "user.password_reset".to_string(),
            other => {
                return Err(Refusal::invalid(format!(
                    "`{other}` is not a user action: use role, disable, enable or password"
                )))
            }
        };
        let act = Act {
            action: audit_action,
            target: Some(target),
            filter: None,
        };
        self.act_as(
            Role::Admin,
            act,
            |_| None,
            async |work| {
                let accounts = &self.accounts;
                let changed = match action.as_str() {
                "role" => {
                    let role: Role = role
                        .as_deref()
                        .unwrap_or("")
                        .parse()
                        .map_err(Refusal::invalid)?;
                    if id == me.user.id && role < Role::Admin {
                        return Err(Refusal::conflict(
                            "you cannot take the admin role from yourself: ask another admin",
                        ));
                    }
                    accounts.set_role_with(conn(work).await?, id, role).await
                }
                "disable" => {
                    if id == me.user.id {
                        return Err(Refusal::conflict(
                            "you cannot disable yourself: ask another admin",
                        ));
                    }
                    accounts
                        .set_disabled_with(conn(work).await?, id, true)
                        .await
                }
                "enable" => {
                    accounts
                        .set_disabled_with(conn(work).await?, id, false)
                        .await
                }
                _ if id == me.user.id => return Err(Refusal::conflict(
                    "change your own password on your account page: it asks for the current one",
                )),
                _ => {
                    let password = accounts
                        .new_password(password.as_deref().unwrap_or(""))
                        .await
                        .map_err(refused)?;
                    accounts
                        .set_password_with(conn(work).await?, id, &password)
                        .await
                }
            };
                changed.map(drop).map_err(refused)
            },
        )
        .await
    }

    async fn account(&self) -> Result<AccountPage, Refusal> {
        let op = operator(Role::Viewer)?;
        let now_ms = self.now_ms().await?;
        let tokens = self
            .accounts
            .tokens(Some(op.user.id))
            .await
            .map_err(refused)?;
        Ok(AccountPage {
            now_ms,
            name: op.user.name.clone(),
            role: op.user.role.as_str().to_string(),
            tokens: tokens.iter().map(token_row).collect(),
        })
    }

    async fn create_token(
        &self,
        name: String,
        scope: String,
        password: String,
    ) -> Result<NewToken, Refusal> {
        let op = operator(Role::Viewer)?;
        // What the audit entry shows of the input: checked values only, cut and printable.
        let shown_scope = if matches!(scope.as_str(), "read" | "write") {
            scope.as_str()
        } else {
            "?"
        };
        let shown_name: String = name
            .trim()
            .chars()
            .filter(|c| !c.is_control())
            .take(100)
            .collect();
        let act = Act {
            action: "token.create".into(),
            target: Some(format!(
                "{shown_scope} token `{shown_name}` of {}",
                op.user.name
            )),
            filter: None,
        };
        self.act_as(
            Role::Viewer,
            act,
            |_| None,
            async |work| {
                let scope: TokenScope = scope.parse().map_err(Refusal::invalid)?;
                // A token outlives the session it was made in (and a later password change): making
                // one takes the password again, so a stolen session cannot mint a lasting credential.
                // A wrong one counts toward the sign-in lock.
                self.accounts
                    .authenticate(&op.user.name, &password, op.address)
                    .await
                    .map_err(|e| match e {
                        LoginError::BadCredentials => Refusal::invalid("your password is wrong"),
                        other => refused(other),
                    })?;
                let (token, text) = self
                    .accounts
                    .create_token_with(conn(work).await?, &op.user, &name, scope)
                    .await
                    .map_err(refused)?;
                Ok(NewToken {
                    id: token.id,
                    token: text,
                })
            },
        )
        .await
    }

    async fn revoke_token(&self, id: i64) -> Result<(), Refusal> {
        let op = operator(Role::Viewer)?;
        let token = self.accounts.token(id).await.map_err(refused)?;
        let act = Act {
            action: "token.revoke".into(),
            // The token's prefix and owner only for those who may see them (the audit log is
            // readable by every role).
            target: Some(match &token {
                Some(t) if t.user_id == op.user.id || op.may(Role::Admin) => {
                    format!("token {id} ({}) of {}", t.prefix, t.user_name)
                }
                _ => format!("token {id}"),
            }),
            filter: None,
        };
        self.act_as(
            Role::Viewer,
            act,
            |_| None,
            async |work| {
                let token =
                    token.ok_or_else(|| Refusal::not_found(format!("token {id} not found")))?;
                if token.user_id != op.user.id && !op.may(Role::Admin) {
                    return Err(AppError::Forbidden(
                        "only its owner or an admin may revoke a token".into(),
                    )
                    .into());
                }
                self.accounts
                    .revoke_token_with(conn(work).await?, id)
                    .await
                    .map(drop)
                    .map_err(refused)
            },
        )
        .await
    }

    async fn change_password(&self, current: String, new: String) -> Result<(), Refusal> {
        let op = operator(Role::Viewer)?;
        let act = Act {
            action: "account.password".into(),
            target: Some(format!("user {}", op.user.name)),
            filter: None,
        };
        let user = self
            .act_as(
                Role::Viewer,
                act,
                |_| None,
                async |work| {
                    let new = self
                        .accounts
                        .check_own_password(&op.user, &current, &new, op.address)
                        .await
                        .map_err(|e| match e {
                            // Signed in already: a wrong current password is the form's mistake, not a
                            // missing sign-in.
                            LoginError::BadCredentials => {
                                Refusal::invalid("the current password is wrong")
                            }
                            other => refused(other),
                        })?;
                    self.accounts
                        .set_password_with(conn(work).await?, op.user.id, &new)
                        .await
                        .map_err(refused)
                },
            )
            .await?;
        // Committed: this session carries on with the new password; the others end.
        let parts = request().ok_or(AppError::Unavailable)?;
        if let Some(session) = parts.extensions.get::<tower_sessions::Session>() {
            session::renew_epoch(session, &user)
                .await
                .map_err(unavailable)?;
        }
        Ok(())
    }

    async fn login_info(&self) -> Result<LoginInfo, Refusal> {
        let has_users = self.accounts.count().await.map_err(refused)? > 0;
        Ok(LoginInfo {
            has_users,
            typed_name: String::new(),
        })
    }

    async fn login(&self, name: String, password: String) -> Result<(), Refusal> {
        let (session, address) = session_starter("sign in from the dashboard's own page")?;
        let refusal = match self.accounts.authenticate(&name, &password, address).await {
            Ok(user) => Ok(user),
            Err(e @ LoginError::Database(_)) => return Err(refused(e)),
            // Counted with the lock's other refusals, recorded as one entry when it is over.
            // Not audited one by one: a flood would write a row per attempt (the metric counts them).
            Err(
                e @ (LoginError::Locked {
                    unchecked: true, ..
                }
                | LoginError::RateLimited { .. }),
            ) => return Err(refused(e)),
            Err(e) => Err(refused(e)),
        };
        let user = match refusal {
            Ok(user) => user,
            Err(refusal) => {
                // Who tried, when the name names an account; never a name nobody has (it may
                // be a password typed into the name field).
                let actor = self
                    .accounts
                    .name_for_audit(&name)
                    .await
                    .unwrap_or_else(|_| crate::accounts::UNKNOWN_NAME.into());
                self.auditor
                    .record(AuditEntry {
                        actor,
                        role: "none".into(),
                        action: "session.sign_in".into(),
                        target: None,
                        filter: None,
                        count: None,
                        address: Some(address),
                        result: Err(refusal.message.clone()),
                    })
                    .await;
                return Err(refusal);
            }
        };
        self.start_session(&session, &user, address).await
    }

    async fn setup_check(&self, code: String) -> Result<(), Refusal> {
        let parts = request().ok_or(AppError::Unavailable)?;
        let address = session::client_address(&parts.extensions);
        self.accounts
            .check_setup_code(&code, address)
            .await
            .map(drop)
            .map_err(refused)
    }

    async fn setup(&self, code: String, name: String, password: String) -> Result<(), Refusal> {
        let (session, address) = session_starter("set up from the dashboard's own page")?;
        let typed: String = name.trim().chars().take(64).collect();
        let entry = |actor: String, role: &str, result: Result<(), String>| AuditEntry {
            actor,
            role: role.to_string(),
            action: "user.create".into(),
            target: Some(format!("first admin {typed}, by the setup link")),
            filter: None,
            count: None,
            address: Some(address),
            result,
        };
        let made = match self.accounts.check_setup_code(&code, address).await {
            Ok(pass) => {
                let shown = crate::accounts::normalize_name(&name).unwrap_or(typed.clone());
                let made = entry(shown, Role::Admin.as_str(), Ok(()));
                self.auditor
                    .run(
                        made,
                        |_| None,
                        async |work| {
                            let password = self
                                .accounts
                                .new_password(&password)
                                .await
                                .map_err(SetupError::from)?;
                            let conn = work.conn().await.map_err(AccountError::from)?;
                            let user = self
                                .accounts
                                .set_up_first_admin_with(conn, pass, &name, &password)
                                .await?;
                            Ok::<_, Unrecorded<SetupError>>(user)
                        },
                    )
                    .await
            }
            Err(e) => Err(Unrecorded::Failed(e)),
        };
        let user = match made {
            Ok(user) => {
                self.accounts.spend_setup_link();
                user
            }
            Err(Unrecorded::NotRecorded(e)) => return Err(e.into()),
            Err(Unrecorded::Failed(e @ SetupError::Account(AccountError::Database(_)))) => {
                return Err(refused(e))
            }
            Err(Unrecorded::Failed(
                e @ (SetupError::Locked {
                    unchecked: true, ..
                }
                | SetupError::RateLimited { .. }),
            )) => return Err(refused(e)),
            Err(Unrecorded::Failed(e)) => {
                let refusal = refused(e);
                let actor = if typed.is_empty() {
                    "?".into()
                } else {
                    typed.clone()
                };
                self.auditor
                    .record(entry(actor, "none", Err(refusal.message.clone())))
                    .await;
                return Err(refusal);
            }
        };
        tracing::info!(user = %user.name, %address, "the first admin was made by the setup link");
        self.start_session(&session, &user, address).await
    }

    async fn logout(&self) -> Result<(), Refusal> {
        if let Ok(op) = operator(Role::Viewer) {
            self.record(
                &op,
                "session.sign_out",
                None,
                None,
                None,
                &Ok::<(), Refusal>(()),
            )
            .await;
        }
        let parts = request().ok_or(AppError::Unavailable)?;
        if let Some(session) = parts.extensions.get::<tower_sessions::Session>() {
            session::sign_out(session).await.map_err(unavailable)?;
        }
        Ok(())
    }
}
