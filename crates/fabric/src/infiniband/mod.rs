//! The InfiniBand fabric at packet level.
//!
//! Architecture invariants:
//! - Every directed port owns its transmitter and the link it drives: frames in flight sit
//!   in the port's own FIFO (`wire`), each with its own arrival event, created by its
//!   sender, so that same-time events keep one order however a run is split over
//!   threads (`parallel`). Each port has at most one pending transmitter event; stale
//!   ones are recognised by a per-port generation number.
//! - Switches are input-buffered per VL for credit accounting (credits return when a packet
//!   has left the switch) and output-scheduled: each egress VL keeps one FIFO per input
//!   port and serves the inputs round-robin, so there is no head-of-line blocking across
//!   outputs. A packet is forwarded only when the downstream input buffer has credits for
//!   it, so the fabric never drops.
//! - HCAs consume arriving packets at once and return credits immediately.

mod config;
pub mod parallel;
mod sharp;
mod sim;

pub use crate::driver::CaptureFilter;
pub use config::{default_sl_to_vl, IbCc, IbConfig};
pub use sim::{Audit, Captured, Simulation};
