//! Diodon's one-way protocol core (sans-IO).
#![forbid(unsafe_code)]

pub mod time;
pub use time::{TimerTable, Timestamp};
