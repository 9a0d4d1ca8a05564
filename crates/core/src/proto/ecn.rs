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

#[cfg(test)]
mod tests {
    use super::*;

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
