//! What identifies a flow on the wire: its ECMP hash and UDP source port, and the capture filter that picks its frames.

/// The ECMP hash of a packet at `switch`: a seeded mix (SplitMix64 finaliser) of the
/// 5-tuple fields that vary here (source and destination host, UDP source port; the
/// protocol and destination port 4791 are the same for all RoCEv2 traffic).
pub fn ecmp_hash(seed: u64, switch: u32, src: u32, dst: u32, sport: u16) -> u64 {
    let mut x = seed
        ^ (switch as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ ((src as u64) << 32 | dst as u64).wrapping_mul(0xBF58_476D_1CE4_E5B9)
        ^ (sport as u64).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^= x >> 30;
    x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// The UDP source port of the QP whose key is `qp` (`QueuePair::key`): RoCEv2 NICs vary
/// it per QP so that ECMP spreads connections (0xC000 and up, as the IANA dynamic range).
pub fn udp_source_port(qp: u32) -> u16 {
    0xC000 | (qp.wrapping_mul(2_654_435_761) >> 18) as u16
}

/// Which packets to keep for a capture.
#[derive(Clone, Debug, Default)]
pub struct CaptureFilter {
    /// Keep at most this many packets.
    pub limit: Option<u64>,
    /// Keep only these flows (indices into the message list); frames of no flow (PFC)
    /// are then left out.
    pub flows: Option<Vec<u32>>,
}

impl CaptureFilter {
    /// Whether to keep a packet of `flow` (None: a frame of no flow) when `kept` are
    /// already kept.
    pub fn wants(&self, flow: Option<u32>, kept: usize) -> bool {
        if self.limit.is_some_and(|l| kept as u64 >= l) {
            return false;
        }
        match (&self.flows, flow) {
            (None, _) => true,
            (Some(fs), Some(f)) => fs.contains(&f),
            (Some(_), None) => false,
        }
    }
}
