//! RoCEv2 framing sizes: RDMA inside UDP/IP over Ethernet (REFERENCE.md section 1).
//!
//! Every RoCEv2 frame's time on the wire in the simulator comes from these functions,
//! which count the preamble, SFD and inter-frame gap as link time.

use super::ib::{AETH_LEN, BTH_LEN, ICRC_LEN, RETH_LEN};

/// Preamble (7), SFD (1) and the minimum inter-frame gap (12): link time, not frame bytes.
pub const PREAMBLE_IFG_LEN: usize = 20;
/// Ethernet header without a VLAN tag.
pub const ETH_LEN: usize = 14;
/// Ethernet frame check sequence.
pub const FCS_LEN: usize = 4;
pub const IPV4_LEN: usize = 20;
pub const IPV6_LEN: usize = 40;
pub const UDP_LEN: usize = 8;
/// The IANA port of RoCEv2.
pub const ROCEV2_UDP_PORT: u16 = 4791;
/// Smallest Ethernet frame (header to FCS).
pub const MIN_FRAME_LEN: usize = 64;
/// A CNP carries 16 reserved bytes after the BTH (REFERENCE.md section 1).
pub const CNP_RESERVED_LEN: usize = 16;
/// A PFC frame is a minimum-size MAC control frame.
pub const PFC_FRAME_WIRE_LEN: usize = MIN_FRAME_LEN + PREAMBLE_IFG_LEN;

/// IP version of the RoCEv2 encapsulation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum IpVersion {
    V4,
    V6,
}

impl IpVersion {
    pub fn header_len(self) -> usize {
        match self {
            IpVersion::V4 => IPV4_LEN,
            IpVersion::V6 => IPV6_LEN,
        }
    }
}

/// Link bytes of a frame whose RoCE part (BTH onwards, ICRC included) is `roce` bytes.
fn wire_len(ip: IpVersion, roce: usize) -> usize {
    let frame = ETH_LEN + ip.header_len() + UDP_LEN + roce + FCS_LEN;
    PREAMBLE_IFG_LEN + frame.max(MIN_FRAME_LEN)
}

/// Per-packet overhead of a middle WRITE packet on the wire: 82 B over IPv4, 102 B over IPv6.
pub fn data_overhead(ip: IpVersion) -> usize {
    // Measured on a packet large enough that no minimum-frame padding applies.
    write_frame_len(ip, 1024, false) - 1024
}

/// Link bytes of an RDMA WRITE packet with `payload` bytes; the first carries the RETH.
pub fn write_frame_len(ip: IpVersion, payload: u32, first: bool) -> usize {
    let reth = if first { RETH_LEN } else { 0 };
    wire_len(ip, BTH_LEN + reth + payload as usize + ICRC_LEN)
}

/// Link bytes of an ACK or NAK (BTH + AETH).
pub fn ack_frame_len(ip: IpVersion) -> usize {
    wire_len(ip, BTH_LEN + AETH_LEN + ICRC_LEN)
}

/// Link bytes of a CNP (BTH + 16 reserved bytes): 98 B over IPv4.
pub fn cnp_frame_len(ip: IpVersion) -> usize {
    wire_len(ip, BTH_LEN + CNP_RESERVED_LEN + ICRC_LEN)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overheads_match_the_reference() {
        // REFERENCE.md section 1: 20+14+20+8+12+4+4 = 82 B; IPv6 102 B; CNP frame 78 B.
        assert_eq!(data_overhead(IpVersion::V4), 82);
        assert_eq!(data_overhead(IpVersion::V6), 102);
        assert_eq!(cnp_frame_len(IpVersion::V4), 78 + PREAMBLE_IFG_LEN);
        assert_eq!(write_frame_len(IpVersion::V4, 4096, true), 82 + 16 + 4096);
        // An ACK frame (66 B) is above the 64 B minimum; nothing is padded here.
        assert_eq!(ack_frame_len(IpVersion::V4), 66 + PREAMBLE_IFG_LEN);
    }
}
