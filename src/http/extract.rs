//! Extractors whose rejections are [`AppError`]s, so that malformed input gets the same error
//! shape as every other error.

use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use super::error::AppError;
use crate::engine::JobId;

/// `axum::Json` with [`AppError`] rejections.
pub struct ApiJson<T>(pub T);

impl<S, T> FromRequest<S> for ApiJson<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = AppError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let axum::Json(v) = axum::Json::<T>::from_request(req, state).await?;
        Ok(ApiJson(v))
    }
}

/// `axum::extract::Query` with [`AppError`] rejections.
pub struct ApiQuery<T>(pub T);

impl<S, T> FromRequestParts<S> for ApiQuery<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let axum::extract::Query(v) =
            axum::extract::Query::<T>::from_request_parts(parts, state).await?;
        Ok(ApiQuery(v))
    }
}

/// A positive integer id from the path; anything else names no record (404).
async fn positive_id<S: Send + Sync>(
    parts: &mut Parts,
    state: &S,
    what: &str,
) -> Result<i64, AppError> {
    let axum::extract::Path(raw) =
        axum::extract::Path::<String>::from_request_parts(parts, state).await?;
    match raw.parse::<i64>() {
        Ok(id) if id > 0 => Ok(id),
        _ => Err(AppError::NotFound(format!("{what} {raw} not found"))),
    }
}

/// A job id from the path.
pub struct JobIdPath(pub JobId);

impl<S: Send + Sync> FromRequestParts<S> for JobIdPath {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        positive_id(parts, state, "job")
            .await
            .map(|id| JobIdPath(JobId(id)))
    }
}

/// A question id from the path.
pub struct IdPath(pub i64);

impl<S: Send + Sync> FromRequestParts<S> for IdPath {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        positive_id(parts, state, "question").await.map(IdPath)
    }
}

/// A webhook endpoint's id from the path.
pub struct EndpointIdPath(pub i64);

impl<S: Send + Sync> FromRequestParts<S> for EndpointIdPath {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        positive_id(parts, state, "webhook endpoint")
            .await
            .map(EndpointIdPath)
    }
}

/// An alert rule's or incident's id from the path.
pub struct AlertIdPath(pub i64);

impl<S: Send + Sync> FromRequestParts<S> for AlertIdPath {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        positive_id(parts, state, "alert").await.map(AlertIdPath)
    }
}

/// Deserializes a present field, `null` included, as `Some` (absent stays `None`): with
/// `#[serde(default, deserialize_with = "…")]` on an `Option<Option<T>>`, a patch tells "set to
/// null" from "leave as it is".
pub fn present<'de, D: serde::Deserializer<'de>, T: serde::Deserialize<'de>>(
    d: D,
) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}
