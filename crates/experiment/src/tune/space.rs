//! The tuner's search space: each RoCEv2 setting with the range switches and NICs
//! accept, mapped from the unit interval; a point of the unit cube becomes the scenario
//! keys it sets. The quasi-random start and the load scaling for robustness live here.

use crate::sweep;
use fabricsim_core::units::{parse_quantity, Dimension};

/// How a setting is written in the scenario.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    /// A size in bytes.
    Bytes,
    /// A rate, written in Mb/s.
    Mbps,
    /// A time, written in ns.
    Ns,
    /// A plain number.
    Plain,
    /// A whole number.
    Count,
}

/// One setting: its scenario key, its range and how it is spread over it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Knob {
    pub key: &'static str,
    pub low: f64,
    pub high: f64,
    /// Spread logarithmically (a rate or a threshold over decades) or linearly.
    pub log: bool,
    pub unit: Unit,
    /// Where the range comes from.
    pub source: &'static str,
}

const DOCA: &str = "NVIDIA DOCA \"DCQCN CC Parameters\" names the firmware parameter; the range is unverified (values a ConnectX accepts, as fabricsim assumes)";

/// The settings searched. `congestion_control` is first: below one half of its
/// interval DCQCN runs, above it none does (PFC only, as Meta ran at 400G), and the
/// DCQCN settings are then left out.
pub const KNOBS: [Knob; 15] = [
    Knob {
        key: "fabric.rocev2.congestion_control",
        low: 0.0,
        high: 1.0,
        log: false,
        unit: Unit::Plain,
        source: "dcqcn or none (docs/REFERENCE.md 8b: Meta ran DCQCN off at 400G)",
    },
    Knob {
        key: "fabric.rocev2.ecn.kmin",
        low: 5_000.0,
        high: 2_000_000.0,
        log: true,
        unit: Unit::Bytes,
        source: "WRED/ECN minimum threshold; switches accept bytes to the buffer's size (range unverified)",
    },
    Knob {
        key: "fabric.rocev2.ecn.kmax",
        low: 1.0,
        high: 10.0,
        log: true,
        unit: Unit::Bytes,
        source: "WRED/ECN maximum threshold, searched as a multiple of kmin (range unverified)",
    },
    Knob {
        key: "fabric.rocev2.ecn.pmax",
        low: 0.01,
        high: 1.0,
        log: true,
        unit: Unit::Plain,
        source: "WRED marking probability at kmax, 1-100 % (SONiC's wred_*_drop_probability)",
    },
    Knob {
        key: "fabric.rocev2.alpha_shift",
        low: 0.0,
        high: 6.0,
        log: false,
        unit: Unit::Count,
        source: "the shared buffer's dynamic threshold alpha = 2^-shift, 1/64 to 1 (SONiC's dynamic_th -6 to 0, in powers of two)",
    },
    Knob {
        key: "fabric.rocev2.reserve",
        low: 1024.0,
        high: 16_384.0,
        log: true,
        unit: Unit::Bytes,
        source: "guaranteed bytes per ingress queue (range unverified)",
    },
    Knob {
        key: "fabric.rocev2.dcqcn_g",
        low: 1.0 / 1024.0,
        high: 1.0 / 16.0,
        log: true,
        unit: Unit::Plain,
        source: DOCA,
    },
    Knob {
        key: "fabric.rocev2.alpha_period",
        low: 1_000.0,
        high: 100_000.0,
        log: true,
        unit: Unit::Ns,
        source: DOCA,
    },
    Knob {
        key: "fabric.rocev2.increase_period",
        low: 1_000.0,
        high: 1_000_000.0,
        log: true,
        unit: Unit::Ns,
        source: DOCA,
    },
    Knob {
        key: "fabric.rocev2.byte_counter",
        low: 65_536.0,
        high: 64_000_000.0,
        log: true,
        unit: Unit::Bytes,
        source: DOCA,
    },
    Knob {
        key: "fabric.rocev2.rate_ai",
        low: 1.0,
        high: 2_000.0,
        log: true,
        unit: Unit::Mbps,
        source: DOCA,
    },
    Knob {
        key: "fabric.rocev2.rate_hai",
        low: 10.0,
        high: 20_000.0,
        log: true,
        unit: Unit::Mbps,
        source: DOCA,
    },
    Knob {
        key: "fabric.rocev2.min_rate",
        low: 1.0,
        high: 10_000.0,
        log: true,
        unit: Unit::Mbps,
        source: DOCA,
    },
    Knob {
        key: "fabric.rocev2.rate_decrease_period",
        low: 1_000.0,
        high: 100_000.0,
        log: true,
        unit: Unit::Ns,
        source: DOCA,
    },
    Knob {
        key: "fabric.rocev2.cnp_interval",
        low: 1_000.0,
        high: 100_000.0,
        log: true,
        unit: Unit::Ns,
        source: DOCA,
    },
];

