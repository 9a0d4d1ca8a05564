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

/// The congestion controls searched, each an equal share of the first coordinate's
/// interval in this order.
pub const CONGESTION_CONTROLS: [&str; 5] = ["dcqcn", "none", "hpcc", "swift", "timely"];

/// The congestion control at `u` of the first coordinate.
pub fn congestion_control(u: f64) -> &'static str {
    let n = CONGESTION_CONTROLS.len();
    CONGESTION_CONTROLS[((u * n as f64) as usize).min(n - 1)]
}

/// The middle of `name`'s share of the first coordinate (where a tune fixed to it sits).
pub fn congestion_control_at(name: &str) -> Option<f64> {
    let i = CONGESTION_CONTROLS.iter().position(|c| *c == name)?;
    Some((i as f64 + 0.5) / CONGESTION_CONTROLS.len() as f64)
}

/// The settings searched. `congestion_control` is first: DCQCN, none (PFC only, as Meta
/// ran at 400G), HPCC, Swift or TIMELY; the DCQCN settings are left out unless DCQCN
/// runs. The last is loss recovery: below one half RoCE's lossless go-back-N (PFC on),
/// above it lossy selective repeat (IRN, PFC off).
pub const KNOBS: [Knob; 16] = [
    Knob {
        key: "fabric.rocev2.congestion_control",
        low: 0.0,
        high: 1.0,
        log: false,
        unit: Unit::Plain,
        source: "dcqcn, none, hpcc, swift or timely (docs/REFERENCE.md 4 and 8b: Meta ran DCQCN off at 400G)",
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
    Knob {
        key: "fabric.rocev2.loss_recovery",
        low: 0.0,
        high: 1.0,
        log: false,
        unit: Unit::Plain,
        source: "go-back-n with PFC, or selective-repeat without (IRN, Mittal et al. 2018: lossy with selective repeat beat lossless RoCE)",
    },
];

/// The knob of loss recovery (the last).
const LOSS: usize = KNOBS.len() - 1;

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

/// The keys of HPCC, Swift and TIMELY, dropped when a trial runs another algorithm.
const ACK_CC_KEYS: [&str; 6] = [
    "hpcc_eta",
    "hpcc_max_stage",
    "hpcc_rate_ai",
    "swift_base_target",
    "timely_t_low",
    "timely_t_high",
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
        return CONGESTION_CONTROLS.join(", ");
    }
    if k.key == KNOBS[LOSS].key {
        return "go-back-n with PFC, or selective-repeat without".into();
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

/// The scenario keys point `x` sets: the congestion control, then the buffer and ECN
/// settings, DCQCN's only if it runs, and loss recovery with PFC.
pub fn parameters(x: &[f64]) -> Vec<(String, String)> {
    let cc = congestion_control(x[0]);
    let dcqcn = cc == "dcqcn";
    let mut v = vec![(KNOBS[0].key.to_string(), cc.to_string())];
    let kmin = KNOBS[1].value(x[1]);
    for (k, &u) in KNOBS.iter().zip(x).skip(1).take(LOSS - 1) {
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
    let lossy = x[LOSS] >= 0.5;
    v.push(("fabric.rocev2.pfc".into(), (!lossy).to_string()));
    v.push((
        KNOBS[LOSS].key.into(),
        if lossy {
            "selective-repeat"
        } else {
            "go-back-n"
        }
        .into(),
    ));
    v
}

/// Whether `key` is a DCQCN setting.
fn is_dcqcn(key: &str) -> bool {
    let last = key.rsplit('.').next().unwrap_or(key);
    DCQCN_KEYS.contains(&last) && last != "congestion_control"
}

/// Sets `parameters` in the scenario `doc`; without DCQCN, first removes the DCQCN keys
/// the scenario holds (they would do nothing, and the scenario refuses them), and with
/// another algorithm its keys too.
pub fn apply(doc: &mut toml::Table, parameters: &[(String, String)]) -> Result<(), String> {
    let other = parameters
        .iter()
        .any(|(k, v)| k == KNOBS[0].key && v != "dcqcn");
    if other {
        if let Some(toml::Value::Table(roce)) = doc
            .get_mut("fabric")
            .and_then(|f| f.as_table_mut())
            .and_then(|f| f.get_mut("rocev2"))
        {
            for k in DCQCN_KEYS.iter().chain(&ACK_CC_KEYS) {
                roce.remove(*k);
            }
        }
    }
    for (k, v) in parameters {
        let value = match k.as_str() {
            "fabric.rocev2.congestion_control" | "fabric.rocev2.loss_recovery" => {
                toml::Value::String(v.clone())
            }
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
    const PRIMES: [u64; KNOBS.len()] = [2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53];
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
        let p = parameters(&[0.0; KNOBS.len()]);
        assert_eq!(
            p[0],
            ("fabric.rocev2.congestion_control".into(), "dcqcn".into())
        );
        assert!(p.contains(&("fabric.rocev2.rate_ai".into(), "1Mbps".into())));
        assert!(p.contains(&("fabric.rocev2.ecn.kmin".into(), "5000".into())));
        assert!(p.contains(&("fabric.rocev2.loss_recovery".into(), "go-back-n".into())));
        assert!(p.contains(&("fabric.rocev2.pfc".into(), "true".into())));
        let p = parameters(&[0.3; KNOBS.len()]);
        assert_eq!(p[0].1, "none");
        let p = parameters(&[1.0; KNOBS.len()]);
        assert_eq!(p[0].1, "timely");
        assert!(p.contains(&(
            "fabric.rocev2.loss_recovery".into(),
            "selective-repeat".into()
        )));
        assert!(p.contains(&("fabric.rocev2.pfc".into(), "false".into())));
        for (i, cc) in CONGESTION_CONTROLS.iter().enumerate() {
            assert_eq!(
                congestion_control(congestion_control_at(cc).unwrap()),
                *cc,
                "{i}"
            );
        }
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
