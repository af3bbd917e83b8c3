//! What the whole process shares, below every other room: its Prometheus [`metrics`], what it
//! tells the person running it ([`progress`]), its [`memory`] given back to the operating
//! system after a burst, and the [`threads`] each guest's code runs on.

pub mod memory;
pub mod metrics;
pub mod progress;
pub mod threads;
