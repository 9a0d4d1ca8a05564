//! RED-style ECN marking at a switch egress (the DCQCN "CP"), decided at dequeue.

/// Marking thresholds on the egress queue, in bytes, and the probability at `kmax`.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct RedParams {
    pub kmin: u64,
    pub kmax: u64,
    pub pmax: f64,
}

impl RedParams {
    /// Probability of marking a packet that leaves a queue of `queued` bytes: 0 below
    /// Kmin, Pmax x (q - Kmin) / (Kmax - Kmin) between, 1 above Kmax (docs/REFERENCE.md 4).
    pub fn probability(&self, queued: u64) -> f64 {
        if queued <= self.kmin {
            0.0
        } else if queued > self.kmax {
            1.0
        } else {
            self.pmax * (queued - self.kmin) as f64 / (self.kmax - self.kmin).max(1) as f64
        }
    }

    /// These thresholds scaled from a port of `reference_bps` to one of `port_bps`, as the
    /// HPCC ns-3 model's per-rate maps do.
    pub fn scaled(&self, reference_bps: u64, port_bps: u64) -> RedParams {
        let scale = |b: u64| (b as u128 * port_bps as u128 / reference_bps as u128) as u64;
        RedParams {
            kmin: scale(self.kmin),
            kmax: scale(self.kmax),
            pmax: self.pmax,
        }
    }
}

/// The `n`th uniform draw in [0, 1) of egress `port`'s marking decisions in a run seeded
/// with `seed`: SplitMix64 (Steele, Lea and Flood 2014) over the seed, the port and the
/// draw's number, so a port's draws are the same however the run's other ports are
/// interleaved with it (as when a run is split over threads).
pub fn marking_draw(seed: u64, port: u32, n: u64) -> f64 {
    let x = splitmix64(seed ^ splitmix64((port as u64) << 40 ^ n));
    (x >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// SplitMix64's output function on `x` advanced by its golden-ratio increment: a fixed,
/// well-spread mix for seeded draws.
pub fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marking_draws_are_uniform_and_differ_by_port() {
        let n = 100_000;
        let draws: Vec<f64> = (0..n).map(|i| marking_draw(7, 3, i)).collect();
        assert!(draws.iter().all(|&u| (0.0..1.0).contains(&u)));
        let mean = draws.iter().sum::<f64>() / n as f64;
        // The standard error of the mean of n uniform draws is 1 / sqrt(12 n) = 0.0009.
        assert!((mean - 0.5).abs() < 0.005, "mean {mean}");
        let below = draws.iter().filter(|&&u| u < 0.1).count() as f64 / n as f64;
        assert!((below - 0.1).abs() < 0.005, "P(u < 0.1) = {below}");
        let same = (0..1000)
            .filter(|&i| marking_draw(7, 3, i) == marking_draw(7, 4, i))
            .count();
        assert_eq!(same, 0);
    }

    #[test]
    fn red_ramp() {
        let red = RedParams {
            kmin: 100,
            kmax: 300,
            pmax: 0.2,
        };
        assert_eq!(red.probability(100), 0.0);
        assert!((red.probability(200) - 0.1).abs() < 1e-12);
        assert!((red.probability(300) - 0.2).abs() < 1e-12);
        assert_eq!(red.probability(301), 1.0);
        let s = red.scaled(25, 400);
        assert_eq!((s.kmin, s.kmax), (1600, 4800));
    }
}
