pub mod live;
pub mod loaded;
pub mod state_counts;
pub mod throughput;
pub mod time;
