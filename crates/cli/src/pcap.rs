//! Packet captures: raw IB packets in ERF records (pcap link type 197), which tshark 4.0
//! decodes with no options, or in LINKTYPE_INFINIBAND (247) for newer readers.

use fabricsim_core::wire::erf;
use fabricsim_fabric::infiniband::Captured;
use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
use pcap_file::{DataLink, Endianness, TsResolution};
use std::time::Duration;

/// Which pcap link type to write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkType {
    Erf,
    Infiniband,
}

/// Encodes the captured packets as a pcap file (nanosecond timestamps).
pub fn encode(packets: &[Captured], link: LinkType) -> Vec<u8> {
    let header = PcapHeader {
        datalink: match link {
            LinkType::Erf => DataLink::ERF,
            LinkType::Infiniband => DataLink::INFINIBAND,
        },
        ts_resolution: TsResolution::NanoSecond,
        snaplen: 65535,
        endianness: Endianness::Little,
        ..Default::default()
    };
    let mut w = PcapWriter::with_header(Vec::new(), header).expect("writing to memory cannot fail");
    let mut buf = Vec::new();
    for c in packets {
        let bytes = c.repr.emit();
        buf.clear();
        let data: &[u8] = match link {
            LinkType::Erf => {
                erf::push_record(&mut buf, c.time.ps(), &bytes);
                &buf
            }
            LinkType::Infiniband => &bytes,
        };
        let ts = Duration::from_nanos(c.time.ns());
        w.write_packet(&PcapPacket::new(ts, data.len() as u32, data))
            .expect("writing to memory cannot fail");
    }
    w.into_writer()
}
