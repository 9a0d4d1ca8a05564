//! ERF (Endace Extensible Record Format) framing for raw InfiniBand packets.
//!
//! tshark 4.0 does not read LINKTYPE_INFINIBAND (247) but decodes ERF records of type 21
//! (InfiniBand) inside pcap link type 197 (DLT_ERF) with no options. A record is a 16-byte
//! header followed by the packet from its LRH on.

/// pcap link type for ERF records.
pub const LINKTYPE_ERF: u32 = 197;
/// pcap link type for raw IB packets starting with the LRH (not readable by tshark 4.0).
pub const LINKTYPE_INFINIBAND: u32 = 247;
/// ERF record type for InfiniBand.
pub const ERF_TYPE_INFINIBAND: u8 = 21;
/// Bytes of the ERF record header.
pub const ERF_HEADER_LEN: usize = 16;

/// Appends one ERF record holding `packet`, stamped `time_ps` picoseconds after the epoch.
///
/// Layout: timestamp (u64 little-endian, 32.32 fixed-point seconds), type, flags
/// (0x04 = variable-length record), rlen (record length, big-endian), lctr (0), wlen
/// (wire length, big-endian).
pub fn push_record(out: &mut Vec<u8>, time_ps: u64, packet: &[u8]) {
    let secs = time_ps / 1_000_000_000_000;
    let frac_ps = time_ps % 1_000_000_000_000;
    let frac = ((frac_ps as u128) << 32) / 1_000_000_000_000u128;
    let ts = (secs << 32) | frac as u64;
    out.extend_from_slice(&ts.to_le_bytes());
    out.push(ERF_TYPE_INFINIBAND);
    out.push(0x04);
    out.extend_from_slice(&((ERF_HEADER_LEN + packet.len()) as u16).to_be_bytes());
    out.extend_from_slice(&0u16.to_be_bytes());
    out.extend_from_slice(&(packet.len() as u16).to_be_bytes());
    out.extend_from_slice(packet);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_layout() {
        let mut out = Vec::new();
        push_record(&mut out, 1_500_000_000_000, &[1, 2, 3, 4]);
        assert_eq!(out.len(), 20);
        assert_eq!(
            u64::from_le_bytes(out[0..8].try_into().unwrap()),
            (1u64 << 32) | (1u64 << 31)
        );
        assert_eq!(out[8], 21);
        assert_eq!(u16::from_be_bytes([out[10], out[11]]), 20);
        assert_eq!(u16::from_be_bytes([out[14], out[15]]), 4);
        assert_eq!(&out[16..], &[1, 2, 3, 4]);
    }
}
