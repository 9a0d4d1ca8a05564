//! The capture's bytes, checked without tshark: record framing, header fields and an
//! independently computed ICRC (bitwise CRC-32 over the masked packet), for InfiniBand
//! and for RoCEv2 Ethernet frames.

use fabricsim_experiment::formats::pcap::{encode, LinkType};
use fabricsim_experiment::runner::{self, Capture};
use fabricsim_experiment::scenario::Scenario;
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
    let out = runner::run(
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
    assert!(matches!(out.captured, Capture::Infiniband(_)));
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

/// The RoCEv2 ICRC as docs/REFERENCE.md section 1 states it: CRC-32 over 8 bytes of 0xFF, then
/// the IPv4 packet with TOS, TTL, header checksum, UDP checksum and the BTH byte of
/// FECN/BECN/reserved set to all ones, up to the ICRC.
fn roce_icrc(ip_packet: &[u8]) -> u32 {
    let mut m = vec![0xFF; 8];
    m.extend_from_slice(ip_packet);
    for at in [1, 8, 10, 11, 26, 27, 32] {
        m[8 + at] = 0xFF;
    }
    crc32_bitwise(&m)
}

#[test]
fn roce_frames_carry_correct_icrcs_and_their_modelled_length() {
    // An incast with DCQCN and small ECN thresholds: data, ACKs, CNPs and PAUSE frames.
    let s = Scenario::parse(
        "[fabric]\nkind = \"rocev2\"\n[fabric.rocev2]\nswitch_buffer = \"2MiB\"\ndcqcn_preset = \"paper\"\necn = { kmin = \"5KB\", kmax = \"20KB\", pmax = 1.0 }\n[topology]\nkind = \"single-switch\"\nhosts = 9\n[[traffic]]\nkind = \"incast\"\nsenders = [1, 2, 3, 4, 5, 6, 7, 8]\ndst = 0\nsize = 1000001\n",
        "t",
    )
    .unwrap();
    let out = runner::run(&s, Some(CaptureFilter::default()), false).unwrap();
    let Capture::Ethernet(frames) = &out.captured else {
        panic!("a RoCEv2 capture is Ethernet")
    };
    let mut kinds = std::collections::BTreeMap::new();
    let mut host_bytes = 0u64;
    for f in frames {
        let b = &f.bytes;
        let ethertype = u16::from_be_bytes([b[12], b[13]]);
        if ethertype == 0x8808 {
            assert_eq!(b.len(), 60);
            assert_eq!(u16::from_be_bytes([b[14], b[15]]), 0x0101, "PFC opcode");
            *kinds.entry("pfc").or_insert(0) += 1;
            if b[6..9] == [0x02, 0x00, 0x00] {
                host_bytes += 64 + 20;
            }
            continue;
        }
        assert_eq!(ethertype, 0x0800);
        let total = u16::from_be_bytes([b[16], b[17]]) as usize;
        let ip = &b[14..14 + total];
        assert_eq!(u16::from_be_bytes([ip[22], ip[23]]), 4791, "UDP port");
        let icrc = u32::from_le_bytes(ip[total - 4..].try_into().unwrap());
        assert_eq!(icrc, roce_icrc(&ip[..total - 4]));
        // The IPv4 header checksum verifies.
        let sum: u32 = ip[..20]
            .chunks(2)
            .map(|w| u16::from_be_bytes([w[0], w[1]]) as u32)
            .sum();
        assert_eq!((sum & 0xFFFF) + (sum >> 16), 0xFFFF);
        host_bytes += (b.len() + 4 + 20) as u64;
        let kind = match ip[28] {
            0x06..=0x0A => "data",
            0x11 => "ack",
            0x81 => "cnp",
            other => panic!("unexpected opcode {other:#x}"),
        };
        *kinds.entry(kind).or_insert(0) += 1;
    }
    for k in ["data", "ack", "cnp", "pfc"] {
        assert!(
            kinds.get(k).is_some_and(|&n| n > 0),
            "no {k} frames: {kinds:?}"
        );
    }
    // 1000001 B is 245 packets per flow, the last with 577 B padded to 580.
    assert_eq!(kinds["data"], 8 * 245, "{kinds:?}");
    // Every byte the NICs put on the wire is in the capture (frame + FCS + preamble/IFG).
    let nic_tx: u64 = out
        .report
        .ports
        .iter()
        .filter(|p| p.node < 9)
        .map(|p| p.tx_bytes)
        .sum();
    assert_eq!(host_bytes, nic_tx);
}
