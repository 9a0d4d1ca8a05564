//! Sans-IO protocol state machines. Each takes `now` (where time matters) and its inputs,
//! and returns decisions; none schedules events or touches I/O.

pub mod credit;
pub mod dcqcn;
pub mod ecn;
pub mod hpcc;
pub mod ibcc;
pub mod pfc;
pub mod rc;
pub mod swift;
pub mod timely;
pub mod vlarb;
