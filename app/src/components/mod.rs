pub mod live;
pub mod state_counts;
