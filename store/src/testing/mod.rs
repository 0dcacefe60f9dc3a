//! Test support shared by the test suites of every crate (feature `testing`).

pub mod fault_proxy;
pub mod postgres;
pub mod rng;
