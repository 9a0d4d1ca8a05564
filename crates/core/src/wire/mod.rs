//! Wire formats: header layouts, sizes and checksums, and capture framing.
//!
//! Every packet's size on the wire in the simulator comes from [`ib::PacketRepr::wire_len`],
//! so the headers that are drawn in a capture are the headers that took link time.

pub mod crc;
pub mod erf;
pub mod ib;
pub mod roce;
