//! Background traffic (storage, inference, other tenants) drawn from a flow-size
//! distribution at a load, as the HPCC authors' traffic generator draws it
//! (docs/REFERENCE.md, "Flow-size distributions"): each host starts flows in a Poisson
//! process whose mean gap is mean_size x 8 / (rate x load), each to a uniformly drawn
//! other host, its size drawn from the distribution's CDF, interpolated linearly.

use super::Message;
use fabricsim_core::units::{BitRate, HostId, Time};
use rand::Rng;
use rand_chacha::ChaCha8Rng;

/// A flow-size distribution: (size in bytes, cumulative %) points, increasing, from 0 %
/// to 100 %.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Distribution {
    /// WebSearch (DCTCP paper), as HPCC's traffic_gen/WebSearch_distribution.txt.
    WebSearch,
    /// Facebook Hadoop, as HPCC's traffic_gen/FbHdp_distribution.txt.
    Hadoop,
}

const WEB_SEARCH: [(u64, f64); 12] = [
    (0, 0.0),
    (10_000, 15.0),
    (20_000, 20.0),
    (30_000, 30.0),
    (50_000, 40.0),
    (80_000, 53.0),
    (200_000, 60.0),
    (1_000_000, 70.0),
    (2_000_000, 80.0),
    (5_000_000, 90.0),
    (10_000_000, 97.0),
    (30_000_000, 100.0),
];

const HADOOP: [(u64, f64); 20] = [
    (0, 0.0),
    (100, 1.0),
    (200, 2.0),
    (300, 5.0),
    (350, 15.0),
    (400, 20.0),
    (500, 30.0),
    (600, 40.0),
    (700, 50.0),
    (1_000, 60.0),
    (2_000, 67.0),
    (7_000, 70.0),
    (30_000, 72.0),
    (50_000, 82.0),
    (80_000, 87.0),
    (120_000, 90.0),
    (300_000, 95.0),
    (1_000_000, 97.5),
    (2_000_000, 99.0),
    (10_000_000, 100.0),
];

impl Distribution {
    pub const NAMES: [&'static str; 2] = ["websearch", "hadoop"];

    pub fn name(self) -> &'static str {
        Self::NAMES[self as usize]
    }

    pub fn parse(s: &str) -> Option<Distribution> {
        [Self::WebSearch, Self::Hadoop]
            .into_iter()
            .find(|d| d.name() == s)
    }

    fn points(self) -> &'static [(u64, f64)] {
        match self {
            Distribution::WebSearch => &WEB_SEARCH,
            Distribution::Hadoop => &HADOOP,
        }
    }

    /// The mean flow size in bytes of the piecewise-linear CDF.
    pub fn mean(self) -> f64 {
        self.points()
            .windows(2)
            .map(|w| (w[1].1 - w[0].1) / 100.0 * (w[0].0 + w[1].0) as f64 / 2.0)
            .sum()
    }

    /// The size at cumulative fraction `u` in [0, 1), at least 1 byte.
    pub fn size_at(self, u: f64) -> u64 {
        let pct = u * 100.0;
        let pts = self.points();
        let w = pts
            .windows(2)
            .find(|w| pct < w[1].1)
            .unwrap_or(&pts[pts.len() - 2..]);
        let ((s0, c0), (s1, c1)) = (w[0], w[1]);
        let f = if c1 > c0 { (pct - c0) / (c1 - c0) } else { 0.0 };
        ((s0 as f64 + f * (s1 - s0) as f64).round() as u64).max(1)
    }
}

/// A background entry: flows among `hosts` from `start` for `duration`.
#[derive(Clone, Debug, PartialEq)]
pub struct Background {
    pub distribution: Distribution,
    /// Offered load per host, a fraction of `rate`.
    pub load: f64,
    /// The hosts' NIC rate the load is a fraction of.
    pub rate: BitRate,
    pub hosts: Vec<HostId>,
    pub start: Time,
    pub duration: Time,
    pub sl: u8,
}

// Loads are finite fractions (checked at load), so the derived PartialEq is an equivalence.
impl Eq for Background {}

impl Background {
    /// The flows, by start time (ties by host order), drawn with `rng`.
    pub fn expand(&self, rng: &mut ChaCha8Rng) -> Vec<Message> {
        let mean_gap_ps = self.distribution.mean() * 8.0 / (self.rate.0 as f64 * self.load) * 1e12;
        let end = self.start + self.duration;
        let n = self.hosts.len();
        let mut out = Vec::new();
        for (i, &src) in self.hosts.iter().enumerate() {
            let mut t = self.start.ps() as f64;
            loop {
                // Exponential gap: -ln(1 - u) x mean, u in [0, 1).
                t += -(1.0 - rng.gen::<f64>()).ln() * mean_gap_ps;
                if t >= end.ps() as f64 {
                    break;
                }
                let k = rng.gen_range(0..n - 1);
                let dst = self.hosts[if k >= i { k + 1 } else { k }];
                out.push(Message {
                    src,
                    dst,
                    size: self.distribution.size_at(rng.gen::<f64>()),
                    start: Time(t as u64),
                    sl: self.sl,
                    local: None,
                });
            }
        }
        out.sort_by_key(|m| m.start);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn means_are_the_reference_figures() {
        // docs/REFERENCE.md: WebSearch about 1.71 MB, FB Hadoop about 120 KB.
        let ws = Distribution::WebSearch.mean();
        assert!((ws - 1.71e6).abs() < 0.02e6, "{ws}");
        let h = Distribution::Hadoop.mean();
        assert!((h - 120e3).abs() < 10e3, "{h}");
    }

    #[test]
    fn sizes_follow_the_cdf() {
        let d = Distribution::WebSearch;
        assert_eq!(d.size_at(0.15), 10_000);
        assert_eq!(d.size_at(0.175), 15_000);
        assert!(d.size_at(0.999_999) > 29_990_000);
        assert!(d.size_at(0.0) >= 1);
    }

    #[test]
    fn offered_load_matches_the_target() {
        let b = Background {
            distribution: Distribution::Hadoop,
            load: 0.3,
            rate: BitRate(100_000_000_000),
            hosts: (0..16).map(HostId).collect(),
            start: Time::ZERO,
            duration: Time(20_000_000_000),
            sl: 0,
        };
        let flows = b.expand(&mut ChaCha8Rng::seed_from_u64(7));
        let bytes: u64 = flows.iter().map(|m| m.size).sum();
        let offered = bytes as f64 * 8.0 / (16.0 * 100e9 * 0.02);
        assert!((offered - 0.3).abs() < 0.03, "offered load {offered}");
        assert!(flows.iter().all(|m| m.src != m.dst));
        assert!(flows.windows(2).all(|w| w[0].start <= w[1].start));
    }
}
