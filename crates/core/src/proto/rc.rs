//! The RC transport's sender and receiver halves for one message (RDMA WRITE).
//!
//! The sender segments the message into MTU packets with consecutive PSNs; the receiver
//! places packets in any order (as ConnectX-5 and later do with adaptive routing),
//! detects duplicates, tracks the in-order prefix and decides when to ACK: every
//! `ack_every` packets and on the packet that completes the message.

use crate::wire::ib::Opcode;

/// PSNs are 24-bit.
pub const PSN_MASK: u32 = 0x00FF_FFFF;

/// One packet the sender is about to inject.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    /// Position in the message, 0-based.
    pub index: u32,
    pub payload: u32,
    pub opcode: Opcode,
    /// Set on the last packet and on every `ack_every`-th, asking for an ACK.
    pub ack_req: bool,
}

/// Sender half: what to send next and what has been acknowledged.
#[derive(Clone, Debug)]
pub struct RcSender {
    size: u64,
    mtu: u32,
    packets: u32,
    next: u32,
    acked: u32,
    /// One past the highest packet ever injected; packets below it are retransmissions.
    high: u32,
    ack_every: u32,
    /// Selective repeat's state (None: go-back-N).
    selective: Option<Box<Selective>>,
}

/// Selective repeat at the sender (IRN, Mittal et al., SIGCOMM 2018): packets the
/// receiver reported placed beyond the in-order prefix are never sent again; in recovery
/// the sender resends only the holes below the highest such packet, then goes on with new
/// packets.
#[derive(Clone, Debug, Default)]
struct Selective {
    /// Packets reported placed (a bitmap of the message).
    sacked: Vec<u64>,
    /// In recovery until the cumulative ACK reaches this packet.
    recovery_until: Option<u32>,
    /// The next hole to consider resending, and one past the packets known lost.
    cursor: u32,
    lost_below: u32,
}

impl Selective {
    fn is_sacked(&self, i: u32) -> bool {
        self.sacked[(i / 64) as usize] & (1 << (i % 64)) != 0
    }
}

impl RcSender {
    /// A WRITE of `size` bytes in packets of `mtu` bytes. A zero-length WRITE (legal in
    /// verbs) is one packet without payload.
    pub fn new(size: u64, mtu: u32, ack_every: u32) -> Self {
        assert!(mtu > 0);
        let packets = u32::try_from(size.div_ceil(mtu as u64).max(1))
            .expect("message of more than 2^32 packets");
        RcSender {
            size,
            mtu,
            packets,
            next: 0,
            acked: 0,
            high: 0,
            ack_every: ack_every.max(1),
            selective: None,
        }
    }

    /// The same sender recovering by selective repeat instead of going back N.
    pub fn selective(mut self) -> Self {
        self.selective = Some(Box::new(Selective {
            sacked: vec![0; (self.packets as usize).div_ceil(64)],
            ..Selective::default()
        }));
        self
    }

    pub fn packets(&self) -> u32 {
        self.packets
    }

    /// Whether packets remain to be injected: new ones, or holes to resend in recovery.
    pub fn has_more(&self) -> bool {
        self.next < self.packets || self.hole().is_some()
    }

    /// Selective repeat in recovery: the next packet known lost and not yet resent.
    fn hole(&self) -> Option<u32> {
        let s = self.selective.as_ref()?;
        (s.recovery_until.is_some() && s.cursor < s.lost_below).then_some(s.cursor)
    }

    /// Moves selective repeat's cursor past what is acknowledged or reported placed.
    fn settle(&mut self) {
        let acked = self.acked;
        if let Some(s) = self.selective.as_mut() {
            if s.recovery_until.is_some_and(|until| acked >= until) {
                s.recovery_until = None;
            }
            s.cursor = s.cursor.max(acked);
            while s.cursor < s.lost_below && s.is_sacked(s.cursor) {
                s.cursor += 1;
            }
        }
    }

    /// Packets sent and neither acknowledged nor resendable: what a window or IRN's
    /// bandwidth-delay cap limits (the next new packet less the acknowledged prefix).
    pub fn outstanding(&self) -> u32 {
        self.next - self.acked
    }

