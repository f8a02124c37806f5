pub mod live;
pub mod loaded;
pub mod session;
pub mod state_counts;
pub mod table;
pub mod throughput;
pub mod time;
pub mod tokens;
