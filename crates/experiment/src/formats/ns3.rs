//! The ns-3 RDMA model's input formats (the HPCC and SimAI lineage), so existing
//! experiments run unchanged.
//!
//! Topology file: line 1 `nodes switches links`; line 2 the switch node ids; then one
//! link a line, `a b rate delay error_rate` (e.g. `0 4 100Gbps 0.001ms 0`).
//! Flow file: line 1 the flow count; then `src dst priority dport size start_seconds`
//! a line (e.g. `0 1 3 100 1000000 2.0`), node ids as in the topology file.

use fabricsim_core::topology::GraphLink;
use fabricsim_core::units::{parse_quantity, BitRate, Dimension, Time};

/// A topology file's contents.
#[derive(Clone, Debug, PartialEq)]
pub struct Ns3Topology {
    pub nodes: u32,
    pub switches: Vec<u32>,
    pub links: Vec<GraphLink>,
}

impl Ns3Topology {
    /// The host index of ns-3 node `node` (hosts are the non-switch nodes in id order),
    /// or None if it is a switch or out of range.
    pub fn host_index(&self, node: u32) -> Option<u32> {
        if node >= self.nodes || self.switches.contains(&node) {
            return None;
        }
        Some(node - self.switches.iter().filter(|&&s| s < node).count() as u32)
    }

    /// The rate of the hosts' links (their NICs), if every host's is the same.
    pub fn host_rate(&self) -> Option<BitRate> {
        let mut rates = self
            .links
            .iter()
            .filter(|l| !self.switches.contains(&l.a) || !self.switches.contains(&l.b))
            .map(|l| l.rate);
        let first = rates.next()?;
        rates.all(|r| r == first).then_some(first)
    }

    pub fn host_count(&self) -> u32 {
        self.nodes - self.switches.len() as u32
    }
}

/// One line of a flow file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ns3Flow {
    pub src: u32,
    pub dst: u32,
    /// ns-3's priority group; taken as the service level.
    pub priority: u8,
    /// ns-3's destination port; it names the flow there and is not modelled here.
    pub dport: u16,
    pub size: u64,
    pub start: Time,
}

/// Non-empty lines as (line number, whitespace-separated fields).
fn lines(text: &str) -> impl Iterator<Item = (usize, Vec<&str>)> {
    text.lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.split_whitespace().collect::<Vec<_>>()))
        .filter(|(_, f)| !f.is_empty())
}

fn int<T: std::str::FromStr>(line: usize, what: &str, tok: &str) -> Result<T, String> {
    tok.parse()
        .map_err(|_| format!("line {line}: {what} = \"{tok}\": expected a non-negative integer"))
}

fn expect_fields(line: usize, fields: &[&str], n: usize, layout: &str) -> Result<(), String> {
    if fields.len() < n {
        return Err(format!(
            "line {line}: \"{}\": expected {n} fields ({layout})",
            fields.join(" ")
        ));
    }
    Ok(())
}

/// The largest topology file: 2^20 nodes and 2^24 links (a million-host cluster).
const MAX_NODES: u32 = 1 << 20;
const MAX_LINKS: usize = 1 << 24;

/// Parses a topology file. Random link loss (`error_rate` above 0) is not modelled and
/// is refused rather than ignored.
pub fn parse_topology(text: &str) -> Result<Ns3Topology, String> {
    let mut it = lines(text);
    let (l1, head) = it
        .next()
        .ok_or("the file is empty; line 1 must be \"nodes switches links\"")?;
    expect_fields(l1, &head, 3, "nodes switches links")?;
    let nodes: u32 = int(l1, "nodes", head[0])?;
    let switch_count: usize = int(l1, "switches", head[1])?;
    let link_count: usize = int(l1, "links", head[2])?;
    if nodes > MAX_NODES || switch_count > nodes as usize || link_count > MAX_LINKS {
        return Err(format!(
            "line {l1}: {nodes} nodes, {switch_count} switches, {link_count} links: at most {MAX_NODES} nodes, no more switches than nodes, at most {MAX_LINKS} links"
        ));
    }
    // Room for what the file can hold, not for what its header claims.
    let mut switches = Vec::with_capacity(switch_count.min(text.len() / 2));
    let mut links = Vec::with_capacity(link_count.min(text.len() / 8));
    let mut next_line = l1;
    // The switch ids may wrap over several lines.
    while switches.len() < switch_count {
        let (l, ids) = it.next().ok_or(format!(
            "line {}: expected {switch_count} switch ids, found {}",
            next_line + 1,
            switches.len()
        ))?;
        next_line = l;
        for tok in ids {
            switches.push(int(l, "switch id", tok)?);
        }
    }
    if switches.len() != switch_count {
        return Err(format!(
            "line {next_line}: {} switch ids given, line 1 says {switch_count}",
            switches.len()
        ));
    }
    for (l, f) in it {
        expect_fields(l, &f, 5, "a b rate delay error_rate")?;
        let rate = parse_quantity(f[2], Dimension::Rate)
            .map_err(|m| format!("line {l}: link rate: {m}"))?;
        if rate == 0 {
            return Err(format!(
                "line {l}: link rate \"{}\" must be above zero",
                f[2]
            ));
        }
        let delay = parse_quantity(f[3], Dimension::Time)
            .map_err(|m| format!("line {l}: link delay: {m}"))?;
        let error: f64 = f[4]
            .parse()
            .map_err(|_| format!("line {l}: error_rate = \"{}\": expected a number", f[4]))?;
        if error != 0.0 {
            return Err(format!(
                "line {l}: error_rate = {}: random link loss is not modelled; set it to 0",
                f[4]
            ));
        }
        links.push(GraphLink {
            a: int(l, "node", f[0])?,
            b: int(l, "node", f[1])?,
            rate: BitRate(rate),
            delay: Time(delay),
        });
    }
    if links.len() != link_count {
        return Err(format!(
            "{} links given, line 1 says {link_count}",
            links.len()
        ));
    }
    Ok(Ns3Topology {
        nodes,
        switches,
        links,
    })
}

