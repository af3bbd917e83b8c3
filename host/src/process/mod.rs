//! What the whole process shares, below every other room: its Prometheus [`metrics`], what it
//! tells the person running it ([`progress`]), and its [`memory`] given back to the operating
//! system after a burst.

pub mod memory;
pub mod metrics;
pub mod progress;