    /// Whether the next packet injected would be a new one (not a hole resent).
    pub fn next_is_new(&self) -> bool {
        self.hole().is_none()
    }

    /// Packets injected so far.
    pub fn sent(&self) -> u32 {
        self.next
    }

    /// Takes the next segment, if any.
    pub fn next_segment(&mut self) -> Option<Segment> {
        if let Some(hole) = self.hole() {
            self.selective.as_mut().expect("holes are selective").cursor = hole + 1;
            self.settle();
            return Some(self.segment(hole));
        }
        let seg = self.peek()?;
        self.next += 1;
        self.high = self.high.max(self.next);
        Some(seg)
    }

    /// The next segment, without taking it.
    pub fn peek(&self) -> Option<Segment> {
        if let Some(hole) = self.hole() {
            return Some(self.segment(hole));
        }
        (self.next < self.packets).then(|| self.segment(self.next))
    }

    fn segment(&self, index: u32) -> Segment {
        let offset = index as u64 * self.mtu as u64;
        let payload = (self.size - offset).min(self.mtu as u64) as u32;
        let last = index + 1 == self.packets;
        Segment {
            index,
            payload,
            opcode: Opcode::rdma_write(index, self.packets),
            ack_req: last || (index + 1).is_multiple_of(self.ack_every),
        }
    }

    /// Applies a cumulative ACK covering packets `0..=index`. Returns true when it
    /// completes the message.
    pub fn on_ack(&mut self, index: u32) -> bool {
        let was_done = self.is_acked();
        self.acked = self.acked.max(index + 1).min(self.packets);
        // A cumulative ACK beyond a rewind (a packet overtaken on another path arrived
        // after all): what it covers need not be sent again.
        self.next = self.next.max(self.acked);
        self.settle();
        !was_done && self.is_acked()
    }

    /// Selective repeat: the receiver placed packet `arrived` beyond its in-order prefix
    /// of `expected` packets. Every unreported packet below `arrived` is lost; the first
    /// report starts recovery, which lasts until the cumulative ACK passes every packet
    /// sent by then. Returns true when it completes the message (never, as a hole remains).
    pub fn on_selective_nak(&mut self, expected: u32, arrived: u32) -> bool {
        let done = expected.checked_sub(1).is_some_and(|i| self.on_ack(i));
        let next = self.next;
        let s = self
            .selective
            .as_mut()
            .expect("a selective NAK needs selective repeat");
        if arrived < self.packets {
            s.sacked[(arrived / 64) as usize] |= 1 << (arrived % 64);
            s.lost_below = s.lost_below.max(arrived);
        }
        if s.recovery_until.is_none() {
            s.recovery_until = Some(next);
            s.cursor = self.acked;
        }
        self.settle();
        done
    }

    pub fn is_acked(&self) -> bool {
        self.acked == self.packets
    }

    /// Packets acknowledged so far (a prefix).
    pub fn acked(&self) -> u32 {
        self.acked
    }

    /// Go back N: the next packet injected is `index` (never below the acknowledged
    /// prefix, never forward). With selective repeat (a timeout), every packet sent and not
    /// reported placed is resent instead, from the acknowledged prefix.
    pub fn rewind(&mut self, index: u32) {
        let (acked, next) = (self.acked, self.next);
        match self.selective.as_mut() {
            None => self.next = next.min(index.max(acked)),
            Some(s) => {
                s.recovery_until = Some(next);
                s.cursor = acked;
                s.lost_below = next;
                self.settle();
            }
        }
    }

    /// Whether packet `index` has been injected before.
    pub fn is_retransmission(&self, index: u32) -> bool {
        index < self.high
    }
}

/// What an in-order (go-back-N) receiver did with a data packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InOrderReceipt {
    /// Placed; ACK `0..=index` if `ack` is set; `complete` if it was the last packet.
    Accepted { ack: Option<u32>, complete: bool },
    /// Beyond the expected packet and discarded; send a NAK for `expected` if set (once
    /// per gap).
    OutOfSequence { nak: Option<u32> },
    /// Already placed; re-ACK the in-order prefix `0..=index` so the sender moves on.
    Duplicate { ack: Option<u32> },
    /// Selective repeat: placed beyond the in-order prefix of `expected` packets; send a
    /// selective NAK naming `expected` and `arrived`.
    Beyond { expected: u32, arrived: u32 },
}

