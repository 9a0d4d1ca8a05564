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

/// An arbitration table, shared by every port that uses it.
#[derive(Clone, Debug)]
pub struct ArbTable {
    entries: Vec<ArbEntry>,
}

/// One port's position in its table: the current entry and the weight it has left.
/// Kept apart from the table so that a port's state is eight bytes beside its other hot
/// fields, while all ports read one table.
#[derive(Clone, Copy, Debug)]
pub struct ArbState {
    current: u32,
    budget: u32,
}

impl ArbTable {
    /// A table of `entries`; an empty table is replaced by VL 0 with weight 255.
    pub fn new(mut entries: Vec<ArbEntry>) -> Self {
        if entries.is_empty() {
            entries.push(ArbEntry { vl: 0, weight: 255 });
        }
        ArbTable { entries }
    }

    /// Equal weights over VLs `0..vls`.
    pub fn equal(vls: u8, weight: u32) -> Self {
        ArbTable::new((0..vls).map(|vl| ArbEntry { vl, weight }).collect())
    }

    /// A port's state before its first pick: on the first entry, with its full weight.
    pub fn start(&self) -> ArbState {
        ArbState {
            current: 0,
            budget: self.entries[0].weight,
        }
    }

    /// Picks the VL to serve next among those for which `ready` is true.
    pub fn pick(&self, state: &mut ArbState, mut ready: impl FnMut(u8) -> bool) -> Option<u8> {
        let n = self.entries.len();
        if n == 1 {
            // One VL (the common case): asking once is enough, whatever the budget.
            let only = self.entries[0];
            if !ready(only.vl) {
                return None;
            }
            if state.budget == 0 {
                state.budget = only.weight;
            }
            return Some(only.vl);
        }
        let current = state.current as usize;
        if state.budget > 0 && ready(self.entries[current].vl) {
            return Some(self.entries[current].vl);
        }
        let mut idx = current;
        for _ in 0..n {
            idx = if idx + 1 == n { 0 } else { idx + 1 };
            if ready(self.entries[idx].vl) {
                state.current = idx as u32;
                state.budget = self.entries[idx].weight;
                return Some(self.entries[idx].vl);
            }
        }
        None
    }
}

impl ArbState {
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
        let table = ArbTable::new(vec![
            ArbEntry { vl: 0, weight: 192 },
            ArbEntry { vl: 1, weight: 64 },
        ]);
        let mut arb = table.start();
        let mut sent = [0u32; 2];
        for _ in 0..4000 {
            let vl = table.pick(&mut arb, |_| true).unwrap();
            sent[vl as usize] += 1;
            arb.charge(64);
        }
        assert_eq!(sent[0], 3 * sent[1]);
    }

    #[test]
    fn a_single_vl_is_served_whenever_ready() {
        let table = ArbTable::equal(1, 4);
        let mut arb = table.start();
        for _ in 0..10 {
            assert_eq!(table.pick(&mut arb, |_| true), Some(0));
            arb.charge(64);
        }
        let mut asked = 0;
        assert_eq!(
            table.pick(&mut arb, |_| {
                asked += 1;
                false
            }),
            None
        );
        assert_eq!(asked, 1);
    }

    #[test]
    fn idle_vl_gives_way() {
        let table = ArbTable::equal(2, 64);
        let mut arb = table.start();
        for _ in 0..10 {
            assert_eq!(table.pick(&mut arb, |vl| vl == 1), Some(1));
            arb.charge(64);
        }
        assert_eq!(table.pick(&mut arb, |_| false), None);
    }
}