/// The DCQCN keys a scenario may hold, dropped when a trial runs without DCQCN.
const DCQCN_KEYS: [&str; 12] = [
    "dcqcn_preset",
    "dcqcn_g",
    "alpha_period",
    "increase_period",
    "byte_counter",
    "fast_recovery_steps",
    "rate_ai",
    "rate_hai",
    "min_rate",
    "rate_decrease_period",
    "cnp_interval",
    "congestion_control",
];

impl Knob {
    /// The setting's value at `u` in [0, 1].
    fn value(&self, u: f64) -> f64 {
        let v = if self.log {
            self.low * (self.high / self.low).powf(u)
        } else {
            self.low + (self.high - self.low) * u
        };
        if self.unit == Unit::Plain {
            v
        } else {
            v.round()
        }
    }

    /// A value as the scenario writes it.
    fn write(&self, v: f64) -> String {
        match self.unit {
            Unit::Bytes | Unit::Count | Unit::Plain => {
                if self.unit == Unit::Plain {
                    format!("{v:.6}")
                } else {
                    format!("{v:.0}")
                }
            }
            Unit::Mbps => format!("{v:.0}Mbps"),
            Unit::Ns => format!("{v:.0}ns"),
        }
    }
}

/// A setting's range as the report shows it.
pub fn range_text(k: &Knob) -> String {
    if k.key == KNOBS[0].key {
        return "dcqcn or none".into();
    }
    let show = |v: f64| match k.unit {
        Unit::Mbps => format!("{} Mb/s", crate::decision::tick(&v)),
        Unit::Ns => format!("{} us", crate::decision::tick(&(v / 1e3))),
        Unit::Bytes if k.key.ends_with("kmax") => format!("{}x kmin", crate::decision::tick(&v)),
        Unit::Bytes => format!("{} B", crate::decision::tick(&v)),
        _ => crate::decision::tick(&v),
    };
    format!(
        "{} to {}{}",
        show(k.low),
        show(k.high),
        if k.log { ", log" } else { "" }
    )
}

/// The scenario keys point `x` sets: without DCQCN (the first coordinate at one half or
/// above) only the buffer and ECN settings and `congestion_control = "none"`.
pub fn parameters(x: &[f64]) -> Vec<(String, String)> {
    let dcqcn = x[0] < 0.5;
    let mut v = vec![(
        KNOBS[0].key.to_string(),
        if dcqcn { "dcqcn" } else { "none" }.to_string(),
    )];
    let kmin = KNOBS[1].value(x[1]);
    for (k, &u) in KNOBS.iter().zip(x).skip(1) {
        if !dcqcn && k.key.starts_with("fabric.rocev2.") && is_dcqcn(k.key) {
            continue;
        }
        let value = match k.key {
            // kmax is searched as a multiple of kmin.
            "fabric.rocev2.ecn.kmax" => (kmin * k.value(u)).round(),
            _ => k.value(u),
        };
        v.push((k.key.to_string(), k.write(value)));
    }
    v
}

/// Whether `key` is a DCQCN setting.
fn is_dcqcn(key: &str) -> bool {
    let last = key.rsplit('.').next().unwrap_or(key);
    DCQCN_KEYS.contains(&last) && last != "congestion_control"
}

/// Sets `parameters` in the scenario `doc`; without DCQCN, first removes the DCQCN keys
/// the scenario holds (they would do nothing, and the scenario refuses them).
pub fn apply(doc: &mut toml::Table, parameters: &[(String, String)]) -> Result<(), String> {
    let none = parameters
        .iter()
        .any(|(k, v)| k == KNOBS[0].key && v == "none");
    if none {
        if let Some(toml::Value::Table(roce)) = doc
            .get_mut("fabric")
            .and_then(|f| f.as_table_mut())
            .and_then(|f| f.get_mut("rocev2"))
        {
            for k in DCQCN_KEYS {
                roce.remove(k);
            }
        }
    }
    for (k, v) in parameters {
        let value = match k.as_str() {
            "fabric.rocev2.congestion_control" => toml::Value::String(v.clone()),
            _ => sweep::toml_value(v),
        };
        sweep::set_key(doc, k, value)?;
    }
    Ok(())
}

