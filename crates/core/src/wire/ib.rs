//! Native InfiniBand packet layout: LRH, BTH, RETH, AETH, payload, ICRC, VCRC.
//!
//! Field layouts follow the IBA volume 1 as rendered by Linux `include/rdma/ib_pack.h`
//! and Wireshark's `packet-infiniband.c` (see docs/REFERENCE.md section 1).

use super::crc::{crc32_update, vcrc16};

/// Local route header.
pub const LRH_LEN: usize = 8;
/// Base transport header.
pub const BTH_LEN: usize = 12;
/// RDMA extended transport header (first packet of a WRITE).
pub const RETH_LEN: usize = 16;
/// ACK extended transport header.
pub const AETH_LEN: usize = 4;
/// Invariant CRC.
pub const ICRC_LEN: usize = 4;
/// Variant CRC.
pub const VCRC_LEN: usize = 2;
/// Per-packet overhead of a middle WRITE packet: LRH + BTH + ICRC + VCRC = 26 B.
pub const DATA_OVERHEAD: usize = LRH_LEN + BTH_LEN + ICRC_LEN + VCRC_LEN;
/// A link-level flow-control packet: 4 bytes of op/FCTBS/VL/FCCL plus a 2-byte LPCRC.
pub const FLOW_CONTROL_PACKET_LEN: usize = 6;
/// Credits are counted in 64-byte blocks.
pub const CREDIT_BLOCK: usize = 64;
/// The P_Key every simulated packet carries (the default full-membership key).
pub const DEFAULT_PKEY: u16 = 0xFFFF;
/// LNH value for "IBA local": BTH follows the LRH.
const LNH_IBA_LOCAL: u8 = 0b10;

/// BTH opcodes of the RC transport (and the UD send used for completeness).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Opcode {
    SendFirst = 0x00,
    SendMiddle = 0x01,
    SendLast = 0x02,
    SendOnly = 0x04,
    RdmaWriteFirst = 0x06,
    RdmaWriteMiddle = 0x07,
    RdmaWriteLast = 0x08,
    RdmaWriteOnly = 0x0A,
    RdmaReadRequest = 0x0C,
    Acknowledge = 0x11,
    UdSendOnly = 0x64,
}

impl Opcode {
    pub fn from_u8(v: u8) -> Option<Opcode> {
        Some(match v {
            0x00 => Opcode::SendFirst,
            0x01 => Opcode::SendMiddle,
            0x02 => Opcode::SendLast,
            0x04 => Opcode::SendOnly,
            0x06 => Opcode::RdmaWriteFirst,
            0x07 => Opcode::RdmaWriteMiddle,
            0x08 => Opcode::RdmaWriteLast,
            0x0A => Opcode::RdmaWriteOnly,
            0x0C => Opcode::RdmaReadRequest,
            0x11 => Opcode::Acknowledge,
            0x64 => Opcode::UdSendOnly,
            _ => return None,
        })
    }

    /// The WRITE opcode for packet `index` of a message of `count` packets.
    pub fn rdma_write(index: u32, count: u32) -> Opcode {
        match (index == 0, index + 1 == count) {
            (true, true) => Opcode::RdmaWriteOnly,
            (true, false) => Opcode::RdmaWriteFirst,
            (false, true) => Opcode::RdmaWriteLast,
            (false, false) => Opcode::RdmaWriteMiddle,
        }
    }

    /// Whether packets with this opcode carry a RETH.
    pub fn has_reth(self) -> bool {
        matches!(
            self,
            Opcode::RdmaWriteFirst | Opcode::RdmaWriteOnly | Opcode::RdmaReadRequest
        )
    }

    pub fn has_aeth(self) -> bool {
        self == Opcode::Acknowledge
    }
}

/// RDMA extended transport header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reth {
    pub virtual_address: u64,
    pub rkey: u32,
    pub dma_length: u32,
}

