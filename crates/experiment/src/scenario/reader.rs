//! Reading values out of the parsed TOML: every check names the key, the value as
//! written and its line.

use super::ScenarioError;
use fabricsim_core::units::{parse_quantity, BitRate, Dimension, HostId, Time};
use serde::Deserialize;
use std::path::Path;
use toml::Spanned;

/// The largest size a scenario may give: 512 GiB, so that a message in packets of the
/// smallest MTU (256 B) counts fewer than 2^31 of them.
pub(super) const MAX_SIZE: u64 = 512 << 30;
/// The longest time a scenario may give: one hour of simulated time.
const MAX_TIME: u64 = 3_600 * 1_000_000_000_000;
/// Rates from 1 Mb/s to 100 Tb/s: below, one packet would take longer than the run can
/// sensibly last; above, no link of any generation comes near.
const RATE_RANGE: (u64, u64) = (1_000_000, 100_000_000_000_000);
/// The rates of links and host resources that carry whole messages (links, NVLink, PCIe,
/// memory, CPU copies): at least 1 Gb/s, so the largest message takes under 2 hours.
const MIN_LINK_RATE: u64 = 1_000_000_000;

/// A value as written: a string with a unit, or a bare number.
#[derive(Deserialize, Clone, Debug)]
#[serde(untagged)]
pub(super) enum Raw {
    Int(i64),
    Float(f64),
    Str(String),
}

/// An optional key's value with its place in the file.
pub(super) type Field = Option<Spanned<Raw>>;

/// A number, or a range of three as `[low, base, high]`.
#[derive(Deserialize, Clone, Debug)]
#[serde(untagged)]
pub(super) enum RangeRaw {
    One(Raw),
    Three(Vec<Raw>),
}

/// An optional key that takes a number or `[low, base, high]`.
pub(super) type RangeField = Option<Spanned<RangeRaw>>;

/// A message as a scenario error.
pub(super) fn invalid(msg: String) -> ScenarioError {
    ScenarioError::Invalid(msg)
}

/// The value as the user wrote it: strings quoted.
fn show(r: &Raw) -> String {
    match r {
        Raw::Int(i) => i.to_string(),
        Raw::Float(f) => f.to_string(),
        Raw::Str(s) => format!("\"{s}\""),
    }
}

/// The scenario text, to turn spans into line numbers for error messages.
pub(super) struct Ctx<'a> {
    pub text: &'a str,
}

