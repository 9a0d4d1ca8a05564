//! The Chakra trace reader on arbitrary bytes: nodes or an error, never a panic; every
//! decoded node converts or is refused with a message.
#![no_main]

use fabricsim_experiment::formats::chakra;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(nodes) = chakra::decode(data) {
        for n in &nodes {
            let _ = chakra::to_et_node(n);
        }
    }
});
