//! Traffic kinds turned into messages. Every random choice comes from a ChaCha generator
//! seeded by the scenario seed and the traffic entry's position, so adding an entry does
//! not change the draws of the others.

use fabricsim_core::units::{HostId, Time};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// One RDMA WRITE from `src` to `dst`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Message {
    pub src: HostId,
    pub dst: HostId,
    pub size: u64,
    pub start: Time,
    /// Service level; the fabric maps it to a VL.
    pub sl: u8,
}

/// A traffic entry after validation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Traffic {
    Flow {
        src: HostId,
        dst: HostId,
        size: u64,
        start: Time,
        sl: u8,
    },
    Incast {
        senders: Vec<HostId>,
        dst: HostId,
        size: u64,
        start: Time,
        sl: u8,
    },
    /// Every listed host sends `size` to another; nobody receives twice; nobody sends to
    /// itself (a uniformly drawn derangement).
    Permutation {
        hosts: Vec<HostId>,
        size: u64,
        start: Time,
        sl: u8,
    },
    /// Messages read from a file (an ns-3 flow file); `source` names it for reports.
    Listed {
        source: String,
        messages: Vec<Message>,
    },
}

/// Expands traffic entries into messages, in entry order.
pub fn messages(traffic: &[Traffic], seed: u64) -> Vec<Message> {
    let mut out = Vec::new();
    for (i, t) in traffic.iter().enumerate() {
        match t {
            Traffic::Flow {
                src,
                dst,
                size,
                start,
                sl,
            } => out.push(Message {
                src: *src,
                dst: *dst,
                size: *size,
                start: *start,
                sl: *sl,
            }),
            Traffic::Incast {
                senders,
                dst,
                size,
                start,
                sl,
            } => out.extend(senders.iter().map(|&src| Message {
                src,
                dst: *dst,
                size: *size,
                start: *start,
                sl: *sl,
            })),
            Traffic::Permutation {
                hosts,
                size,
                start,
                sl,
            } => {
                let mut rng = ChaCha8Rng::seed_from_u64(
                    seed ^ (0x9E37_79B9_7F4A_7C15u64.wrapping_mul(i as u64 + 1)),
                );
                let targets = derangement(hosts, &mut rng);
                out.extend(hosts.iter().zip(targets).map(|(&src, dst)| Message {
                    src,
                    dst,
                    size: *size,
                    start: *start,
                    sl: *sl,
                }));
            }
            Traffic::Listed { messages, .. } => out.extend_from_slice(messages),
        }
    }
    out
}

/// A uniformly random derangement of `hosts` by rejection (about e draws on average).
/// Callers guarantee at least two distinct hosts.
fn derangement(hosts: &[HostId], rng: &mut ChaCha8Rng) -> Vec<HostId> {
    let mut perm = hosts.to_vec();
    loop {
        perm.shuffle(rng);
        if perm.iter().zip(hosts).all(|(a, b)| a != b) {
            return perm;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permutation_is_a_seeded_derangement() {
        let hosts: Vec<HostId> = (0..16).map(HostId).collect();
        let t = [Traffic::Permutation {
            hosts: hosts.clone(),
            size: 10,
            start: Time::ZERO,
            sl: 0,
        }];
        let a = messages(&t, 1);
        assert_eq!(a, messages(&t, 1), "same seed, same pairs");
        assert_ne!(a, messages(&t, 2), "another seed draws other pairs");
        let mut dsts: Vec<u32> = a.iter().map(|m| m.dst.0).collect();
        assert!(a.iter().all(|m| m.src != m.dst));
        dsts.sort();
        assert_eq!(dsts, (0..16).collect::<Vec<_>>(), "nobody receives twice");
    }
}