/// Receiver half of RoCE's go-back-N RC: accepts only the expected packet.
#[derive(Clone, Debug)]
pub struct InOrderReceiver {
    packets: u32,
    expected: u32,
    since_ack: u32,
    ack_every: u32,
    nak_sent: bool,
}

impl InOrderReceiver {
    pub fn new(packets: u32, ack_every: u32) -> Self {
        InOrderReceiver {
            packets,
            expected: 0,
            since_ack: 0,
            ack_every: ack_every.max(1),
            nak_sent: false,
        }
    }

    pub fn on_data(&mut self, index: u32) -> InOrderReceipt {
        use std::cmp::Ordering::*;
        match index.cmp(&self.expected) {
            Equal => {
                self.expected += 1;
                self.nak_sent = false;
                self.since_ack += 1;
                let complete = self.expected == self.packets;
                let ack = (complete || self.since_ack >= self.ack_every).then(|| {
                    self.since_ack = 0;
                    index
                });
                InOrderReceipt::Accepted { ack, complete }
            }
            Greater => {
                let nak = (!self.nak_sent).then_some(self.expected);
                self.nak_sent = true;
                InOrderReceipt::OutOfSequence { nak }
            }
            Less => InOrderReceipt::Duplicate {
                ack: self.expected.checked_sub(1),
            },
        }
    }
}

/// A RoCE receiver: RoCE's in-order one (go-back-N), or one that places packets out of
/// order, as NICs behind adaptive routing or packet spraying do (a bitmap of the
/// message's packets; ACKs cover the in-order prefix).
#[derive(Clone, Debug)]
pub enum RoceReceiver {
    InOrder(InOrderReceiver),
    Placing(RcReceiver),
    /// Selective repeat's receiver (IRN): places out of order, answers every packet beyond
    /// the prefix with a selective NAK, and ACKs at once when a resent packet fills a hole.
    Selective(RcReceiver),
}

impl RoceReceiver {
    pub fn new(packets: u32, ack_every: u32, out_of_order: bool) -> Self {
        if out_of_order {
            RoceReceiver::Placing(RcReceiver::new(packets, ack_every))
        } else {
            RoceReceiver::InOrder(InOrderReceiver::new(packets, ack_every))
        }
    }

    /// Selective repeat's receiver.
    pub fn selective(packets: u32, ack_every: u32) -> Self {
        RoceReceiver::Selective(RcReceiver::new(packets, ack_every))
    }

    /// Takes data packet `index`: an out-of-order receiver accepts every new packet and
    /// re-ACKs its prefix for one placed before.
    pub fn on_data(&mut self, index: u32) -> InOrderReceipt {
        match self {
            RoceReceiver::InOrder(r) => r.on_data(index),
            RoceReceiver::Placing(r) => {
                let got = r.on_data(index);
                if got.duplicate {
                    InOrderReceipt::Duplicate {
                        ack: r.prefix().checked_sub(1),
                    }
                } else {
                    InOrderReceipt::Accepted {
                        ack: got.ack,
                        complete: got.complete,
                    }
                }
            }
            RoceReceiver::Selective(r) => {
                let before = r.prefix();
                let got = r.on_data(index);
                let prefix = r.prefix();
                if got.duplicate {
                    InOrderReceipt::Duplicate {
                        ack: prefix.checked_sub(1),
                    }
                } else if prefix <= index {
                    InOrderReceipt::Beyond {
                        expected: prefix,
                        arrived: index,
                    }
                } else {
                    // A resent packet that fills a hole is acknowledged at once.
                    let filled = prefix > before + 1;
                    InOrderReceipt::Accepted {
                        ack: got.ack.or(filled.then(|| prefix - 1)),
                        complete: got.complete,
                    }
                }
            }
        }
    }

