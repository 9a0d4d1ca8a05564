//! The ideal completion time of a message on an empty fabric: its packets pipelined along its static path.

use crate::workload::Message;
use fabricsim_core::topology::{NodeKind, Port, Routes, Topology};
use fabricsim_core::units::{HostId, Time};

/// Ideal completion of `m` on an empty fabric, over the links its packets cross on the
/// static route: the endpoints' fixed latencies, then the message's packets pipelined
/// through every link at that link's rate, each store-and-forward switch starting a packet
/// a switch latency after its last bit arrived, plus every link's propagation.
/// `frame_len(payload, first)` is a packet's link bytes.
pub fn ideal_fct(
    topo: &Topology,
    routes: &Routes,
    m: &Message,
    mtu: u32,
    endpoint_latency: Time,
    switch_latency: Time,
    frame_len: impl Fn(u32, bool) -> u64,
) -> Time {
    let links = static_path(topo, routes, m.src, m.dst);
    let train = PacketTrain::of(m.size, mtu, frame_len);
    endpoint_latency + pipeline_time(&links, switch_latency, &train)
}

/// The ports a packet from `src` to `dst` leaves by on the static route, host port first.
pub fn static_path(topo: &Topology, routes: &Routes, src: HostId, dst: HostId) -> Vec<Port> {
    let mut port = topo.host_port(src);
    let mut path = vec![*topo.port(port)];
    loop {
        let node = topo.port(topo.port(port).peer).node;
        if !matches!(topo.nodes()[node.index()], NodeKind::Switch { .. }) {
            return path;
        }
        port = routes.static_port(node, dst);
        path.push(*topo.port(port));
    }
}

/// A message's packets by link bytes: the first, `middle_count` of the same size, and
/// the last (none if the message is one packet).
#[derive(Clone, Copy, Debug)]
pub struct PacketTrain {
    pub first: u64,
    pub middle: u64,
    pub middle_count: u64,
    pub last: Option<u64>,
}

impl PacketTrain {
    /// The packets of a message of `size` bytes cut at `mtu`; `frame_len(payload, first)`
    /// is a packet's link bytes.
    pub fn of(size: u64, mtu: u32, frame_len: impl Fn(u32, bool) -> u64) -> Self {
        let packets = size.div_ceil(mtu as u64).max(1);
        let last_payload = (size - (packets - 1) * mtu as u64) as u32;
        PacketTrain {
            first: frame_len(if packets == 1 { last_payload } else { mtu }, true),
            middle: frame_len(mtu, false),
            middle_count: packets.saturating_sub(2),
            last: (packets > 1).then(|| frame_len(last_payload, false)),
        }
    }

    /// How many packets.
    pub fn packets(&self) -> u64 {
        1 + self.middle_count + self.last.map_or(0, |_| 1)
    }

    /// Their link bytes together.
    pub fn bytes(&self) -> u64 {
        self.first + self.middle_count * self.middle + self.last.unwrap_or(0)
    }
}

/// When the last bit of the train's last packet reaches the end of `links`, on links
/// otherwise empty: each link sends a packet once it has fully arrived over the previous
/// link (plus `switch_latency`) and the link has finished the packet before.
///
/// Exact, in closed form for the middle packets: with `G(k, 0)` the time link k finishes
/// the first packet, the m-th middle packet leaves link i at the longest chain through
/// the (link, packet) grid,
/// `max over k <= i of G(k, 0) + c(k) + (m - 1) max(c(k..=i)) + sum over l in k..i of
/// (d(l) + switch_latency + c(l + 1))`, where c is a link's time per middle packet and d
/// its propagation: every further packet of the same size adds the slowest link's time.
pub fn pipeline_time(links: &[Port], switch_latency: Time, train: &PacketTrain) -> Time {
    let send = |finish: &mut [Time], bytes: u64| {
        let mut ready = Time::ZERO;
        for (i, link) in links.iter().enumerate() {
            finish[i] = finish[i].max(ready) + link.rate.serialization(bytes);
            ready = finish[i] + link.delay + switch_latency;
        }
    };
    let mut finish = vec![Time::ZERO; links.len()];
    send(&mut finish, train.first);
    if train.middle_count > 0 {
        let m = train.middle_count;
        let c: Vec<Time> = links
            .iter()
            .map(|l| l.rate.serialization(train.middle))
            .collect();
        let first = finish.clone();
        for i in 0..links.len() {
            finish[i] = (0..=i)
                .map(|k| {
                    let slowest = c[k..=i].iter().max().expect("k <= i");
                    let descent: Time = (k..i)
                        .map(|l| links[l].delay + switch_latency + c[l + 1])
                        .fold(Time::ZERO, |a, b| a + b);
                    first[k] + c[k] + Time(slowest.ps() * (m - 1)) + descent
                })
                .max()
                .expect("at least one link");
        }
    }
    if let Some(last) = train.last {
        send(&mut finish, last);
    }
    let end = links.last().expect("a path has a link");
    finish[links.len() - 1] + end.delay
}