/// ACK extended transport header: syndrome (0 = ACK with credit field 0) and MSN.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Aeth {
    pub syndrome: u8,
    pub msn: u32,
}

/// The transport headers native IB and RoCEv2 share: the BTH and its RETH and AETH.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TransportHeaders {
    pub opcode: u8,
    /// Pad bytes after the payload (0-3).
    pub pad: u8,
    pub pkey: u16,
    pub fecn: bool,
    pub becn: bool,
    pub dest_qp: u32,
    pub ack_req: bool,
    pub psn: u32,
    pub reth: Option<Reth>,
    pub aeth: Option<Aeth>,
}

/// Appends the BTH, then the RETH and AETH if present, in network byte order.
pub fn push_transport_headers(b: &mut Vec<u8>, h: &TransportHeaders) {
    b.push(h.opcode);
    b.push((h.pad << 4) & 0x30);
    b.extend_from_slice(&h.pkey.to_be_bytes());
    b.push(((h.fecn as u8) << 7) | ((h.becn as u8) << 6));
    b.extend_from_slice(&h.dest_qp.to_be_bytes()[1..]);
    b.push((h.ack_req as u8) << 7);
    b.extend_from_slice(&h.psn.to_be_bytes()[1..]);
    if let Some(r) = h.reth {
        b.extend_from_slice(&r.virtual_address.to_be_bytes());
        b.extend_from_slice(&r.rkey.to_be_bytes());
        b.extend_from_slice(&r.dma_length.to_be_bytes());
    }
    if let Some(a) = h.aeth {
        b.push(a.syndrome);
        b.extend_from_slice(&a.msn.to_be_bytes()[1..]);
    }
}

/// One IB packet's headers, enough to compute its length and emit its bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PacketRepr {
    pub vl: u8,
    pub sl: u8,
    pub dlid: u16,
    pub slid: u16,
    pub opcode: Opcode,
    pub pkey: u16,
    pub fecn: bool,
    pub becn: bool,
    pub dest_qp: u32,
    pub ack_req: bool,
    pub psn: u32,
    pub reth: Option<Reth>,
    pub aeth: Option<Aeth>,
    pub payload_len: u32,
}

/// Why bytes could not be parsed as an IB packet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ParseError {
    Truncated,
    NotIbaLocal,
    UnknownOpcode(u8),
    LengthMismatch,
    BadIcrc,
    BadVcrc,
}

impl PacketRepr {
    fn pad(&self) -> usize {
        (4 - (self.payload_len as usize % 4)) % 4
    }

    fn header_len(&self) -> usize {
        LRH_LEN
            + BTH_LEN
            + if self.reth.is_some() { RETH_LEN } else { 0 }
            + if self.aeth.is_some() { AETH_LEN } else { 0 }
    }

    /// Bytes on the wire: headers, payload, pad to 4 bytes, ICRC and VCRC.
    pub fn wire_len(&self) -> usize {
        self.header_len() + self.payload_len as usize + self.pad() + ICRC_LEN + VCRC_LEN
    }

    /// Writes the packet (with a zero payload: the simulator does not carry data) and
    /// returns the bytes, ICRC and VCRC computed over them.
    pub fn emit(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(self.wire_len());
        // LRH
        b.push((self.vl & 0xF) << 4);
        b.push(((self.sl & 0xF) << 4) | LNH_IBA_LOCAL);
        b.extend_from_slice(&self.dlid.to_be_bytes());
        let pkt_words = ((self.wire_len() - VCRC_LEN) / 4) as u16;
        b.extend_from_slice(&(pkt_words & 0x07FF).to_be_bytes());
        b.extend_from_slice(&self.slid.to_be_bytes());
        push_transport_headers(
            &mut b,
            &TransportHeaders {
                opcode: self.opcode as u8,
                pad: self.pad() as u8,
                pkey: self.pkey,
                fecn: self.fecn,
                becn: self.becn,
                dest_qp: self.dest_qp,
                ack_req: self.ack_req,
                psn: self.psn,
                reth: self.reth,
                aeth: self.aeth,
            },
        );
        b.resize(b.len() + self.payload_len as usize + self.pad(), 0);
        let icrc = icrc(&b);
        b.extend_from_slice(&icrc.to_le_bytes());
        // Least significant byte first, as the ICRC: both CRCs are reflected.
        let vcrc = vcrc16(&b);
        b.extend_from_slice(&vcrc.to_le_bytes());
        b
    }

