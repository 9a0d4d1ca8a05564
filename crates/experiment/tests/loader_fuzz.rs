//! Fuzzing the scenario loader: arbitrary text and arbitrary key/value soups never
//! panic; every rejection is an `Invalid` error with a message.

use fabricsim_experiment::scenario::{Scenario, ScenarioError};
use proptest::prelude::*;

const KEYS: &[&str] = &[
    "name",
    "seed",
    "stop_at",
    "fabric.kind",
    "fabric.link_rate",
    "fabric.mtu",
    "fabric.switch_latency",
    "fabric.link_delay",
    "fabric.cable_length",
    "fabric.infiniband.virtual_lanes",
    "fabric.infiniband.vl_buffer",
    "fabric.infiniband.ack_every",
    "fabric.infiniband.congestion_control",
    "fabric.infiniband.ccti_timer",
    "fabric.infiniband.vl_weights",
    "fabric.infiniband.sl_to_vl",
    "topology.kind",
    "topology.hosts",
    "topology.leaves",
    "topology.spines",
    "topology.k",
    "topology.uplink_rate",
    "topology.path",
    "fabric.rocev2.pfc_watchdog",
    "fabric.rocev2.deadlock_check",
    "bogus",
];
const VALUES: &[&str] = &[
    "0",
    "1",
    "-1",
    "2",
    "7",
    "4096",
    "99999999999999",
    "\"400Gbps\"",
    "\"4KiB\"",
    "\"1.5us\"",
    "\"abc\"",
    "\"\"",
    "\"5m\"",
    "\"-3ns\"",
    "true",
    "false",
    "1.5",
    "[0, 1]",
    "[]",
    "\"fat-tree\"",
    "\"leaf-spine\"",
    "\"single-switch\"",
    "\"infiniband\"",
    "\"rocev2\"",
    "\"1e9bps\"",
    "\"0.5B\"",
    "[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 0]",
];
const TRAFFIC: &[&str] = &[
    "kind = \"flow\"",
    "kind = \"incast\"",
    "kind = \"permutation\"",
    "kind = \"x\"",
    "src = 0",
    "src = 99",
    "dst = 1",
    "dst = -1",
    "size = 0",
    "size = \"2MB\"",
    "size = 4096",
    "senders = [1, 2]",
    "senders = [0, 0]",
    "hosts = [0, 1]",
    "start = \"1us\"",
    "start = 5",
    "sl = 3",
    "sl = 16",
];

fn soup() -> impl Strategy<Value = String> {
    let kv = (0..KEYS.len(), 0..VALUES.len())
        .prop_map(|(k, v)| format!("{} = {}\n", KEYS[k], VALUES[v]));
    let traffic = proptest::collection::vec(0..TRAFFIC.len(), 0..6).prop_map(|lines| {
        format!(
            "[[traffic]]\n{}\n",
            lines
                .iter()
                .map(|&i| TRAFFIC[i])
                .collect::<Vec<_>>()
                .join("\n")
        )
    });
    (
        proptest::collection::vec(kv, 0..8),
        proptest::collection::vec(traffic, 0..3),
    )
        .prop_map(|(kvs, ts)| format!("{}{}", kvs.concat(), ts.concat()))
}

fn check(text: &str) -> Result<(), TestCaseError> {
    match Scenario::parse(text, "fuzz") {
        Ok(s) => {
            // A scenario the loader accepts must build.
            prop_assert!(
                s.build_topology().is_ok(),
                "accepted but did not build: {text}"
            );
        }
        Err(ScenarioError::Invalid(msg)) => prop_assert!(!msg.is_empty()),
        Err(e) => prop_assert!(false, "unexpected error kind {e}"),
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn key_value_soup_never_panics(text in soup()) {
        check(&text)?;
    }

    #[test]
    fn arbitrary_text_never_panics(text in "\\PC{0,200}") {
        check(&text)?;
    }
}

/// Every input the fuzzers found a crash with (fuzz/README.md), kept as a regression: each
/// is refused with a message or accepted with an effective configuration that loads again.
#[test]
fn inputs_that_crashed_the_fuzzer_now_load_or_are_refused() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz_regressions");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let bytes = std::fs::read(entry.unwrap().path()).unwrap();
        let Ok(text) = std::str::from_utf8(&bytes) else {
            continue;
        };
        if let Ok(s) = Scenario::parse(text, "fuzz") {
            let again = Scenario::parse(&s.effective_toml(), "fuzz");
            assert!(again.is_ok(), "{again:?}");
            assert_eq!(again.unwrap().name, s.name);
        }
        seen += 1;
    }
    assert!(seen > 0);
}

#[test]
fn names_and_paths_with_any_character_survive_the_effective_configuration() {
    for name in [
        "a\"b",
        "back\\slash",
        "tab\there",
        "form\u{c}feed",
        "ĵ unicode",
    ] {
        let text = format!(
            "name = {}\n[[traffic]]\nkind = \"flow\"\nsrc = 0\ndst = 1\nsize = 5\n",
            toml::Value::String(name.into())
        );
        let s = Scenario::parse(&text, "x").unwrap();
        let again = Scenario::parse(&s.effective_toml(), "x").unwrap();
        assert_eq!(again.name, name);
    }
}
