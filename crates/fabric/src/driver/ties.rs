//! Ties between events at the same instant: each creator's own sequence, so that the order does not depend on which thread made them.

use super::BuildError;

/// Bits of a tie given to the creator's sequence number (the rest name the creator).
const SEQ_BITS: u32 = 40;

/// The ties of a packet model whose same-time events leave in (creator, the creator's
/// sequence) order, which does not depend on how a run is split over threads. The
/// creators are the ports (the port an event is handled at creates what its handler
/// schedules), then the set-up, the posts (whose tie is their message's index, whoever
/// released them) and the run-wide checks (last at their time).
#[derive(Clone, Debug)]
pub struct Ties {
    next: Vec<u64>,
}

impl Ties {
    /// Ties for a topology of `ports` ports; an error (naming the topology) if the tie's
    /// creator bits cannot name them all.
    pub fn new(ports: usize, model: &'static str) -> Result<Self, BuildError> {
        let most = (1u64 << (64 - SEQ_BITS)) - 4;
        if ports as u64 > most {
            return Err(BuildError::TooManyForTies {
                ports,
                model,
                max: most,
            });
        }
        Ok(Ties {
            next: vec![0; ports + 3],
        })
    }

    /// The creator of the events set up before the run.
    pub fn setup(&self) -> u32 {
        self.next.len() as u32 - 3
    }

    /// The creator of the run-wide checks (deadlock, rate sampling): last at their time.
    pub fn global(&self) -> u32 {
        self.next.len() as u32 - 1
    }

    /// Message `flow`'s post: its tie is the message's index, whoever released it.
    pub fn post(&self, flow: u32) -> u64 {
        ((self.next.len() as u64 - 2) << SEQ_BITS) | flow as u64
    }

    /// `creator`'s next tie.
    #[inline(always)]
    pub fn next(&mut self, creator: u32) -> u64 {
        let seq = &mut self.next[creator as usize];
        let tie = (creator as u64) << SEQ_BITS | *seq;
        *seq += 1;
        tie
    }
}