    /// The most packets held beyond the in-order prefix (0 for the in-order receiver,
    /// which holds none).
    pub fn peak_ahead(&self) -> u32 {
        match self {
            RoceReceiver::InOrder(_) => 0,
            RoceReceiver::Placing(r) | RoceReceiver::Selective(r) => r.peak_ahead(),
        }
    }
}

/// What the receiver did with a data packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Receipt {
    /// The packet had been received before (never expected on a lossless fabric).
    pub duplicate: bool,
    /// Send an ACK covering packets `0..=index`.
    pub ack: Option<u32>,
    /// This packet completed the message.
    pub complete: bool,
}

/// Receiver half: a bitmap of received packets and the in-order prefix.
#[derive(Clone, Debug)]
pub struct RcReceiver {
    packets: u32,
    seen: Vec<u64>,
    received: u32,
    prefix: u32,
    since_ack: u32,
    ack_every: u32,
    /// The most packets beyond the in-order prefix ever held (what reordering cost).
    peak_ahead: u32,
}

impl RcReceiver {
    pub fn new(packets: u32, ack_every: u32) -> Self {
        RcReceiver {
            packets,
            seen: vec![0; (packets as usize).div_ceil(64)],
            received: 0,
            prefix: 0,
            since_ack: 0,
            ack_every: ack_every.max(1),
            peak_ahead: 0,
        }
    }

    /// Packets placed in order from the first.
    pub fn prefix(&self) -> u32 {
        self.prefix
    }

    /// The most packets ever held beyond the in-order prefix: how far out of order the
    /// message arrived.
    pub fn peak_ahead(&self) -> u32 {
        self.peak_ahead
    }

