//! The cost and power catalog: one entry per item a cluster network is built from
//! (switches, NICs, transceivers, cables, GPUs, software lines), each with its price,
//! power, source and year. The built-in catalog is `catalog/catalog.toml`; a user's file
//! (`--catalog FILE`) or a scenario's `[catalog.NAME]` tables override it key by key.

use fabricsim_core::units::{parse_quantity, BitRate, Dimension, Time};
use fabricsim_fabric::FabricKind;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use toml::{Table, Value};

/// The catalog shipped with fabricsim.
const BUILTIN: &str = include_str!("../../../catalog/catalog.toml");

/// What an entry is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ItemKind {
    Switch,
    Nic,
    Transceiver,
    Cable,
    Fiber,
    Aoc,
    Gpu,
    Software,
}

const KINDS: [(&str, ItemKind); 8] = [
    ("switch", ItemKind::Switch),
    ("nic", ItemKind::Nic),
    ("transceiver", ItemKind::Transceiver),
    ("cable", ItemKind::Cable),
    ("fiber", ItemKind::Fiber),
    ("aoc", ItemKind::Aoc),
    ("gpu", ItemKind::Gpu),
    ("software", ItemKind::Software),
];

impl ItemKind {
    pub fn name(self) -> &'static str {
        KINDS.iter().find(|k| k.1 == self).expect("listed").0
    }
}

/// What a software line is counted per.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Per {
    Switch,
    Nic,
}

/// How far a figure can be trusted (SCENARIO.md v3's `confidence`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Confidence {
    /// Published by the vendor, a listing or a measurement.
    Sourced,
    /// An analyst's or fabricsim's estimate from published figures.
    Estimate,
    /// No published figure found: a value to replace with your quote.
    Placeholder,
}

const CONFIDENCES: [(&str, Confidence); 3] = [
    ("sourced", Confidence::Sourced),
    ("estimate", Confidence::Estimate),
    ("placeholder", Confidence::Placeholder),
];

impl Confidence {
    pub fn name(self) -> &'static str {
        CONFIDENCES.iter().find(|c| c.1 == self).expect("listed").0
    }
}

/// A figure with the range published figures give it: low <= base <= high.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Range {
    pub low: f64,
    pub base: f64,
    pub high: f64,
}

impl Range {
    /// A figure nobody doubts, or that the user gave as theirs.
    pub fn point(x: f64) -> Range {
        Range {
            low: x,
            base: x,
            high: x,
        }
    }

    pub fn is_point(&self) -> bool {
        self.low == self.high
    }
}

/// One catalog entry.
#[derive(Clone, Debug, PartialEq)]
pub struct Item {
    pub name: String,
    pub kind: ItemKind,
    /// The fabric it belongs to; `None` for either.
    pub fabric: Option<FabricKind>,
    pub description: String,
    /// Ports of a switch or NIC; ports one transceiver serves.
    pub ports: u32,
    pub port_rate: Option<BitRate>,
    /// Port-to-port latency of a switch; a NIC's latency on each side (send, receive).
    pub latency: Option<Time>,
    /// The latency's range in picoseconds (`low_latency`, `high_latency`; a point if
    /// not given).
    pub latency_range: Option<Range>,
    /// How far a copper cable reaches, in millimetres.
    pub reach_mm: Option<u64>,
    pub per: Option<Per>,
    pub price_usd: f64,
    /// The price's range (`low_usd`, `high_usd`; a point if not given).
    pub price_range: Range,
    pub watts: f64,
    pub source: String,
    pub year: u32,
    pub confidence: Confidence,
    /// A GPU entry whose price is a server's share with its NICs (`includes_nic`): the
    /// bill then takes one NIC's price off each GPU, so that nothing is counted twice.
    pub includes_nic: bool,
}

impl Item {
    /// Ports of this switch at `rate`: each port splits into port_rate / rate lanes
    /// (a 400G port as two 200G), or `None` if the rates do not divide.
    pub fn ports_at(&self, rate: BitRate) -> Option<u32> {
        let own = self.port_rate?;
        (own.bps() >= rate.bps() && own.bps() % rate.bps() == 0)
            .then(|| self.ports * (own.bps() / rate.bps()) as u32)
    }
}

