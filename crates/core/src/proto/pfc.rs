//! IEEE 802.1Qbb priority flow control: pause quanta and the headroom rule.

use crate::units::{BitRate, Time};

/// One pause quantum is 512 bit times.
pub const QUANTUM_BITS: u64 = 512;
/// The longest pause a PAUSE frame can ask for; 0 means resume.
pub const MAX_QUANTA: u16 = 0xFFFF;
/// Bytes the dynamic threshold must clear before a paused ingress resumes (the HPCC ns-3
/// model's resume offset, docs/REFERENCE.md section 4).
pub const RESUME_OFFSET: u64 = 3 * 1024;

/// How long `quanta` pause quanta last on a link of `rate`.
pub fn pause_duration(quanta: u16, rate: BitRate) -> Time {
    rate.serialization(quanta as u64 * QUANTUM_BITS / 8)
}

/// PFC headroom per port and priority by the mlx5 rule (Linux mlx5 port_buffer.c, as in
/// docs/REFERENCE.md section 4): (301 + 2.16 x cable_m) x speed_Gbps + 2.72 x MTU bytes.
/// `cable_mm` is the cable length in millimetres; the result is in bytes, rounded up.
pub fn headroom_rule(rate: BitRate, cable_mm: u64, mtu: u32) -> u64 {
    // Work in hundredths of a byte so the decimal constants stay exact.
    let speed_mbps = rate.bps() / 1_000_000;
    let per_gbps = 30_100 + 216 * cable_mm / 1000; // (301 + 2.16 m) x 100
    let centibytes = per_gbps * speed_mbps / 1000 + 272 * mtu as u64;
    centibytes.div_ceil(100)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headroom_at_400g_5m_4096_is_about_136_kb() {
        // (301 + 10.8) x 400 + 2.72 x 4096 = 124,720 + 11,141.12 = 135,861.12 B.
        assert_eq!(headroom_rule(BitRate::gbps(400), 5000, 4096), 135_862);
    }

    #[test]
    fn a_quantum_is_512_bit_times() {
        // At 400 Gb/s one quantum is 1.28 ns (docs/REFERENCE.md section 4).
        assert_eq!(pause_duration(1, BitRate::gbps(400)), Time(1_280));
        assert_eq!(pause_duration(0, BitRate::gbps(400)), Time::ZERO);
    }
}
