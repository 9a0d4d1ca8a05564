//! Sans-IO protocol state machines. Each takes `now` (where time matters) and its inputs,
//! and returns decisions; none schedules events or touches I/O.

pub mod credit;
pub mod ibcc;
pub mod rc;
pub mod vlarb;
