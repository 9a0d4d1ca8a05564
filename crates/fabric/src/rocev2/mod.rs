//! The RoCEv2 fabric at packet level.
//!
//! Architecture invariants:
//! - As for InfiniBand, every directed port owns its transmitter and link FIFO, with at
//!   most one pending transmitter event; every frame on a link has its own arrival event,
//!   created by its sender, so that same-time events keep one order however a run is
//!   split over threads (`parallel`).
//! - Switches are output-queued over a shared buffer accounted per ingress port (reserve,
//!   shared pool under a dynamic threshold, PFC headroom). A data packet the ingress cannot
//!   admit is dropped and counted; control packets (ACK, NAK, CNP) travel in a strict
//!   high-priority class that is never paused and is not charged to the buffer (they are
//!   under 2 % of bytes).
//! - PFC frames are real 84-byte frames that take link time, sent ahead of queued packets
//!   (never pre-empting one on the wire).
//! - NICs run go-back-N RC (receivers accept only the expected packet and NAK a gap once;
//!   senders rewind on NAK or after a timeout without progress) or IRN's selective repeat.
//!   Congestion control is DCQCN (CNPs cut a paced rate), or HPCC, Swift or TIMELY, which
//!   react to what ACKs echo (INT stamped by switch egresses, NIC timestamps).
//! - Pathologies are modelled, not assumed away: a stalled NIC pauses its port without end
//!   (pause storm) and an optional watchdog breaks it; while anything is paused, the
//!   wait-for graph of paused queues is checked and a deadlock stops the run.

mod config;
pub mod parallel;
mod sim;

pub use config::{
    hpcc_ecn, AckCc, DcqcnConfig, EcnConfig, LoadBalancing, LossRecovery, PauseStorm, PfcWatchdog,
    RoceConfig, DEFAULT_FLOWLET_GAP, IRN_RTO_HIGH, IRN_RTO_LOW,
};
pub use sim::{Audit, CapturedFrame, RateSample, Simulation};
