//! MLCommons Chakra execution traces: one protobuf file per rank (`<name>.<rank>.et`), a
//! length-delimited `GlobalMetadata` then length-delimited `Node`s. The messages below are
//! written from the public schema's field numbers (chakra schema/protobuf/et_def.proto);
//! fields this simulator does not use are skipped on reading.

use fabricsim_core::units::Time;
use fabricsim_fabric::workload::chakra::{EtKind, EtNode};
use fabricsim_fabric::workload::CollectiveOp;
use prost::Message;
use std::path::Path;

#[derive(Clone, PartialEq, prost::Message)]
pub struct GlobalMetadata {
    #[prost(string, tag = "1")]
    pub version: String,
    #[prost(message, repeated, tag = "2")]
    pub attr: Vec<AttributeProto>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct AttributeProto {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub doc_string: String,
    #[prost(oneof = "Value", tags = "3, 7, 9, 11, 13, 15, 17, 27, 29")]
    pub value: Option<Value>,
}

/// The scalar members of `AttributeProto.value` (the list members are skipped).
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum Value {
    #[prost(double, tag = "3")]
    DoubleVal(f64),
    #[prost(int32, tag = "7")]
    Int32Val(i32),
    #[prost(int64, tag = "9")]
    Int64Val(i64),
    #[prost(uint32, tag = "11")]
    Uint32Val(u32),
    #[prost(uint64, tag = "13")]
    Uint64Val(u64),
    #[prost(sint32, tag = "15")]
    Sint32Val(i32),
    #[prost(sint64, tag = "17")]
    Sint64Val(i64),
    #[prost(bool, tag = "27")]
    BoolVal(bool),
    #[prost(string, tag = "29")]
    StringVal(String),
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Node {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(string, tag = "2")]
    pub name: String,
    #[prost(int32, tag = "3")]
    pub r#type: i32,
    #[prost(uint64, repeated, tag = "4")]
    pub ctrl_deps: Vec<u64>,
    #[prost(uint64, repeated, tag = "5")]
    pub data_deps: Vec<u64>,
    #[prost(uint64, tag = "6")]
    pub start_time_micros: u64,
    #[prost(uint64, tag = "7")]
    pub duration_micros: u64,
    #[prost(message, repeated, tag = "10")]
    pub attr: Vec<AttributeProto>,
}

/// NodeType values of the schema.
pub const COMP_NODE: i32 = 4;
pub const COMM_SEND_NODE: i32 = 5;
pub const COMM_RECV_NODE: i32 = 6;
pub const COMM_COLL_NODE: i32 = 7;

/// CollectiveCommType values of the schema that map to our ops.
fn collective_op(comm_type: i64) -> Option<CollectiveOp> {
    Some(match comm_type {
        0 => CollectiveOp::AllReduce,
        2 => CollectiveOp::AllGather,
        5 => CollectiveOp::Broadcast,
        6 => CollectiveOp::AllToAll,
        7 => CollectiveOp::ReduceScatter,
        _ => return None,
    })
}

/// The CollectiveCommType of an op.
pub fn comm_type(op: CollectiveOp) -> i64 {
    match op {
        CollectiveOp::AllReduce => 0,
        CollectiveOp::AllGather => 2,
        CollectiveOp::Broadcast => 5,
        CollectiveOp::AllToAll => 6,
        CollectiveOp::ReduceScatter => 7,
    }
}

fn int_attr(node: &Node, name: &str) -> Option<i64> {
    node.attr
        .iter()
        .find(|a| a.name == name)
        .and_then(|a| match a.value {
            Some(Value::Int32Val(v) | Value::Sint32Val(v)) => Some(v as i64),
            Some(Value::Int64Val(v) | Value::Sint64Val(v)) => Some(v),
            Some(Value::Uint32Val(v)) => Some(v as i64),
            Some(Value::Uint64Val(v)) => i64::try_from(v).ok(),
            _ => None,
        })
}

/// An integer attribute, required.
fn need(node: &Node, name: &str) -> Result<i64, String> {
    int_attr(node, name).ok_or_else(|| {
        format!(
            "node {} ({}) has no integer attribute {name}",
            node.id, node.name
        )
    })
}

/// The largest message a trace may ask for, as in scenario files (512 GiB).
const MAX_COMM_SIZE: u64 = 512 << 30;
/// The longest compute node: one hour.
const MAX_DURATION_US: u64 = 3_600_000_000;

/// The simulator's view of one node.
pub fn to_et_node(node: &Node) -> Result<EtNode, String> {
    let size = |n: &Node| -> Result<u64, String> {
        let size = u64::try_from(need(n, "comm_size")?)
            .map_err(|_| format!("node {}: negative comm_size", n.id))?;
        if size > MAX_COMM_SIZE {
            return Err(format!(
                "node {}: comm_size {size} B: at most 512 GiB",
                n.id
            ));
        }
        Ok(size)
    };
    if node.duration_micros > MAX_DURATION_US {
        return Err(format!(
            "node {}: duration_micros {}: at most one hour",
            node.id, node.duration_micros
        ));
    }
    let peer = |n: &Node, key: &str| -> Result<u32, String> {
        u32::try_from(need(n, key)?).map_err(|_| format!("node {}: bad {key}", n.id))
    };
    let kind = match node.r#type {
        COMP_NODE => EtKind::Compute {
            duration: Time::from_us(node.duration_micros),
        },
        COMM_COLL_NODE => {
            let t = need(node, "comm_type")?;
            EtKind::Collective {
                op: collective_op(t).ok_or_else(|| {
                    format!("node {}: collective type {t} is not simulated", node.id)
                })?,
                size: size(node)?,
            }
        }
        COMM_SEND_NODE => EtKind::Send {
            peer: peer(node, "comm_dst")?,
            size: size(node)?,
            tag: int_attr(node, "comm_tag").unwrap_or(0),
        },
        COMM_RECV_NODE => EtKind::Recv {
            peer: peer(node, "comm_src")?,
            size: size(node)?,
            tag: int_attr(node, "comm_tag").unwrap_or(0),
        },
        _ => EtKind::Other,
    };
    let mut deps = node.ctrl_deps.clone();
    deps.extend(&node.data_deps);
    deps.sort_unstable();
    deps.dedup();
    Ok(EtNode {
        id: node.id,
        kind,
        deps,
    })
}

