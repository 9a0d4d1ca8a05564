//! RoCEv2 framing sizes: RDMA inside UDP/IP over Ethernet (docs/REFERENCE.md section 1).
//!
//! Every RoCEv2 frame's time on the wire in the simulator comes from these functions,
//! which count the preamble, SFD and inter-frame gap as link time.

use super::crc::crc32_update;
use super::ib::{
    push_transport_headers, Aeth, Reth, TransportHeaders, AETH_LEN, BTH_LEN, DEFAULT_PKEY,
    ICRC_LEN, RETH_LEN,
};

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
/// A CNP carries 16 reserved bytes after the BTH (docs/REFERENCE.md section 1).
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

/// Link bytes of an RDMA WRITE packet with `payload` bytes (padded to 4 bytes, as the
/// BTH pad count says); the first carries the RETH.
pub fn write_frame_len(ip: IpVersion, payload: u32, first: bool) -> usize {
    let reth = if first { RETH_LEN } else { 0 };
    wire_len(ip, BTH_LEN + reth + padded(payload) + ICRC_LEN)
}

/// Payload bytes rounded up to a multiple of 4.
fn padded(payload: u32) -> usize {
    (payload as usize).div_ceil(4) * 4
}

/// Link bytes of an ACK or NAK (BTH + AETH).
pub fn ack_frame_len(ip: IpVersion) -> usize {
    wire_len(ip, BTH_LEN + AETH_LEN + ICRC_LEN)
}

/// Link bytes of a CNP (BTH + 16 reserved bytes): 98 B over IPv4.
pub fn cnp_frame_len(ip: IpVersion) -> usize {
    wire_len(ip, BTH_LEN + CNP_RESERVED_LEN + ICRC_LEN)
}

/// The RoCEv2 CNP opcode (docs/REFERENCE.md section 1).
pub const OPCODE_CNP: u8 = 0x81;
/// The AETH syndrome of a NAK for a PSN sequence error.
pub const NAK_PSN_SEQUENCE_ERROR: u8 = 0x60;
/// DSCP of RoCE data (26, with ECT(0): traffic class 106, the usual NIC setting;
/// unverified as a universal default).
pub const DATA_DSCP: u8 = 26;
/// DSCP of CNPs (48: the mlx5 cnp_dscp default; unverified).
pub const CNP_DSCP: u8 = 48;
/// The 802.1Qbb priority of RoCE data in PFC frames (3, the common lossless class).
pub const DATA_PRIORITY: u8 = 3;

/// One RoCEv2 packet's fields, enough to emit its frame. Hosts get addresses from their
/// index: MAC 02:00:00:xx:xx:xx, IPv4 10.x.x.x, IPv6 fd00::x.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RoceRepr {
    pub ip: IpVersion,
    pub src_host: u32,
    pub dst_host: u32,
    pub udp_sport: u16,
    pub dscp: u8,
    /// IP ECN field: 0 not-ECT, 2 ECT(0), 3 CE.
    pub ecn: u8,
    pub opcode: u8,
    pub becn: bool,
    pub dest_qp: u32,
    pub ack_req: bool,
    pub psn: u32,
    pub reth: Option<Reth>,
    pub aeth: Option<Aeth>,
    /// A CNP carries 16 reserved bytes.
    pub cnp: bool,
    pub payload_len: u32,
}

fn host_mac(host: u32) -> [u8; 6] {
    let h = host.to_be_bytes();
    [0x02, 0x00, 0x00, h[1], h[2], h[3]]
}