/// Every entry by name (names in order, so every listing is deterministic).
#[derive(Clone, Debug, PartialEq)]
pub struct Catalog {
    raw: BTreeMap<String, Table>,
    items: BTreeMap<String, Item>,
}

impl Catalog {
    /// The catalog shipped in `catalog/catalog.toml`.
    pub fn builtin() -> Catalog {
        // Parsed once per process: every scenario load starts from it.
        static PARSED: std::sync::OnceLock<Catalog> = std::sync::OnceLock::new();
        PARSED
            .get_or_init(|| {
                let mut c = Catalog {
                    raw: BTreeMap::new(),
                    items: BTreeMap::new(),
                };
                c.merge_text(BUILTIN, "catalog/catalog.toml")
                    .expect("the built-in catalog is valid");
                c
            })
            .clone()
    }

    /// Overrides entries with a catalog file's text; `origin` names it in errors.
    pub fn merge_text(&mut self, text: &str, origin: &str) -> Result<(), String> {
        let table: Table =
            toml::from_str(text).map_err(|e| format!("{origin}: {}", e.to_string().trim_end()))?;
        self.merge(&table, &format!("{origin}: "))
    }

    /// Overrides entries key by key with `table` (`NAME = { key = value, ... }`); a new
    /// entry must be complete. Errors start with `prefix` and name the entry and key.
    pub fn merge(&mut self, table: &Table, prefix: &str) -> Result<(), String> {
        for (name, value) in table {
            let Value::Table(fields) = value else {
                return Err(format!(
                    "{prefix}catalog.{name} = {value}: an entry is a table of keys"
                ));
            };
            // Checked on a copy: a bad override leaves the catalog as it was.
            let mut entry = self.raw.get(name).cloned().unwrap_or_default();
            // A new figure without its range is the user's own: the old range and
            // confidence no longer describe it.
            for (figure, range) in [
                ("price_usd", ["low_usd", "high_usd"]),
                ("latency", ["low_latency", "high_latency"]),
            ] {
                if fields.contains_key(figure) {
                    for k in range {
                        entry.remove(k);
                    }
                    if !fields.contains_key("confidence") && figure == "price_usd" {
                        entry.insert("confidence".into(), Value::String("sourced".into()));
                    }
                }
            }
            for (k, v) in fields {
                entry.insert(k.clone(), v.clone());
            }
            let item = item(name, &entry).map_err(|m| format!("{prefix}{m}"))?;
            self.raw.insert(name.clone(), entry);
            self.items.insert(name.clone(), item);
        }
        Ok(())
    }

    pub fn get(&self, name: &str) -> Option<&Item> {
        self.items.get(name)
    }

    /// The entry `name` of `kind` (and usable on `fabric`), else an error naming `key`.
    pub fn require(
        &self,
        key: &str,
        name: &str,
        kind: ItemKind,
        fabric: Option<FabricKind>,
    ) -> Result<&Item, String> {
        let fits = |i: &&Item| {
            i.kind == kind && (i.fabric.is_none() || i.fabric == fabric || fabric.is_none())
        };
        match self.items.get(name) {
            Some(i) if fits(&i) => Ok(i),
            Some(i) => Err(format!(
                "{key} = \"{name}\": the catalog entry is a {} for {}, not a {}{}",
                i.kind.name(),
                i.fabric.map_or("either fabric", |f| f.name()),
                kind.name(),
                fabric.map_or(String::new(), |f| format!(" for {}", f.name()))
            )),
            None => {
                let names: Vec<&str> = self
                    .items
                    .values()
                    .filter(|i| fits(i))
                    .map(|i| i.name.as_str())
                    .collect();
                Err(format!(
                    "{key} = \"{name}\": not in the catalog; its {}s are {names:?}",
                    kind.name()
                ))
            }
        }
    }