/// Decodes one rank's trace file.
pub fn decode(bytes: &[u8]) -> Result<Vec<Node>, String> {
    let mut buf = bytes;
    GlobalMetadata::decode_length_delimited(&mut buf)
        .map_err(|e| format!("the global metadata does not decode: {e}"))?;
    let mut nodes = Vec::new();
    while !buf.is_empty() {
        let n = Node::decode_length_delimited(&mut buf)
            .map_err(|e| format!("node {} does not decode: {e}", nodes.len()))?;
        nodes.push(n);
    }
    Ok(nodes)
}

/// Encodes one rank's trace: the metadata, then the nodes, each length-delimited.
pub fn encode(nodes: &[Node]) -> Vec<u8> {
    let mut out = Vec::new();
    let meta = GlobalMetadata {
        version: "0.0.4".into(),
        attr: Vec::new(),
    };
    meta.encode_length_delimited(&mut out).expect("a Vec grows");
    for n in nodes {
        n.encode_length_delimited(&mut out).expect("a Vec grows");
    }
    out
}

/// An integer attribute.
pub fn attr(name: &str, v: i64) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        doc_string: String::new(),
        value: Some(Value::Int64Val(v)),
    }
}

/// Reads every `<name>.<rank>.et` file in `dir`; ranks must run 0..n without gaps.
pub fn read_folder(dir: &Path) -> Result<Vec<Vec<EtNode>>, String> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| format!("cannot read folder {}: {e}", dir.display()))?;
    let mut by_rank: Vec<(u32, std::path::PathBuf)> = Vec::new();
    for e in entries {
        let path = e.map_err(|e| e.to_string())?.path();
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let Some(stem) = name.strip_suffix(".et") else {
            continue;
        };
        let rank = stem
            .rsplit('.')
            .next()
            .and_then(|r| r.parse::<u32>().ok())
            .ok_or_else(|| format!("{name}: expected <name>.<rank>.et"))?;
        by_rank.push((rank, path));
    }
    by_rank.sort();
    if by_rank.is_empty() {
        return Err(format!("no <name>.<rank>.et files in {}", dir.display()));
    }
    let mut traces = Vec::with_capacity(by_rank.len());
    for (i, (rank, path)) in by_rank.iter().enumerate() {
        if *rank as usize != i {
            return Err(format!(
                "ranks must run 0 to {} without gaps or repeats; found rank {rank} at position {i}",
                by_rank.len() - 1
            ));
        }
        let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let nodes = decode(&bytes).map_err(|m| format!("{}: {m}", path.display()))?;
        traces.push(
            nodes
                .iter()
                .map(to_et_node)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|m| format!("{}: {m}", path.display()))?,
        );
    }
    Ok(traces)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_durations_beyond_the_scenario_bounds_are_refused() {
        let big = Node {
            id: 7,
            r#type: COMM_COLL_NODE,
            attr: vec![attr("comm_type", 0), attr("comm_size", i64::MAX)],
            ..Default::default()
        };
        assert!(to_et_node(&big).unwrap_err().contains("at most 512 GiB"));
        let long = Node {
            id: 8,
            r#type: COMP_NODE,
            duration_micros: u64::MAX,
            ..Default::default()
        };
        assert!(to_et_node(&long).unwrap_err().contains("at most one hour"));
    }

    #[test]
    fn nodes_round_trip_through_the_wire_format() {
        let nodes = vec![
            Node {
                id: 1,
                name: "fwd".into(),
                r#type: COMP_NODE,
                duration_micros: 25,
                ..Default::default()
            },
            Node {
                id: 2,
                name: "allreduce".into(),
                r#type: COMM_COLL_NODE,
                data_deps: vec![1],
                attr: vec![attr("comm_type", 0), attr("comm_size", 1 << 20)],
                ..Default::default()
            },
        ];
        let back = decode(&encode(&nodes)).unwrap();
        assert_eq!(back, nodes);
        let et = to_et_node(&back[1]).unwrap();
        assert_eq!(
            et.kind,
            EtKind::Collective {
                op: CollectiveOp::AllReduce,
                size: 1 << 20
            }
        );
        assert_eq!(et.deps, vec![1]);
        // A node field number is what the schema says: id is field 1, a varint (tag 0x08).
        let mut one = Vec::new();
        Node {
            id: 7,
            ..Default::default()
        }
        .encode(&mut one)
        .unwrap();
        assert_eq!(one, vec![0x08, 7]);
    }
}