impl RoceRepr {
    /// The frame from the Ethernet header to the end of the padding, without the FCS (as
    /// captures on LINKTYPE_ETHERNET hold it), with a zero payload and computed IPv4
    /// header checksum and ICRC. Its length + FCS + preamble/IFG is the frame's link bytes.
    pub fn emit(&self) -> Vec<u8> {
        let mut b =
            Vec::with_capacity(ETH_LEN + IPV6_LEN + UDP_LEN + 64 + self.payload_len as usize);
        b.extend_from_slice(&host_mac(self.dst_host));
        b.extend_from_slice(&host_mac(self.src_host));
        let pad = padded(self.payload_len) - self.payload_len as usize;
        let roce_len = BTH_LEN
            + self.reth.map_or(0, |_| RETH_LEN)
            + self.aeth.map_or(0, |_| AETH_LEN)
            + if self.cnp { CNP_RESERVED_LEN } else { 0 }
            + padded(self.payload_len)
            + ICRC_LEN;
        let udp_len = (UDP_LEN + roce_len) as u16;
        let tclass = (self.dscp << 2) | (self.ecn & 3);
        let ip_start = b.len() + 2;
        match self.ip {
            IpVersion::V4 => {
                b.extend_from_slice(&0x0800u16.to_be_bytes());
                b.push(0x45);
                b.push(tclass);
                b.extend_from_slice(&(IPV4_LEN as u16 + udp_len).to_be_bytes());
                b.extend_from_slice(&[0, 0, 0x40, 0, 64, 17, 0, 0]);
                b.extend_from_slice(&[10, 0, 0, 0]);
                b.extend_from_slice(&[10, 0, 0, 0]);
                b[ip_start + 13..ip_start + 16].copy_from_slice(&self.src_host.to_be_bytes()[1..]);
                b[ip_start + 17..ip_start + 20].copy_from_slice(&self.dst_host.to_be_bytes()[1..]);
                let sum = ipv4_checksum(&b[ip_start..ip_start + IPV4_LEN]);
                b[ip_start + 10..ip_start + 12].copy_from_slice(&sum.to_be_bytes());
            }
            IpVersion::V6 => {
                b.extend_from_slice(&0x86DDu16.to_be_bytes());
                b.extend_from_slice(&(0x6000_0000u32 | (tclass as u32) << 20).to_be_bytes());
                b.extend_from_slice(&udp_len.to_be_bytes());
                b.extend_from_slice(&[17, 64]);
                for host in [self.src_host, self.dst_host] {
                    b.extend_from_slice(&[0xFD, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
                    b.extend_from_slice(&host.to_be_bytes());
                }
            }
        }
        b.extend_from_slice(&self.udp_sport.to_be_bytes());
        b.extend_from_slice(&ROCEV2_UDP_PORT.to_be_bytes());
        b.extend_from_slice(&udp_len.to_be_bytes());
        b.extend_from_slice(&[0, 0]);
        push_transport_headers(
            &mut b,
            &TransportHeaders {
                opcode: self.opcode,
                pad: pad as u8,
                pkey: DEFAULT_PKEY,
                fecn: false,
                becn: self.becn,
                dest_qp: self.dest_qp,
                ack_req: self.ack_req,
                psn: self.psn,
                reth: self.reth,
                aeth: self.aeth,
            },
        );
        if self.cnp {
            b.resize(b.len() + CNP_RESERVED_LEN, 0);
        }
        b.resize(b.len() + padded(self.payload_len), 0);
        let icrc = icrc(&b[ip_start..], self.ip);
        b.extend_from_slice(&icrc.to_le_bytes());
        if self.ip == IpVersion::V6 {
            // IPv6 forbids a zero UDP checksum (RFC 8200 section 8.1); the ICRC leaves the
            // field out, so it is computed last. IPv4 keeps 0, "no checksum" (RFC 768).
            let udp_start = ip_start + IPV6_LEN;
            let sum = udp6_checksum(&b[ip_start + 8..ip_start + 40], &b[udp_start..]);
            b[udp_start + 6..udp_start + 8].copy_from_slice(&sum.to_be_bytes());
        }
        b.resize(b.len().max(MIN_FRAME_LEN - FCS_LEN), 0);
        b
    }
}

/// The RoCEv2 invariant CRC over an IP packet (IP header to the end of the payload):
/// CRC-32 over 8 bytes of 0xFF standing for the LRH, then the packet with the fields a
/// router may change set to all ones (IPv4 TOS, TTL and checksum; IPv6 traffic class,
/// flow label and hop limit; the UDP checksum; the BTH byte holding FECN, BECN and the
/// reserved bits). docs/REFERENCE.md section 1, after Linux rxe_icrc.c.
pub fn icrc(ip_packet: &[u8], ip: IpVersion) -> u32 {
    let mut head = [0u8; IPV6_LEN + UDP_LEN + BTH_LEN];
    let len = ip.header_len() + UDP_LEN + BTH_LEN;
    head[..len].copy_from_slice(&ip_packet[..len]);
    match ip {
        IpVersion::V4 => {
            head[1] = 0xFF;
            head[8] = 0xFF;
            head[10] = 0xFF;
            head[11] = 0xFF;
        }
        IpVersion::V6 => {
            head[0] |= 0x0F;
            head[1..4].fill(0xFF);
            head[7] = 0xFF;
        }
    }
    let udp = ip.header_len();
    head[udp + 6] = 0xFF;
    head[udp + 7] = 0xFF;
    head[udp + UDP_LEN + 4] = 0xFF;
    let reg = crc32_update(0xFFFF_FFFF, &[0xFF; 8]);
    let reg = crc32_update(reg, &head[..len]);
    !crc32_update(reg, &ip_packet[len..])
}

/// The Internet checksum (RFC 1071) of `parts` taken as one byte string: the ones'
/// complement of the ones' complement sum of its 16-bit words (an odd tail padded).
fn internet_checksum(parts: &[&[u8]]) -> u16 {
    let bytes = parts.iter().flat_map(|p| p.iter().copied());
    let mut sum: u64 = 0;
    let mut high = None;
    for byte in bytes {
        match high.take() {
            None => high = Some(byte),
            Some(h) => sum += u16::from_be_bytes([h, byte]) as u64,
        }
    }
    if let Some(h) = high {
        sum += (h as u64) << 8;
    }
    while sum > 0xFFFF {
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    !(sum as u16)
}

/// The IPv4 header checksum.
fn ipv4_checksum(header: &[u8]) -> u16 {
    internet_checksum(&[header])
}

/// The UDP checksum over IPv6 (RFC 8200 section 8.1): the pseudo-header of source and
/// destination addresses (`addresses`, 32 bytes), the UDP length and next header 17,
/// then the UDP header (checksum zero) and payload (`udp`). A result of 0 is sent as
/// 0xFFFF.
fn udp6_checksum(addresses: &[u8], udp: &[u8]) -> u16 {
    let length = (udp.len() as u32).to_be_bytes();
    match internet_checksum(&[addresses, &length, &[0, 0, 0, 17], udp]) {
        0 => 0xFFFF,
        sum => sum,
    }
}

/// A PFC frame (802.1Qbb) from `src_host`'s or a switch port's MAC, pausing the data
/// priority for `quanta` (0 resumes), without FCS: 60 bytes.
pub fn pfc_frame(src_mac: [u8; 6], quanta: u16) -> Vec<u8> {
    let mut b = vec![0x01, 0x80, 0xC2, 0x00, 0x00, 0x01];
    b.extend_from_slice(&src_mac);
    b.extend_from_slice(&0x8808u16.to_be_bytes());
    b.extend_from_slice(&0x0101u16.to_be_bytes());
    b.extend_from_slice(&(1u16 << DATA_PRIORITY).to_be_bytes());
    for p in 0..8u8 {
        let t = if p == DATA_PRIORITY { quanta } else { 0 };
        b.extend_from_slice(&t.to_be_bytes());
    }
    b.resize(MIN_FRAME_LEN - FCS_LEN, 0);
    b
}

/// The MAC of a port: hosts as in [`RoceRepr`], switch ports 02:01:ss:ss:pp:pp.
pub fn port_mac(host: Option<u32>, node: u32, port: u16) -> [u8; 6] {
    match host {
        Some(h) => host_mac(h),
        None => {
            let n = (node as u16).to_be_bytes();
            let p = port.to_be_bytes();
            [0x02, 0x01, n[0], n[1], p[0], p[1]]
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overheads_match_the_reference() {
        // docs/REFERENCE.md section 1: 20+14+20+8+12+4+4 = 82 B; IPv6 102 B; CNP frame 78 B.
        assert_eq!(data_overhead(IpVersion::V4), 82);
        assert_eq!(data_overhead(IpVersion::V6), 102);
        assert_eq!(cnp_frame_len(IpVersion::V4), 78 + PREAMBLE_IFG_LEN);
        assert_eq!(write_frame_len(IpVersion::V4, 4096, true), 82 + 16 + 4096);
        // An ACK frame (66 B) is above the 64 B minimum; nothing is padded here.
        assert_eq!(ack_frame_len(IpVersion::V4), 66 + PREAMBLE_IFG_LEN);
    }

    fn write(ip: IpVersion, payload: u32, first: bool) -> RoceRepr {
        RoceRepr {
            ip,
            src_host: 1,
            dst_host: 2,
            udp_sport: 0xC001,
            dscp: DATA_DSCP,
            ecn: 2,
            opcode: if first { 0x06 } else { 0x07 },
            becn: false,
            dest_qp: 0x100,
            ack_req: false,
            psn: 5,
            reth: first.then_some(Reth {
                virtual_address: 1,
                rkey: 2,
                dma_length: 3,
            }),
            aeth: None,
            cnp: false,
            payload_len: payload,
        }
    }

    #[test]
    fn emitted_frames_have_the_modelled_length() {
        for ip in [IpVersion::V4, IpVersion::V6] {
            for (payload, first) in [(4096, true), (4096, false), (1001, false), (1, true)] {
                let b = write(ip, payload, first).emit();
                assert_eq!(
                    b.len() + FCS_LEN + PREAMBLE_IFG_LEN,
                    write_frame_len(ip, payload, first),
                    "{ip:?} {payload} {first}"
                );
            }
        }
        assert_eq!(
            pfc_frame([2; 6], 7).len() + FCS_LEN + PREAMBLE_IFG_LEN,
            PFC_FRAME_WIRE_LEN
        );
    }

    #[test]
    fn icrc_ignores_the_fields_routers_change() {
        let a = write(IpVersion::V4, 64, false);
        let b = RoceRepr { ecn: 3, ..a };
        let (fa, fb) = (a.emit(), b.emit());
        assert_ne!(fa, fb, "CE changes the TOS byte and the IPv4 checksum");
        let icrc_at = fa.len() - ICRC_LEN;
        assert_eq!(fa[icrc_at..], fb[icrc_at..], "but not the ICRC");
        // A changed PSN changes it.
        let c = RoceRepr { psn: 6, ..a }.emit();
        assert_ne!(fa[icrc_at..], c[icrc_at..]);
        // The IPv4 header checksum verifies: the header sums to 0xFFFF.
        assert_eq!(ipv4_checksum(&fa[ETH_LEN..ETH_LEN + IPV4_LEN]), 0);
    }
}
