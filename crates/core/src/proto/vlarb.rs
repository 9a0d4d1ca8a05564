//! Weighted round-robin VL arbitration (IBA vol. 1, 7.6.9), low-priority table only.
//!
//! The table is a list of (VL, weight) entries, weights in 64-byte units. The arbiter
//! stays on an entry while its VL has something to send and weight is left, then moves
//! to the next entry whose VL is ready. The high-priority table and HighLimit are not
//! modelled: every data VL sits in the one table.

/// One entry of the arbitration table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArbEntry {
    pub vl: u8,
    /// Blocks of 64 bytes the VL may send per turn (1..=255 in the IBA).
    pub weight: u32,
}

#[derive(Clone, Debug)]
pub struct VlArbiter {
    entries: Vec<ArbEntry>,
    current: usize,
    budget: u32,
}

impl VlArbiter {
    /// An arbiter over `entries`; an empty table is replaced by VL 0 with weight 255.
    pub fn new(mut entries: Vec<ArbEntry>) -> Self {
        if entries.is_empty() {
            entries.push(ArbEntry { vl: 0, weight: 255 });
        }
        let budget = entries[0].weight;
        VlArbiter {
            entries,
            current: 0,
            budget,
        }
    }

    /// Equal weights over VLs `0..vls`.
    pub fn equal(vls: u8, weight: u32) -> Self {
        VlArbiter::new((0..vls).map(|vl| ArbEntry { vl, weight }).collect())
    }

    /// Picks the VL to serve next among those for which `ready` is true.
    pub fn pick(&mut self, mut ready: impl FnMut(u8) -> bool) -> Option<u8> {
        let n = self.entries.len();
        if self.budget > 0 && ready(self.entries[self.current].vl) {
            return Some(self.entries[self.current].vl);
        }
        for step in 1..=n {
            let idx = (self.current + step) % n;
            if ready(self.entries[idx].vl) {
                self.current = idx;
                self.budget = self.entries[idx].weight;
                return Some(self.entries[idx].vl);
            }
        }
        None
    }

    /// Charges `blocks` to the current entry's weight.
    pub fn charge(&mut self, blocks: u32) {
        self.budget = self.budget.saturating_sub(blocks);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_split_service() {
        let mut arb = VlArbiter::new(vec![
            ArbEntry { vl: 0, weight: 192 },
            ArbEntry { vl: 1, weight: 64 },
        ]);
        let mut sent = [0u32; 2];
        for _ in 0..4000 {
            let vl = arb.pick(|_| true).unwrap();
            sent[vl as usize] += 1;
            arb.charge(64);
        }
        assert_eq!(sent[0], 3 * sent[1]);
    }

    #[test]
    fn idle_vl_gives_way() {
        let mut arb = VlArbiter::equal(2, 64);
        for _ in 0..10 {
            assert_eq!(arb.pick(|vl| vl == 1), Some(1));
            arb.charge(64);
        }
        assert_eq!(arb.pick(|_| false), None);
    }
}