/// Parses a flow file.
pub fn parse_flows(text: &str) -> Result<Vec<Ns3Flow>, String> {
    let mut it = lines(text);
    let (l1, head) = it
        .next()
        .ok_or("the file is empty; line 1 must be the flow count")?;
    let count: usize = int(l1, "flow count", head[0])?;
    // Room for what the file can hold (a flow line has at least 12 bytes), not for what
    // its first line claims.
    let mut flows = Vec::with_capacity(count.min(text.len() / 12));
    for (l, f) in it {
        expect_fields(l, &f, 6, "src dst priority dport size start_seconds")?;
        let priority: u8 = int(l, "priority", f[2])?;
        if priority > 15 {
            return Err(format!("line {l}: priority = {priority}: must be 0 to 15"));
        }
        let size: u64 = int(l, "size", f[4])?;
        if size == 0 {
            return Err(format!(
                "line {l}: size = 0: a flow needs at least one byte"
            ));
        }
        let start = parse_quantity(&format!("{}s", f[5]), Dimension::Time)
            .map_err(|m| format!("line {l}: start_seconds = \"{}\": {m}", f[5]))?;
        flows.push(Ns3Flow {
            src: int(l, "src", f[0])?,
            dst: int(l, "dst", f[1])?,
            priority,
            dport: int(l, "dport", f[3])?,
            size,
            start: Time(start),
        });
    }
    if flows.len() != count {
        return Err(format!("{} flows given, line 1 says {count}", flows.len()));
    }
    Ok(flows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_an_hpcc_style_topology() {
        let text =
            "4 2 3\n2 3\n0 2 100Gbps 0.001ms 0\n2 3 400Gbps 1us 0.000000\n1 3 100Gbps 0.001ms 0\n";
        let t = parse_topology(text).unwrap();
        assert_eq!(t.nodes, 4);
        assert_eq!(t.switches, vec![2, 3]);
        assert_eq!(t.links[1].rate, BitRate::gbps(400));
        assert_eq!(t.links[0].delay, Time::from_ns(1000));
        assert_eq!(t.host_index(1), Some(1));
        assert_eq!(t.host_index(2), None);
    }

    #[test]
    fn topology_errors_name_the_line_and_value() {
        let e = parse_topology("3 1 2\n2\n0 2 100Gbps 1us 0\n1 2 100 1us 0\n").unwrap_err();
        assert!(e.contains("line 4") && e.contains("\"100\""), "{e}");
        let e = parse_topology("3 1 2\n2\n0 2 100Gbps 1us 0.01\n1 2 100Gbps 1us 0\n").unwrap_err();
        assert!(e.contains("error_rate = 0.01"), "{e}");
        let e = parse_topology("3 1 3\n2\n0 2 100Gbps 1us 0\n1 2 100Gbps 1us 0\n").unwrap_err();
        assert!(e.contains("2 links given, line 1 says 3"), "{e}");
    }

    #[test]
    fn reads_a_flow_file() {
        let f = parse_flows("2\n0 1 3 100 1000000 2.0\n1 0 3 101 4096 2.000000001\n").unwrap();
        assert_eq!(f.len(), 2);
        assert_eq!(f[0].start, Time::from_ns(2_000_000_000));
        assert_eq!(f[1].start, Time::from_ns(2_000_000_001));
        assert_eq!(
            (f[1].src, f[1].dst, f[1].priority, f[1].size),
            (1, 0, 3, 4096)
        );
        let e = parse_flows("1\n0 1 3 100 -5 2.0\n").unwrap_err();
        assert!(e.contains("line 2: size = \"-5\""), "{e}");
    }
}
