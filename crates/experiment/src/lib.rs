//! The experiment layer of fabricsim: a scenario file (the contract of SCENARIO.md) in,
//! a run on either fabric, results and their files out. Everything that embeds a run (the
//! command line, tests, sweep workers) goes through this crate; it is the only layer that
//! touches files or the clock.
//!
//! ```
//! use fabricsim_experiment::{results, runner, scenario::Scenario};
//!
//! let text = "[[traffic]]\nkind = \"flow\"\nsrc = 0\ndst = 1\nsize = \"64KiB\"\n";
//! let scenario = Scenario::parse(text, "embedded").unwrap();
//! let outcome = runner::run(&scenario, None, false).unwrap();
//! let summary = results::summary(&scenario, &outcome);
//! assert_eq!(summary.flows.completed, 1);
//! ```

// Unsafe code only where it is needed: the counting allocator (`heap`), an atomic file
// exchange (`output`), a sweep worker's parent-death signal (`sweep`), each allowed there.
#![deny(unsafe_code)]

pub mod bench;
pub mod calibrate;
pub mod catalog;
pub mod collective_sweep;
pub mod compare;
pub mod decision;
pub mod estimate;
pub mod flow_error;
pub mod formats;
#[allow(unsafe_code)]
pub mod heap;
pub mod outcome;
pub mod output;
pub mod report;
pub mod results;
pub mod runner;
pub mod scenario;
pub mod sweep;
pub mod tune;
pub mod validate;
