//! The scenario loader on arbitrary text: it returns a scenario or an error, never
//! panics; a scenario it accepts prints its effective configuration, which loads again.
#![no_main]

use fabricsim_experiment::scenario::Scenario;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(s) = Scenario::parse(text, "fuzz") {
        let again = Scenario::parse(&s.effective_toml(), "fuzz");
        assert!(again.is_ok(), "effective configuration refused: {again:?}");
    }
});
