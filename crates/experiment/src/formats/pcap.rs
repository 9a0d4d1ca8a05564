//! Packet captures. InfiniBand: raw IB packets in ERF records (pcap link type 197), which
//! tshark 4.0 decodes with no options, or LINKTYPE_INFINIBAND (247) for newer readers.
//! RoCEv2: Ethernet frames without FCS (LINKTYPE_ETHERNET, 1), decoded as RRoCE on UDP
//! port 4791 and as PFC MAC control frames.

use crate::outcome::Capture;
use fabricsim_core::units::Time;
use fabricsim_core::wire::erf;
use fabricsim_fabric::FabricKind;
use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
use pcap_file::{DataLink, Endianness, TsResolution};
use std::time::Duration;

/// Which pcap link type to write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkType {
    Erf,
    Infiniband,
    Ethernet,
}

impl LinkType {
    /// The name the command line uses for it.
    pub fn name(self) -> &'static str {
        match self {
            LinkType::Erf => "erf",
            LinkType::Infiniband => "infiniband",
            LinkType::Ethernet => "ethernet",
        }
    }

    /// The link types a fabric's capture can be written as; the first is the default.
    pub fn allowed(fabric: FabricKind) -> &'static [LinkType] {
        match fabric {
            FabricKind::Infiniband => &[LinkType::Erf, LinkType::Infiniband],
            FabricKind::Rocev2 => &[LinkType::Ethernet],
        }
    }
}

/// Encodes a capture as a pcap file (nanosecond timestamps). `link` must be one of
/// [`LinkType::allowed`] for the capture's fabric.
pub fn encode(capture: &Capture, link: LinkType) -> Vec<u8> {
    let fabric = match capture {
        Capture::Infiniband(_) => FabricKind::Infiniband,
        Capture::Ethernet(_) => FabricKind::Rocev2,
    };
    assert!(
        LinkType::allowed(fabric).contains(&link),
        "link type checked by the caller"
    );
    let header = PcapHeader {
        datalink: match link {
            LinkType::Erf => DataLink::ERF,
            LinkType::Infiniband => DataLink::INFINIBAND,
            LinkType::Ethernet => DataLink::ETHERNET,
        },
        ts_resolution: TsResolution::NanoSecond,
        snaplen: 65535,
        endianness: Endianness::Little,
        ..Default::default()
    };
    let mut w = PcapWriter::with_header(Vec::new(), header).expect("writing to memory cannot fail");
    let mut put = |time: Time, data: &[u8]| {
        let ts = Duration::from_nanos(time.ns());
        w.write_packet(&PcapPacket::new(ts, data.len() as u32, data))
            .expect("writing to memory cannot fail");
    };
    match capture {
        Capture::Infiniband(packets) => {
            let mut buf = Vec::new();
            for c in packets {
                let bytes = c.repr.emit();
                if link == LinkType::Erf {
                    buf.clear();
                    erf::push_record(&mut buf, c.time.ps(), &bytes);
                    put(c.time, &buf);
                } else {
                    put(c.time, &bytes);
                }
            }
        }
        Capture::Ethernet(frames) => {
            for f in frames {
                put(f.time, &f.bytes);
            }
        }
    }
    w.into_writer()
}
