//! InfiniBand link-level credit flow control for one virtual lane (IBA vol. 1, 7.9).
//!
//! Credits are 64-byte blocks. The transmitter counts FCTBS (total blocks sent) and holds
//! the receiver's last advertised FCCL (credit limit), both modulo 4096. A packet of `n`
//! blocks may go only if `(FCCL - (FCTBS + n)) mod 4096 <= 2048`. The receiver counts ABR
//! (adjusted blocks received) and advertises `FCCL = (ABR + free blocks) mod 4096`. Flow
//! control packets carry absolute values, so a lost or late one heals with the next; on
//! receipt of the transmitter's FCTBS the receiver sets ABR to it.

/// Counters are modulo this (12 bits).
pub const MODULUS: u32 = 4096;
/// Largest credit window the modular comparison can express, in blocks.
pub const MAX_WINDOW: u32 = MODULUS / 2;

/// The transmitting end of one VL of a link.
#[derive(Clone, Debug)]
pub struct CreditSender {
    fctbs: u32,
    fccl: u32,
}

impl CreditSender {
    /// A sender that has heard an initial limit of `initial_limit` blocks, as after the
    /// flow-control packets exchanged at link bring-up.
    pub fn new(initial_limit: u32) -> Self {
        assert!(
            initial_limit <= MAX_WINDOW,
            "credit window above 2048 blocks"
        );
        CreditSender {
            fctbs: 0,
            fccl: initial_limit % MODULUS,
        }
    }

    /// Whether a packet of `blocks` blocks fits under the advertised limit.
    pub fn can_send(&self, blocks: u32) -> bool {
        let after = (self.fctbs + blocks) % MODULUS;
        (self.fccl + MODULUS - after) % MODULUS <= MAX_WINDOW
    }

    /// Records that a packet of `blocks` blocks left. Callers check [`can_send`] first.
    pub fn on_send(&mut self, blocks: u32) {
        debug_assert!(self.can_send(blocks));
        self.fctbs = (self.fctbs + blocks) % MODULUS;
    }

    /// Applies a received FCCL.
    pub fn on_limit(&mut self, fccl: u32) {
        self.fccl = fccl % MODULUS;
    }

    /// Blocks that may still be sent under the current limit.
    pub fn available(&self) -> u32 {
        let room = (self.fccl + MODULUS - self.fctbs) % MODULUS;
        if room <= MAX_WINDOW {
            room
        } else {
            0
        }
    }

    /// FCTBS to put in this end's next flow-control packet.
    pub fn fctbs(&self) -> u32 {
        self.fctbs
    }
}

/// The receiving end (input buffer) of one VL of a link.
#[derive(Clone, Debug)]
pub struct CreditReceiver {
    abr: u32,
    capacity: u32,
    used: u32,
    peak: u32,
}

/// A packet arrived that did not fit the buffer: the sender broke the credit rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Overflow {
    pub used: u32,
    pub capacity: u32,
}

impl CreditReceiver {
    pub fn new(capacity_blocks: u32) -> Self {
        assert!(
            capacity_blocks <= MAX_WINDOW,
            "credit window above 2048 blocks"
        );
        CreditReceiver {
            abr: 0,
            capacity: capacity_blocks,
            used: 0,
            peak: 0,
        }
    }

    /// Accepts `blocks` into the buffer.
    pub fn on_receive(&mut self, blocks: u32) -> Result<(), Overflow> {
        self.abr = (self.abr + blocks) % MODULUS;
        self.used += blocks;
        self.peak = self.peak.max(self.used);
        if self.used > self.capacity {
            return Err(Overflow {
                used: self.used,
                capacity: self.capacity,
            });
        }
        Ok(())
    }

    /// Releases `blocks` as a packet leaves the buffer.
    pub fn on_free(&mut self, blocks: u32) {
        self.used -= blocks;
    }

    /// Re-synchronises ABR to the FCTBS in a flow-control packet from the transmitter.
    pub fn on_fctbs(&mut self, fctbs: u32) {
        self.abr = fctbs % MODULUS;
    }

    /// FCCL to advertise in this end's next flow-control packet.
    pub fn fccl(&self) -> u32 {
        (self.abr + self.capacity - self.used) % MODULUS
    }

    pub fn used(&self) -> u32 {
        self.used
    }
    pub fn peak(&self) -> u32 {
        self.peak
    }
    pub fn capacity(&self) -> u32 {
        self.capacity
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn sender_stops_at_the_limit_and_resumes_on_update() {
        let mut rx = CreditReceiver::new(130);
        let mut tx = CreditSender::new(130);
        assert!(tx.can_send(65));
        tx.on_send(65);
        rx.on_receive(65).unwrap();
        assert!(tx.can_send(65));
        tx.on_send(65);
        rx.on_receive(65).unwrap();
        assert!(!tx.can_send(1), "buffer full: no credit left");
        rx.on_free(65);
        tx.on_limit(rx.fccl());
        assert!(tx.can_send(65));
        assert!(!tx.can_send(66));
    }

    proptest! {
        /// Across counter wrap-around and with updates delivered late or not at all, the
        /// receiver's buffer never overflows and the sender is never blocked when the
        /// receiver is empty and the latest update has arrived.
        #[test]
        fn credits_never_overflow(ops in proptest::collection::vec((1u32..70, 0u8..3), 1..2000), cap in 70u32..=2048) {
            let mut tx = CreditSender::new(cap);
            let mut rx = CreditReceiver::new(cap);
            let mut held: std::collections::VecDeque<u32> = Default::default();
            let mut stale_update = rx.fccl();
            for (blocks, op) in ops {
                match op {
                    0 => if tx.can_send(blocks) {
                        tx.on_send(blocks);
                        prop_assert!(rx.on_receive(blocks).is_ok());
                        held.push_back(blocks);
                    },
                    1 => if let Some(b) = held.pop_front() {
                        rx.on_free(b);
                        stale_update = rx.fccl();
                    },
                    _ => tx.on_limit(stale_update),
                }
            }
            while let Some(b) = held.pop_front() { rx.on_free(b); }
            rx.on_fctbs(tx.fctbs());
            tx.on_limit(rx.fccl());
            prop_assert!(tx.can_send(cap.min(69)));
        }
    }
}