    /// Places packet `index`.
    pub fn on_data(&mut self, index: u32) -> Receipt {
        let (word, bit) = ((index / 64) as usize, index % 64);
        if index >= self.packets || self.seen[word] & (1 << bit) != 0 {
            return Receipt {
                duplicate: true,
                ack: None,
                complete: false,
            };
        }
        self.seen[word] |= 1 << bit;
        self.received += 1;
        while self.prefix < self.packets
            && self.seen[(self.prefix / 64) as usize] & (1 << (self.prefix % 64)) != 0
        {
            self.prefix += 1;
        }
        self.peak_ahead = self.peak_ahead.max((index + 1).saturating_sub(self.prefix));
        self.since_ack += 1;
        let complete = self.received == self.packets;
        let ack = if (complete || self.since_ack >= self.ack_every) && self.prefix > 0 {
            self.since_ack = 0;
            Some(self.prefix - 1)
        } else {
            None
        };
        Receipt {
            duplicate: false,
            ack,
            complete,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segmentation_covers_the_message_once() {
        let mut s = RcSender::new(10_000, 4096, 2);
        let segs: Vec<Segment> = std::iter::from_fn(|| s.next_segment()).collect();
        assert_eq!(segs.iter().map(|x| x.payload as u64).sum::<u64>(), 10_000);
        let ops: Vec<Opcode> = segs.iter().map(|x| x.opcode).collect();
        assert_eq!(
            ops,
            vec![
                Opcode::RdmaWriteFirst,
                Opcode::RdmaWriteMiddle,
                Opcode::RdmaWriteLast
            ]
        );
        assert_eq!(
            segs.iter().map(|x| x.ack_req).collect::<Vec<_>>(),
            vec![false, true, true]
        );
        let one = RcSender::new(5, 4096, 1).next_segment().unwrap();
        assert_eq!(one.opcode, Opcode::RdmaWriteOnly);
    }

    #[test]
    fn receiver_tolerates_reordering_and_flags_duplicates() {
        let mut r = RcReceiver::new(4, 2);
        assert_eq!(
            r.on_data(1),
            Receipt {
                duplicate: false,
                ack: None,
                complete: false
            }
        );
        // Two packets since the last ACK, but no in-order prefix yet: nothing to ACK.
        assert_eq!(r.on_data(3).ack, None);
        assert_eq!(r.on_data(0).ack, Some(1));
        assert!(r.on_data(0).duplicate);
        let last = r.on_data(2);
        assert!(last.complete);
        assert_eq!(last.ack, Some(3));
    }

    #[test]
    fn go_back_n_round_trip() {
        let mut s = RcSender::new(6 * 4096, 4096, 2);
        let mut r = InOrderReceiver::new(6, 2);
        for _ in 0..3 {
            s.next_segment();
        }
        // Packet 1 is lost: 0 is placed, 2 is out of sequence and NAKs 1, once.
        assert_eq!(
            r.on_data(0),
            InOrderReceipt::Accepted {
                ack: None,
                complete: false
            }
        );
        assert_eq!(r.on_data(2), InOrderReceipt::OutOfSequence { nak: Some(1) });
        assert_eq!(r.on_data(2), InOrderReceipt::OutOfSequence { nak: None });
        s.on_ack(0);
        s.rewind(1);
        let again = s.next_segment().unwrap();
        assert_eq!(again.index, 1);
        assert!(s.is_retransmission(1));
        assert!(!s.is_retransmission(3));
        assert_eq!(
            r.on_data(1),
            InOrderReceipt::Accepted {
                ack: Some(1),
                complete: false
            }
        );
        assert_eq!(r.on_data(0), InOrderReceipt::Duplicate { ack: Some(1) });
        // Rewinding never goes below the acknowledged prefix.
        s.on_ack(1);
        s.rewind(0);
        assert_eq!(s.next_segment().unwrap().index, 2);
    }

    /// A rewind overtaken by a cumulative ACK (the "lost" packet was only late, on
    /// another path after a re-route): the sender goes on after what is acknowledged.
    #[test]
    fn an_ack_beyond_a_rewind_moves_the_sender_past_it() {
        let mut s = RcSender::new(6 * 4096, 4096, 1);
        for _ in 0..5 {
            s.next_segment();
        }
        s.rewind(1);
        s.on_ack(3);
        assert_eq!(s.outstanding(), 0);
        assert_eq!(s.next_segment().unwrap().index, 4);
    }

    /// Selective repeat resends exactly the packets lost, where go-back-N resends
    /// everything after the first loss.
    #[test]
    fn selective_repeat_resends_only_the_holes() {
        let mut s = RcSender::new(10 * 4096, 4096, 1).selective();
        let mut r = RoceReceiver::selective(10, 1);
        let sent: Vec<u32> = (0..8).map(|_| s.next_segment().unwrap().index).collect();
        assert_eq!(sent, (0..8).collect::<Vec<_>>());
        // Packets 2 and 5 are lost.
        let mut resent = Vec::new();
        for i in [0, 1, 3, 4, 6, 7] {
            match r.on_data(i) {
                InOrderReceipt::Accepted { ack: Some(a), .. } => {
                    s.on_ack(a);
                }
                InOrderReceipt::Beyond { expected, arrived } => {
                    assert_eq!(expected, 2);
                    s.on_selective_nak(expected, arrived);
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(s.outstanding(), 6);
        while !s.next_is_new() {
            resent.push(s.next_segment().unwrap().index);
        }
        assert_eq!(resent, vec![2, 5]);
        assert!(s.is_retransmission(2) && s.is_retransmission(5));
        assert_eq!(s.next_segment().unwrap().index, 8, "then new packets");
        assert_eq!(
            r.on_data(2),
            InOrderReceipt::Accepted {
                ack: Some(4),
                complete: false
            }
        );
        s.on_ack(4);
        assert_eq!(
            r.on_data(5),
            InOrderReceipt::Accepted {
                ack: Some(7),
                complete: false
            }
        );
        s.on_ack(7);
        assert_eq!(s.next_segment().unwrap().index, 9);
        assert!(!s.has_more());
        // A timeout resends what is neither acknowledged nor reported: here 8 and 9.
        s.rewind(0);
        let again: Vec<u32> = std::iter::from_fn(|| s.next_segment())
            .map(|x| x.index)
            .collect();
        assert_eq!(again, vec![8, 9]);
    }

    #[test]
    fn cumulative_ack_completes_once() {
        let mut s = RcSender::new(3 * 4096, 4096, 1);
        assert!(!s.on_ack(1));
        assert!(s.on_ack(2));
        assert!(!s.on_ack(2));
    }
}