    /// Parses bytes written by [`emit`](Self::emit) (or any IBA-local RC packet) and
    /// checks both CRCs.
    pub fn parse(bytes: &[u8]) -> Result<PacketRepr, ParseError> {
        if bytes.len() < LRH_LEN + BTH_LEN + ICRC_LEN + VCRC_LEN {
            return Err(ParseError::Truncated);
        }
        if bytes[1] & 0b11 != LNH_IBA_LOCAL {
            return Err(ParseError::NotIbaLocal);
        }
        let pkt_words = u16::from_be_bytes([bytes[4], bytes[5]]) & 0x07FF;
        if pkt_words as usize * 4 + VCRC_LEN != bytes.len() {
            return Err(ParseError::LengthMismatch);
        }
        let body_end = bytes.len() - VCRC_LEN - ICRC_LEN;
        let vcrc = u16::from_le_bytes([bytes[bytes.len() - 2], bytes[bytes.len() - 1]]);
        if vcrc16(&bytes[..bytes.len() - VCRC_LEN]) != vcrc {
            return Err(ParseError::BadVcrc);
        }
        let stored_icrc =
            u32::from_le_bytes(bytes[body_end..body_end + 4].try_into().expect("4 bytes"));
        if icrc(&bytes[..body_end]) != stored_icrc {
            return Err(ParseError::BadIcrc);
        }
        let bth = &bytes[LRH_LEN..LRH_LEN + BTH_LEN];
        let opcode = Opcode::from_u8(bth[0]).ok_or(ParseError::UnknownOpcode(bth[0]))?;
        let pad = ((bth[1] >> 4) & 0b11) as usize;
        let mut at = LRH_LEN + BTH_LEN;
        let reth = if opcode.has_reth() {
            let r = bytes.get(at..at + RETH_LEN).ok_or(ParseError::Truncated)?;
            at += RETH_LEN;
            Some(Reth {
                virtual_address: u64::from_be_bytes(r[0..8].try_into().expect("8 bytes")),
                rkey: u32::from_be_bytes(r[8..12].try_into().expect("4 bytes")),
                dma_length: u32::from_be_bytes(r[12..16].try_into().expect("4 bytes")),
            })
        } else {
            None
        };
        let aeth = if opcode.has_aeth() {
            let a = bytes.get(at..at + AETH_LEN).ok_or(ParseError::Truncated)?;
            at += AETH_LEN;
            Some(Aeth {
                syndrome: a[0],
                msn: u32::from_be_bytes([0, a[1], a[2], a[3]]),
            })
        } else {
            None
        };
        let payload_len = body_end
            .checked_sub(at + pad)
            .ok_or(ParseError::LengthMismatch)?;
        Ok(PacketRepr {
            vl: bytes[0] >> 4,
            sl: bytes[1] >> 4,
            dlid: u16::from_be_bytes([bytes[2], bytes[3]]),
            slid: u16::from_be_bytes([bytes[6], bytes[7]]),
            opcode,
            pkey: u16::from_be_bytes([bth[2], bth[3]]),
            fecn: bth[4] & 0x80 != 0,
            becn: bth[4] & 0x40 != 0,
            dest_qp: u32::from_be_bytes([0, bth[5], bth[6], bth[7]]),
            ack_req: bth[8] & 0x80 != 0,
            psn: u32::from_be_bytes([0, bth[9], bth[10], bth[11]]),
            reth,
            aeth,
            payload_len: payload_len as u32,
        })
    }
}

