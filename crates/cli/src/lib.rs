//! fabricsim: the experiment layer (scenario -> model -> run -> results) and the
//! command-line front end. This is the only crate that touches files or the clock.

pub mod chakra;
pub mod compare;
pub mod experiment;
pub mod heap;
pub mod ns3;
pub mod pcap;
pub mod results;
pub mod scenario;
pub mod sweep;