    /// The entry `name` as a `[catalog.NAME]` table of a scenario.
    pub fn entry_toml(&self, name: &str) -> String {
        let mut s = format!("\n[catalog.{}]\n", quoted_key(name));
        if let Some(t) = self.raw.get(name) {
            for (k, v) in t {
                let _ = writeln!(s, "{k} = {v}");
            }
        }
        s
    }
}

/// A TOML key, quoted unless bare.
fn quoted_key(k: &str) -> String {
    if !k.is_empty()
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        k.to_string()
    } else {
        Value::String(k.to_string()).to_string()
    }
}

const KEYS: [&str; 19] = [
    "kind",
    "fabric",
    "description",
    "ports",
    "port_rate",
    "latency",
    "low_latency",
    "high_latency",
    "reach",
    "per",
    "price_usd",
    "low_usd",
    "high_usd",
    "watts",
    "source",
    "year",
    "confidence",
    "includes_nic",
    "note",
];

/// Validates one entry's keys into an [`Item`].
fn item(name: &str, t: &Table) -> Result<Item, String> {
    let at = |k: &str, v: &Value, why: &str| format!("catalog.{name}.{k} = {v}: {why}");
    if let Some(k) = t.keys().find(|k| !KEYS.contains(&k.as_str())) {
        return Err(format!(
            "catalog.{name}.{k}: not a catalog key (keys: {})",
            KEYS.join(", ")
        ));
    }
    let need = |k: &str| {
        t.get(k)
            .ok_or_else(|| format!("catalog.{name}: a new entry needs `{k}`"))
    };
    let text = |k: &str| -> Result<Option<String>, String> {
        match t.get(k) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(v) => Err(at(k, v, "must be a string")),
        }
    };
    let number = |k: &str| -> Result<f64, String> {
        let v = need(k)?;
        let x = match v {
            Value::Integer(i) => *i as f64,
            Value::Float(f) => *f,
            _ => return Err(at(k, v, "must be a number")),
        };
        if !(0.0..1e12).contains(&x) {
            return Err(at(k, v, "must be from 0 to 10^12"));
        }
        Ok(x)
    };
    let quantity = |k: &str, dim: Dimension| -> Result<Option<u64>, String> {
        match t.get(k) {
            None => Ok(None),
            Some(v @ Value::String(s)) => parse_quantity(s, dim)
                .map(Some)
                .map_err(|m| at(k, v, &m.to_string())),
            Some(v) => Err(at(
                k,
                v,
                &format!("a {} with its unit, as a string", dim.name()),
            )),
        }
    };
    let kind_v = need("kind")?;
    let kind = KINDS
        .iter()
        .find(|(n, _)| kind_v.as_str() == Some(n))
        .map(|k| k.1)
        .ok_or_else(|| {
            at(
                "kind",
                kind_v,
                &format!("expected one of {:?}", KINDS.map(|k| k.0)),
            )
        })?;
    let fabric = match text("fabric")?.as_deref() {
        None | Some("any") => None,
        Some("infiniband") => Some(FabricKind::Infiniband),
        Some("rocev2") => Some(FabricKind::Rocev2),
        Some(_) => {
            return Err(at(
                "fabric",
                &t["fabric"],
                "expected \"infiniband\", \"rocev2\" or \"any\"",
            ))
        }
    };
    let ports = match t.get("ports") {
        None => 1,
        Some(v @ Value::Integer(i)) if !(1..=4096).contains(i) => {
            return Err(at("ports", v, "must be an integer from 1 to 4096"))
        }
        Some(Value::Integer(i)) => *i as u32,
        Some(v) => return Err(at("ports", v, "must be an integer")),
    };
    let per = match text("per")?.as_deref() {
        None => None,
        Some("switch") => Some(Per::Switch),
        Some("nic") => Some(Per::Nic),
        Some(_) => return Err(at("per", &t["per"], "expected \"switch\" or \"nic\"")),
    };
    let year = match need("year")? {
        Value::Integer(y) if (1990..=2100).contains(y) => *y as u32,
        v => {
            return Err(at(
                "year",
                v,
                "must be a year (an integer from 1990 to 2100)",
            ))
        }
    };
    let confidence = match t.get("confidence") {
        None => Confidence::Sourced,
        Some(v) => CONFIDENCES
            .iter()
            .find(|(n, _)| v.as_str() == Some(n))
            .map(|c| c.1)
            .ok_or_else(|| {
                at(
                    "confidence",
                    v,
                    &format!("expected one of {:?}", CONFIDENCES.map(|c| c.0)),
                )
            })?,
    };
    let includes_nic = match t.get("includes_nic") {
        None => false,
        Some(Value::Boolean(b)) if !*b || kind == ItemKind::Gpu => *b,
        Some(v @ Value::Boolean(_)) => {
            return Err(at(
                "includes_nic",
                v,
                "only a GPU entry's price can include its NIC",
            ))
        }
        Some(v) => return Err(at("includes_nic", v, "must be true or false")),
    };
    let price_usd = number("price_usd")?;
    let optional = |k: &str| t.contains_key(k).then(|| number(k)).transpose();
    let price_range = range(
        name,
        "usd",
        price_usd,
        optional("low_usd")?,
        optional("high_usd")?,
    )?;
    let latency = quantity("latency", Dimension::Time)?;
    let latency_range = match latency {
        None if t.contains_key("low_latency") || t.contains_key("high_latency") => {
            return Err(format!(
                "catalog.{name}: `low_latency` and `high_latency` need `latency`"
            ))
        }
        None => None,
        Some(l) => Some(range(
            name,
            "latency",
            l as f64,
            quantity("low_latency", Dimension::Time)?.map(|x| x as f64),
            quantity("high_latency", Dimension::Time)?.map(|x| x as f64),
        )?),
    };
    let port_rate = quantity("port_rate", Dimension::Rate)?.map(BitRate);
    if kind == ItemKind::Switch && port_rate.is_none() {
        return Err(format!("catalog.{name}: a switch needs `port_rate`"));
    }
    if kind == ItemKind::Software && per.is_none() {
        return Err(format!(
            "catalog.{name}: a software line needs `per` (\"switch\" or \"nic\")"
        ));
    }
    let source = text("source")?.unwrap_or_default();
    if source.trim().is_empty() {
        return Err(format!(
            "catalog.{name}: every entry needs a `source` (say \"unverified\" if there is none)"
        ));
    }
    Ok(Item {
        name: name.to_string(),
        kind,
        fabric,
        description: text("description")?.unwrap_or_else(|| name.to_string()),
        ports,
        port_rate,
        latency: latency.map(Time),
        latency_range,
        reach_mm: quantity("reach", Dimension::Length)?,
        per,
        price_usd,
        price_range,
        watts: number("watts")?,
        source,
        year,
        confidence,
        includes_nic,
    })
}

