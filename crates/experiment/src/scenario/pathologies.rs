//! The pathology keys of `[fabric.rocev2]`: the PFC watchdog, the deadlock check and
//! rate-sample intervals, and `[[fabric.rocev2.pause_storm]]` entries.

use super::reader::{invalid, Ctx, Field, Raw};
use super::rocev2::{key, FileRoce};
use super::ScenarioError;
use fabricsim_core::units::Time;
use fabricsim_fabric::rocev2::{PauseStorm, PfcWatchdog, RoceConfig};
use serde::Deserialize;
use std::fmt::Write as _;
use toml::Spanned;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FilePauseStorm {
    host: Spanned<Raw>,
    start: Field,
    duration: Field,
}

/// Reads the watchdog, the check intervals and the pause storms into `roce`.
pub(super) fn parse(
    c: &Ctx,
    f: &FileRoce,
    roce: &mut RoceConfig,
    hosts: u32,
) -> Result<(), ScenarioError> {
    let watchdog = c.positive_time(&key("pfc_watchdog"), &f.pfc_watchdog)?;
    let restore = c.positive_time(&key("pfc_watchdog_restore"), &f.pfc_watchdog_restore)?;
    roce.watchdog = match (watchdog, restore) {
        (Some(t), r) => Some(PfcWatchdog {
            timeout: t,
            restore: r.unwrap_or(t),
        }),
        (None, Some(_)) => {
            return Err(invalid(format!(
                "{}: set without {}; it would do nothing",
                key("pfc_watchdog_restore"),
                key("pfc_watchdog")
            )))
        }
        (None, None) => None,
    };
    if let Some(t) = c.positive_time(&key("deadlock_check"), &f.deadlock_check)? {
        roce.deadlock_check = t;
    }
    if let Some(t) = c.positive_time(&key("rate_sample"), &f.rate_sample)? {
        roce.rate_sample = t;
    }
    if (roce.watchdog.is_some() || !f.pause_storm.is_empty()) && !roce.pfc {
        return Err(invalid(format!(
            "{}: pfc_watchdog and pause_storm need pfc = true",
            key("pfc")
        )));
    }
    for (i, st) in f.pause_storm.iter().enumerate() {
        let at = |k: &str| key(&format!("pause_storm[{i}].{k}"));
        let host = c.host(&at("host"), &st.host, hosts)?;
        let start = c.time(&at("start"), &st.start)?.unwrap_or(Time::ZERO);
        let end = c
            .positive_time(&at("duration"), &st.duration)?
            .map(|d| start + d);
        roce.pause_storms.push(PauseStorm { host, start, end });
    }
    Ok(())
}

/// A storm without end needs `stop_at`, or the run would never finish.
pub(super) fn check_ends(roce: &RoceConfig, stop_at: Option<Time>) -> Result<(), ScenarioError> {
    if stop_at.is_none() && roce.pause_storms.iter().any(|st| st.end.is_none()) {
        return Err(invalid(
            "fabric.rocev2.pause_storm: a storm without duration never ends; give it a duration or set stop_at".into(),
        ));
    }
    Ok(())
}

/// The check intervals and the watchdog, as `[fabric.rocev2]` keys.
pub(super) fn write_keys(r: &RoceConfig, s: &mut String) {
    let _ = writeln!(
        s,
        "deadlock_check = \"{}\"\nrate_sample = \"{}\"",
        r.deadlock_check, r.rate_sample
    );
    if let Some(w) = &r.watchdog {
        let _ = writeln!(
            s,
            "pfc_watchdog = \"{}\"\npfc_watchdog_restore = \"{}\"",
            w.timeout, w.restore
        );
    }
}

/// Every `[[fabric.rocev2.pause_storm]]` entry.
pub(super) fn write_storms(r: &RoceConfig, s: &mut String) {
    for st in &r.pause_storms {
        let _ = writeln!(
            s,
            "\n[[fabric.rocev2.pause_storm]]\nhost = {}\nstart = \"{}\"{}",
            st.host,
            st.start,
            st.end
                .map_or("\n# duration: without end".to_string(), |e| format!(
                    "\nduration = \"{}\"",
                    e - st.start
                ))
        );
    }
}
