//! The capture's bytes, checked without tshark: record framing, header fields and an
//! independently computed ICRC (bitwise CRC-32 over the masked packet).

use fabricsim::experiment;
use fabricsim::pcap::{encode, LinkType};
use fabricsim::scenario::Scenario;
use fabricsim_fabric::infiniband::CaptureFilter;

/// Bitwise CRC-32 (reflected 0xEDB88320), written apart from the table-driven one.
fn crc32_bitwise(data: &[u8]) -> u32 {
    let mut c = 0xFFFF_FFFFu32;
    for &b in data {
        c ^= b as u32;
        for _ in 0..8 {
            c = if c & 1 == 1 {
                (c >> 1) ^ 0xEDB8_8320
            } else {
                c >> 1
            };
        }
    }
    !c
}

#[test]
fn every_captured_packet_has_a_correct_icrc() {
    let s = Scenario::parse(
        "[topology]\nkind = \"single-switch\"\nhosts = 3\n[[traffic]]\nkind = \"incast\"\nsenders = [1, 2]\ndst = 0\nsize = 9000\n",
        "t",
    )
    .unwrap();
    let out = experiment::run(
        &s,
        Some(CaptureFilter {
            limit: Some(5),
            flows: Some(vec![1]),
        }),
        false,
    )
    .unwrap();
    // Flow 1 (host 2 -> host 0) sends 3 data packets; host 0 ACKs once, at the end.
    assert_eq!(out.captured.len(), 4);
    let file = encode(&out.captured, LinkType::Infiniband);
    let mut at = 24;
    let mut psns = Vec::new();
    while at < file.len() {
        let incl = u32::from_le_bytes(file[at + 8..at + 12].try_into().unwrap()) as usize;
        let pkt = &file[at + 16..at + 16 + incl];
        at += 16 + incl;
        let mut masked = pkt[..pkt.len() - 6].to_vec();
        masked[0] |= 0xF0;
        masked[8 + 4] = 0xFF;
        let icrc = u32::from_le_bytes(pkt[pkt.len() - 6..pkt.len() - 2].try_into().unwrap());
        assert_eq!(icrc, crc32_bitwise(&masked));
        let dlid = u16::from_be_bytes([pkt[2], pkt[3]]);
        let psn = u32::from_be_bytes([0, pkt[8 + 9], pkt[8 + 10], pkt[8 + 11]]);
        match pkt[8] {
            0x11 => assert_eq!(
                (dlid, psn),
                (3, 2),
                "the ACK goes to host 2 (LID 3) and covers PSN 2"
            ),
            _ => {
                assert_eq!(dlid, 1, "data goes to host 0 (LID 1)");
                psns.push(psn);
            }
        }
    }
    assert_eq!(psns, vec![0, 1, 2]);
}