/// The invariant CRC of a native IB packet: CRC-32 over the packet from the LRH to the
/// end of the payload, with the fields a switch may change set to all ones first (the
/// LRH's VL nibble, and the BTH byte holding FECN, BECN and the reserved bits).
pub fn icrc(body: &[u8]) -> u32 {
    let mut head = [0u8; LRH_LEN + BTH_LEN];
    head.copy_from_slice(&body[..LRH_LEN + BTH_LEN]);
    head[0] |= 0xF0;
    head[LRH_LEN + 4] = 0xFF;
    let reg = crc32_update(0xFFFF_FFFF, &head);
    !crc32_update(reg, &body[LRH_LEN + BTH_LEN..])
}

/// Wire bytes of packet `index` of an RDMA WRITE of `count` packets with `payload` bytes.
pub fn write_packet_len(payload: u32, first: bool) -> usize {
    let pad = (4 - payload as usize % 4) % 4;
    DATA_OVERHEAD + payload as usize + pad + if first { RETH_LEN } else { 0 }
}

/// Wire bytes of an ACK (LRH + BTH + AETH + ICRC + VCRC = 30 B).
pub const ACK_LEN: usize = DATA_OVERHEAD + AETH_LEN;

/// 64-byte credit blocks a packet of `wire_len` bytes occupies.
pub fn credit_blocks(wire_len: usize) -> u32 {
    wire_len.div_ceil(CREDIT_BLOCK) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(opcode: Opcode, payload_len: u32) -> PacketRepr {
        PacketRepr {
            vl: 1,
            sl: 3,
            dlid: 7,
            slid: 2,
            opcode,
            pkey: DEFAULT_PKEY,
            fecn: false,
            becn: false,
            dest_qp: 0x12_3456,
            ack_req: true,
            psn: 0xAB_CDEF,
            reth: opcode.has_reth().then_some(Reth {
                virtual_address: 1 << 40,
                rkey: 9,
                dma_length: 8192,
            }),
            aeth: opcode.has_aeth().then_some(Aeth {
                syndrome: 0,
                msn: 5,
            }),
            payload_len,
        }
    }

    #[test]
    fn sizes_match_the_reference() {
        assert_eq!(DATA_OVERHEAD, 26);
        assert_eq!(sample(Opcode::RdmaWriteMiddle, 4096).wire_len(), 4122);
        assert_eq!(sample(Opcode::RdmaWriteFirst, 4096).wire_len(), 4138);
        assert_eq!(sample(Opcode::Acknowledge, 0).wire_len(), ACK_LEN);
        assert_eq!(write_packet_len(4096, false), 4122);
        assert_eq!(write_packet_len(4095, true), 4138);
    }

    #[test]
    fn emit_parse_round_trip() {
        for (op, len) in [
            (Opcode::RdmaWriteFirst, 4096),
            (Opcode::RdmaWriteMiddle, 4096),
            (Opcode::RdmaWriteLast, 13),
            (Opcode::RdmaWriteOnly, 1),
            (Opcode::Acknowledge, 0),
        ] {
            let p = sample(op, len);
            let bytes = p.emit();
            assert_eq!(bytes.len(), p.wire_len());
            assert_eq!(PacketRepr::parse(&bytes), Ok(p));
        }
    }

    #[test]
    fn icrc_ignores_variant_fields_and_catches_others() {
        let a = sample(Opcode::RdmaWriteMiddle, 64);
        let b = PacketRepr {
            vl: 5,
            fecn: true,
            becn: true,
            ..a
        };
        let (ba, bb) = (a.emit(), b.emit());
        assert_eq!(
            ba[ba.len() - 6..ba.len() - 2],
            bb[bb.len() - 6..bb.len() - 2]
        );
        let mut corrupt = ba.clone();
        corrupt[LRH_LEN + 11] ^= 1; // a PSN bit
        assert!(PacketRepr::parse(&corrupt).is_err());
    }
}