/// The range `low_KEY ..= high_KEY` around `base` (either end absent: the base).
fn range(
    name: &str,
    key: &str,
    base: f64,
    low: Option<f64>,
    high: Option<f64>,
) -> Result<Range, String> {
    let r = Range {
        low: low.unwrap_or(base),
        base,
        high: high.unwrap_or(base),
    };
    if r.low <= r.base && r.base <= r.high {
        Ok(r)
    } else {
        let base_key = if key == "usd" { "price_usd" } else { key };
        Err(format!(
            "catalog.{name}.low_{key} = {}, {base_key} = {}, high_{key} = {}: must hold low <= base <= high",
            r.low, r.base, r.high
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_builtin_catalog_has_every_default_with_a_source() {
        let c = Catalog::builtin();
        let ib = c
            .require(
                "s",
                "quantum-2-qm9700",
                ItemKind::Switch,
                Some(FabricKind::Infiniband),
            )
            .unwrap();
        assert_eq!(ib.ports_at(BitRate::gbps(400)), Some(64));
        assert_eq!(ib.ports_at(BitRate::gbps(200)), Some(128));
        let eth = c.get("spectrum-4-sn5600").unwrap();
        assert_eq!(eth.ports_at(BitRate::gbps(400)), Some(128));
        assert!(c
            .items
            .values()
            .all(|i| !i.source.is_empty() && i.year >= 2022));
    }

    #[test]
    fn every_builtin_price_has_a_range_around_it_and_a_confidence() {
        let c = Catalog::builtin();
        for i in c.items.values() {
            let r = i.price_range;
            assert!(r.low <= r.base && r.base <= r.high, "{}", i.name);
            assert_eq!(r.base, i.price_usd, "{}", i.name);
            if i.price_usd > 0.0 {
                assert!(
                    !r.is_point(),
                    "{}: a price nobody publishes needs its range",
                    i.name
                );
            }
            if let Some(l) = i.latency_range {
                assert_eq!(l.base, i.latency.unwrap().0 as f64, "{}", i.name);
            }
        }
        let eth = c.get("spectrum-4-sn5600").unwrap();
        assert_eq!(eth.confidence, Confidence::Estimate);
        assert!(!eth.latency_range.unwrap().is_point());
    }

    #[test]
    fn a_price_given_alone_is_the_users_own_point() {
        let mut c = Catalog::builtin();
        c.merge_text("[spectrum-4-sn5600]\nprice_usd = 41000\n", "mine.toml")
            .unwrap();
        let e = c.get("spectrum-4-sn5600").unwrap();
        assert_eq!(e.price_range, Range::point(41000.0));
        assert_eq!(e.confidence, Confidence::Sourced);
        assert!(
            !e.latency_range.unwrap().is_point(),
            "the latency's range stays"
        );
        c.merge_text(
            "[spectrum-4-sn5600]\nprice_usd = 41000\nlow_usd = 30000\nconfidence = \"placeholder\"\n",
            "mine.toml",
        )
        .unwrap();
        let e = c.get("spectrum-4-sn5600").unwrap();
        assert_eq!((e.price_range.low, e.price_range.high), (30000.0, 41000.0));
        assert_eq!(e.confidence, Confidence::Placeholder);
        for (text, want) in [
            (
                "high_usd = 100",
                "catalog.spectrum-4-sn5600.low_usd = 30000, price_usd = 41000, high_usd = 100: must hold low <= base <= high",
            ),
            (
                "confidence = \"sure\"",
                "catalog.spectrum-4-sn5600.confidence = \"sure\": expected one of",
            ),
            (
                "includes_nic = true",
                "only a GPU entry's price can include its NIC",
            ),
        ] {
            let err = c
                .merge_text(&format!("[spectrum-4-sn5600]\n{text}\n"), "mine.toml")
                .unwrap_err();
            assert!(err.contains(want), "{err}");
        }
    }

    #[test]
    fn overrides_go_key_by_key_and_errors_name_the_key() {
        let mut c = Catalog::builtin();
        c.merge_text("[h100-sxm]\nprice_usd = 25000\n", "mine.toml")
            .unwrap();
        let g = c.get("h100-sxm").unwrap();
        assert_eq!(g.price_usd, 25000.0);
        assert_eq!(g.watts, 1275.0, "other keys kept");
        let e = c
            .merge_text("[h100-sxm]\nprice_usd = \"cheap\"\n", "mine.toml")
            .unwrap_err();
        assert!(
            e.contains("mine.toml: catalog.h100-sxm.price_usd = \"cheap\": must be a number"),
            "{e}"
        );
        assert_eq!(
            c.get("h100-sxm").unwrap().price_usd,
            25000.0,
            "a bad override changes nothing"
        );
        let e = c
            .merge_text("[new-switch]\nkind = \"switch\"\n", "f")
            .unwrap_err();
        assert!(
            e.contains("f: catalog.new-switch: a new entry needs `"),
            "{e}"
        );
        assert!(c.get("new-switch").is_none());
        let e = c
            .require(
                "cluster.switch.rocev2",
                "quantum-2-qm9700",
                ItemKind::Switch,
                Some(FabricKind::Rocev2),
            )
            .unwrap_err();
        assert!(e.contains("for infiniband"), "{e}");
    }
}