/// Scales every traffic entry's load by `factor`: its `load` where it has one (below
/// 0.99), else its `size` (to whole bytes).
pub fn scale_load(doc: &mut toml::Table, factor: f64) -> Result<(), String> {
    let Some(toml::Value::Array(traffic)) = doc.get_mut("traffic") else {
        return Ok(());
    };
    for (i, t) in traffic.iter_mut().enumerate() {
        let Some(t) = t.as_table_mut() else { continue };
        if let Some(load) = t.get("load").and_then(toml::Value::as_float) {
            t.insert("load".into(), toml::Value::Float((load * factor).min(0.99)));
        } else if let Some(size) = t.get("size") {
            let bytes = match size {
                toml::Value::Integer(b) => *b as u64,
                toml::Value::String(s) => parse_quantity(s, Dimension::Size)
                    .map_err(|e| format!("traffic.{i}.size = \"{s}\": {e}"))?,
                _ => continue,
            };
            let scaled = ((bytes as f64 * factor).round() as i64).max(1);
            t.insert("size".into(), toml::Value::Integer(scaled));
        }
    }
    Ok(())
}

/// `n` points of the unit cube from a scrambled Halton sequence: one prime base per
/// setting, each coordinate shifted by a seeded offset (Cranley-Patterson rotation), so
/// a seed gives its own well-spread start.
pub fn halton(n: usize, seed: u64) -> Vec<Vec<f64>> {
    const PRIMES: [u64; 15] = [2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47];
    use rand::{Rng, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ 0x7475_6e65); // "tune"
    let shift: Vec<f64> = PRIMES.iter().map(|_| rng.gen::<f64>()).collect();
    (1..=n as u64)
        .map(|i| {
            PRIMES
                .iter()
                .zip(&shift)
                .map(|(&b, s)| (radical_inverse(i, b) + s).fract())
                .collect()
        })
        .collect()
}

/// The van der Corput radical inverse of `i` in base `b`.
fn radical_inverse(mut i: u64, b: u64) -> f64 {
    let (mut x, mut f) = (0.0, 1.0 / b as f64);
    while i > 0 {
        x += (i % b) as f64 * f;
        i /= b;
        f /= b as f64;
    }
    x
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn halton_points_fill_the_cube_evenly() {
        let pts = halton(64, 1);
        assert_eq!(pts.len(), 64);
        for d in 0..KNOBS.len() {
            // Each coordinate has points in every quarter of its interval.
            for q in 0..4 {
                let lo = q as f64 / 4.0;
                assert!(
                    pts.iter().any(|p| p[d] >= lo && p[d] < lo + 0.25),
                    "dimension {d}, quarter {q}"
                );
            }
        }
        assert_eq!(halton(8, 3), halton(8, 3), "a seed gives its own start");
        assert_ne!(halton(8, 3), halton(8, 4));
    }

    #[test]
    fn a_point_sets_the_keys_in_their_ranges() {
        let p = parameters(&[0.0; 15]);
        assert_eq!(
            p[0],
            ("fabric.rocev2.congestion_control".into(), "dcqcn".into())
        );
        assert!(p.contains(&("fabric.rocev2.rate_ai".into(), "1Mbps".into())));
        assert!(p.contains(&("fabric.rocev2.ecn.kmin".into(), "5000".into())));
        let p = parameters(&[1.0; 15]);
        assert_eq!(p[0].1, "none");
        assert!(
            !p.iter().any(|(k, _)| k.ends_with("rate_ai")),
            "no DCQCN keys without DCQCN"
        );
        assert!(p.contains(&("fabric.rocev2.ecn.kmax".into(), "20000000".into())));
    }

    #[test]
    fn load_scales_sizes_and_loads() {
        let mut doc: toml::Table = toml::from_str(
            "[[traffic]]\nkind = \"incast\"\nsize = \"4MiB\"\n[[traffic]]\nkind = \"x\"\nload = 0.5\n",
        )
        .unwrap();
        scale_load(&mut doc, 1.25).unwrap();
        let t = doc["traffic"].as_array().unwrap();
        assert_eq!(t[0]["size"].as_integer(), Some(5 * 1024 * 1024));
        assert_eq!(t[1]["load"].as_float(), Some(0.625));
    }
}
