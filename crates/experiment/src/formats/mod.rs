//! File formats of other tools that fabricsim reads or writes.

pub mod chakra;
pub mod ns3;
pub mod pcap;
