//! The ns-3 topology reader on arbitrary text: a topology or an error, never a panic or
//! an allocation sized by the file's claims; an accepted one builds.
#![no_main]

use fabricsim_core::topology::Topology;
use fabricsim_experiment::formats::ns3;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(g) = ns3::parse_topology(text) {
        let _ = Topology::from_graph(g.nodes, &g.switches, &g.links);
    }
});
