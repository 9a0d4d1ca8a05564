//! The experiment layer of fabricsim: a scenario file (the contract of SCENARIO.md) in,
//! a run on either fabric, results and their files out. Everything that embeds a run (the
//! command line, tests, sweep workers) goes through this crate; it is the only layer that
//! touches files or the clock.

pub mod bench;
pub mod collective_sweep;
pub mod compare;
pub mod formats;
pub mod heap;
pub mod results;
pub mod runner;
pub mod scenario;
