//! The ns-3 flow-list reader on arbitrary text: flows or an error, never a panic.
#![no_main]

use fabricsim_experiment::formats::ns3;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = ns3::parse_flows(text);
    }
});