impl Ctx<'_> {
    /// The 1-based line where `span` starts.
    pub fn line(&self, span: std::ops::Range<usize>) -> usize {
        self.text[..span.start.min(self.text.len())]
            .matches('\n')
            .count()
            + 1
    }

    /// `line N: key = value: msg`.
    pub fn err(&self, key: &str, v: &Spanned<Raw>, msg: &str) -> ScenarioError {
        invalid(format!(
            "line {}: {key} = {}: {msg}",
            self.line(v.span()),
            show(v.get_ref())
        ))
    }

    /// A plain number from `lo` to `hi`, or `[low, base, high]` of them in order: a
    /// range (a number is a point).
    pub fn range(
        &self,
        key: &str,
        v: &RangeField,
        lo: f64,
        hi: f64,
    ) -> Result<Option<crate::catalog::Range>, ScenarioError> {
        let Some(v) = v else { return Ok(None) };
        let shown = match v.get_ref() {
            RangeRaw::One(r) => show(r),
            RangeRaw::Three(rs) => {
                format!("[{}]", rs.iter().map(show).collect::<Vec<_>>().join(", "))
            }
        };
        let fail = |msg: &str| {
            invalid(format!(
                "line {}: {key} = {shown}: {msg}",
                self.line(v.span())
            ))
        };
        let number = |r: &Raw| match r {
            Raw::Int(i) => Some(*i as f64),
            Raw::Float(x) => Some(*x),
            Raw::Str(_) => None,
        };
        let xs: Vec<f64> = match v.get_ref() {
            RangeRaw::One(r) => vec![number(r); 3].into_iter().collect::<Option<_>>(),
            RangeRaw::Three(rs) if rs.len() == 3 => rs.iter().map(number).collect(),
            RangeRaw::Three(_) => None,
        }
        .ok_or_else(|| fail("must be a plain number, or [low, base, high]"))?;
        if xs.iter().any(|x| !(lo..=hi).contains(x)) {
            return Err(fail(&format!("each must be from {lo} to {hi}")));
        }
        if !(xs[0] <= xs[1] && xs[1] <= xs[2]) {
            return Err(fail("must hold low <= base <= high"));
        }
        Ok(Some(crate::catalog::Range {
            low: xs[0],
            base: xs[1],
            high: xs[2],
        }))
    }

    /// A quantity of `dim` in its base unit (ps, b/s, bytes, mm): a string with a unit,
    /// or a plain integer where the dimension allows one (bytes; a time of 0).
    pub fn quantity(
        &self,
        key: &str,
        v: &Field,
        dim: Dimension,
    ) -> Result<Option<u64>, ScenarioError> {
        let Some(v) = v else { return Ok(None) };
        let value = match v.get_ref() {
            Raw::Str(s) => parse_quantity(s, dim).map_err(|m| self.err(key, v, &m.to_string()))?,
            Raw::Int(i) if dim == Dimension::Size && *i >= 0 => *i as u64,
            Raw::Int(i) if *i < 0 => return Err(self.err(key, v, "must not be negative")),
            Raw::Int(0) if dim == Dimension::Time => 0,
            _ => {
                return Err(self.err(
                    key,
                    v,
                    &format!(
                        "a {} needs a unit, as a string like \"{}\"",
                        dim.name(),
                        dim.example()
                    ),
                ))
            }
        };
        let max = match dim {
            Dimension::Size => Some((MAX_SIZE, "512 GiB")),
            Dimension::Time => Some((MAX_TIME, "1 h")),
            Dimension::Rate => Some((RATE_RANGE.1, "100 Tb/s")),
            _ => None,
        };
        if let Some((_, shown)) = max.filter(|&(max, _)| value > max) {
            return Err(self.err(key, v, &format!("a {} must be at most {shown}", dim.name())));
        }
        Ok(Some(value))
    }

    /// A quantity that must be above zero.
    pub fn positive(
        &self,
        key: &str,
        v: &Field,
        dim: Dimension,
    ) -> Result<Option<u64>, ScenarioError> {
        match self.quantity(key, v, dim)? {
            Some(0) => Err(self.err(
                key,
                v.as_ref().expect("parsed"),
                &format!("a {} must be above zero", dim.name()),
            )),
            other => Ok(other),
        }
    }

    /// A time (zero allowed).
    pub fn time(&self, key: &str, v: &Field) -> Result<Option<Time>, ScenarioError> {
        Ok(self.quantity(key, v, Dimension::Time)?.map(Time))
    }

    /// A time above zero.
    pub fn positive_time(&self, key: &str, v: &Field) -> Result<Option<Time>, ScenarioError> {
        Ok(self.positive(key, v, Dimension::Time)?.map(Time))
    }

    /// A rate of at least 1 Mb/s.
    pub fn rate(&self, key: &str, v: &Field) -> Result<Option<BitRate>, ScenarioError> {
        self.rate_from(key, v, RATE_RANGE.0, "1 Mb/s")
    }

    /// The rate of a link or host resource that carries whole messages: at least 1 Gb/s.
    pub fn link_rate(&self, key: &str, v: &Field) -> Result<Option<BitRate>, ScenarioError> {
        self.rate_from(key, v, MIN_LINK_RATE, "1 Gb/s")
    }

    fn rate_from(
        &self,
        key: &str,
        v: &Field,
        min: u64,
        shown: &str,
    ) -> Result<Option<BitRate>, ScenarioError> {
        match self.positive(key, v, Dimension::Rate)? {
            Some(r) if r < min => Err(self.err(
                key,
                v.as_ref().expect("parsed"),
                &format!("a rate must be at least {shown}"),
            )),
            r => Ok(r.map(BitRate)),
        }
    }

    /// A plain number (integer or decimal) from `lo` to `hi`.
    pub fn number(
        &self,
        key: &str,
        v: &Field,
        lo: f64,
        hi: f64,
    ) -> Result<Option<f64>, ScenarioError> {
        let Some(v) = v else { return Ok(None) };
        let x = match v.get_ref() {
            Raw::Int(i) => *i as f64,
            Raw::Float(x) => *x,
            Raw::Str(_) => return Err(self.err(key, v, "must be a plain number")),
        };
        if !(lo..=hi).contains(&x) {
            return Err(self.err(key, v, &format!("must be from {lo} to {hi}")));
        }
        Ok(Some(x))
    }

    /// A plain integer from `min` to `max`.
    pub fn count(
        &self,
        key: &str,
        v: &Field,
        min: u64,
        max: u64,
    ) -> Result<Option<u64>, ScenarioError> {
        let Some(s) = v else { return Ok(None) };
        match s.get_ref() {
            Raw::Int(i) if *i >= min as i64 && *i as u64 <= max => Ok(Some(*i as u64)),
            Raw::Int(_) => {
                Err(self.err(key, s, &format!("must be an integer from {min} to {max}")))
            }
            _ => Err(self.err(key, s, "must be a plain integer")),
        }
    }

    /// An entry of a list of plain integers from `min` to `max`.
    pub fn entry(
        &self,
        key: &str,
        v: &Spanned<Raw>,
        min: u64,
        max: u64,
    ) -> Result<u64, ScenarioError> {
        Ok(self.count(key, &Some(v.clone()), min, max)?.expect("given"))
    }

    /// A host index below `hosts`.
    pub fn host(&self, key: &str, v: &Spanned<Raw>, hosts: u32) -> Result<HostId, ScenarioError> {
        match v.get_ref() {
            Raw::Int(i) if *i >= 0 && (*i as u64) < hosts as u64 => Ok(HostId(*i as u32)),
            Raw::Int(_) => Err(self.err(
                key,
                v,
                &format!(
                    "host index out of range: the topology has hosts 0 to {}",
                    hosts - 1
                ),
            )),
            _ => Err(self.err(key, v, "must be a host index (an integer)")),
        }
    }

    /// One of `allowed` names: `line N: key = "value": expected one of [...]`.
    pub fn choice<'v>(
        &self,
        key: &str,
        v: &'v Option<Spanned<String>>,
        allowed: &[&str],
    ) -> Result<Option<&'v str>, ScenarioError> {
        match v {
            None => Ok(None),
            Some(s) if allowed.contains(&s.get_ref().as_str()) => Ok(Some(s.get_ref())),
            Some(s) => Err(self.unexpected(key, s, &format!("one of {allowed:?}"))),
        }
    }

    /// A name parsed by `parse`, else `line N: key = "value": expected one of names`.
    pub fn named<T>(
        &self,
        key: &str,
        v: &Spanned<String>,
        parse: impl Fn(&str) -> Option<T>,
        names: &[&str],
    ) -> Result<T, ScenarioError> {
        parse(v.get_ref()).ok_or_else(|| self.unexpected(key, v, &format!("one of {names:?}")))
    }

    /// `line N: key = "value": expected {what}`.
    pub fn unexpected(&self, key: &str, v: &Spanned<String>, what: &str) -> ScenarioError {
        invalid(format!(
            "line {}: {key} = \"{}\": expected {what}",
            self.line(v.span()),
            v.get_ref()
        ))
    }

    /// Reads the file a `key = "path"` entry names, relative to `base`. Returns the path
    /// as written and the text.
    pub fn read_named(
        &self,
        base: &Path,
        key: &str,
        path: &Spanned<String>,
    ) -> Result<(String, String), ScenarioError> {
        let shown = path.get_ref().clone();
        let full = base.join(&shown);
        let text = std::fs::read_to_string(&full).map_err(|e| {
            invalid(format!(
                "line {}: {key} = \"{shown}\": cannot read {}: {e}",
                self.line(path.span()),
                full.display()
            ))
        })?;
        Ok((shown, text))
    }
}

/// Refuses the first of `keys` that is present: `{prefix}{key}: not a key of {what}`.
pub(super) fn reject_present(
    keys: &[(&str, bool)],
    prefix: &str,
    what: &str,
) -> Result<(), ScenarioError> {
    match keys.iter().find(|(_, present)| *present) {
        Some((k, _)) => Err(invalid(format!("{prefix}{k}: not a key of {what}"))),
        None => Ok(()),
    }
}
