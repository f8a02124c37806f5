pub mod jobs;
pub mod overview;
pub mod questions;
