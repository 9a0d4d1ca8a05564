//! Units: time in integer picoseconds, bit rates, sizes, ids, and the parser for
//! quantity strings such as `"400Gbps"`, `"4KiB"` and `"1.5us"`.

use serde::Serialize;
use std::fmt;
use std::ops::{Add, AddAssign, Mul, Sub};

/// A point in simulated time or a span of it, in integer picoseconds.
///
/// 4096 B at 400 Gb/s serialise in 81.92 ns, so nanoseconds are too coarse; a `u64` of
/// picoseconds still spans 213 days.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize)]
pub struct Time(pub u64);

impl Time {
    pub const ZERO: Time = Time(0);
    pub const MAX: Time = Time(u64::MAX);

    pub const fn from_ns(ns: u64) -> Time {
        Time(ns * 1_000)
    }
    pub const fn from_us(us: u64) -> Time {
        Time(us * 1_000_000)
    }
    pub const fn ps(self) -> u64 {
        self.0
    }
    /// Whole nanoseconds, rounded down.
    pub const fn ns(self) -> u64 {
        self.0 / 1_000
    }
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 * 1e-12
    }
    pub fn saturating_sub(self, other: Time) -> Time {
        Time(self.0.saturating_sub(other.0))
    }
}

impl Add for Time {
    type Output = Time;
    fn add(self, rhs: Time) -> Time {
        Time(self.0 + rhs.0)
    }
}
impl AddAssign for Time {
    fn add_assign(&mut self, rhs: Time) {
        self.0 += rhs.0;
    }
}
impl Sub for Time {
    type Output = Time;
    fn sub(self, rhs: Time) -> Time {
        Time(self.0 - rhs.0)
    }
}
impl Mul<u64> for Time {
    type Output = Time;
    fn mul(self, rhs: u64) -> Time {
        Time(self.0 * rhs)
    }
}

impl fmt::Debug for Time {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for Time {
    /// Prints the largest unit that keeps the value exact, e.g. `150ns`, `1.5us`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_scaled(
            f,
            self.0 as u128,
            &[
                (1_000_000_000_000, "s"),
                (1_000_000_000, "ms"),
                (1_000_000, "us"),
                (1_000, "ns"),
                (1, "ps"),
            ],
        )
    }
}

/// A data rate in bits per second.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize)]
pub struct BitRate(pub u64);

impl BitRate {
    pub const fn gbps(g: u64) -> BitRate {
        BitRate(g * 1_000_000_000)
    }
    pub const fn bps(self) -> u64 {
        self.0
    }
    /// Picoseconds per byte when that is a whole number (every standard Ethernet and
    /// InfiniBand rate: 400 Gb/s is 20 ps), so that callers on a hot path can multiply
    /// instead of dividing; `serialization` gives the same times.
    pub fn whole_ps_per_byte(self) -> Option<u32> {
        const PS_PER_BYTE_AT_1BPS: u64 = 8_000_000_000_000;
        (self.0 != 0 && PS_PER_BYTE_AT_1BPS.is_multiple_of(self.0))
            .then(|| u32::try_from(PS_PER_BYTE_AT_1BPS / self.0).ok())
            .flatten()
    }

    /// Time to serialise `bytes` given this rate's [`BitRate::whole_ps_per_byte`] (0 where it
    /// has none): a multiplication at the standard rates, the exact division otherwise;
    /// the same time as `serialization` either way.
    pub fn serialization_by(self, ps_per_byte: u32, bytes: u64) -> Time {
        match ps_per_byte {
            0 => self.serialization(bytes),
            ps => Time(bytes * ps as u64),
        }
    }

    /// Time to serialise `bytes` at this rate, rounded up to the next picosecond.
    ///
    /// Panics if the rate is zero; scenario validation rejects zero rates.
    pub fn serialization(self, bytes: u64) -> Time {
        // Packets (under 2 MB) stay in u64 arithmetic: a u128 division is a library call.
        const PS_PER_BIT: u64 = 1_000_000_000_000;
        if bytes < 1 << 21 {
            return Time((bytes * 8 * PS_PER_BIT).div_ceil(self.0));
        }
        let num = bytes as u128 * 8 * PS_PER_BIT as u128;
        let den = self.0 as u128;
        Time(num.div_ceil(den) as u64)
    }
}

impl fmt::Debug for BitRate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}
impl fmt::Display for BitRate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_scaled(
            f,
            self.0 as u128,
            &[
                (1_000_000_000_000, "Tbps"),
                (1_000_000_000, "Gbps"),
                (1_000_000, "Mbps"),
                (1_000, "Kbps"),
                (1, "bps"),
            ],
        )
    }
}

/// A size in bytes, printed with binary units where exact.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize)]
pub struct ByteSize(pub u64);

impl fmt::Debug for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}
impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = self.0 as u128;
        for (scale, unit) in [
            (1u128 << 40, "TiB"),
            (1 << 30, "GiB"),
            (1 << 20, "MiB"),
            (1 << 10, "KiB"),
        ] {
            if v >= scale && v.is_multiple_of(scale) {
                return write!(f, "{}{}", v / scale, unit);
            }
        }
        write!(f, "{}B", v)
    }
}

/// Writes `value` in the largest unit of `scales` (largest first) that is at most
/// `value`, with as many decimals as needed to be exact.
fn write_scaled(f: &mut fmt::Formatter<'_>, value: u128, scales: &[(u128, &str)]) -> fmt::Result {
    let (scale, unit) = scales
        .iter()
        .copied()
        .find(|(s, _)| value >= *s)
        .unwrap_or(scales[scales.len() - 1]);
    let whole = value / scale;
    let mut frac = value % scale;
    if frac == 0 {
        return write!(f, "{whole}{unit}");
    }
    let mut digits = String::new();
    let mut s = scale;
    while frac > 0 && s > 1 {
        s /= 10;
        digits.push(char::from(b'0' + (frac / s) as u8));
        frac %= s;
    }
    write!(f, "{whole}.{digits}{unit}")
}

/// Which physical dimension a quantity string must carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dimension {
    Time,
    Size,
    Rate,
    Length,
}

impl Dimension {
    fn units(self) -> &'static [(&'static str, u128)] {
        match self {
            // Base unit: picosecond.
            Dimension::Time => &[
                ("ps", 1),
                ("ns", 1_000),
                ("us", 1_000_000),
                ("µs", 1_000_000),
                ("ms", 1_000_000_000),
                ("s", 1_000_000_000_000),
                ("min", 60_000_000_000_000),
                ("h", 3_600_000_000_000_000),
            ],
            // Base unit: byte.
            Dimension::Size => &[
                ("B", 1),
                ("KB", 1_000),
                ("MB", 1_000_000),
                ("GB", 1_000_000_000),
                ("TB", 1_000_000_000_000),
                ("KiB", 1 << 10),
                ("MiB", 1 << 20),
                ("GiB", 1 << 30),
                ("TiB", 1 << 40),
            ],
            // Base unit: bit per second.
            Dimension::Rate => &[
                ("bps", 1),
                ("Kbps", 1_000),
                ("Mbps", 1_000_000),
                ("Gbps", 1_000_000_000),
                ("Tbps", 1_000_000_000_000),
                ("Gb/s", 1_000_000_000),
                ("Mb/s", 1_000_000),
                // Bytes per second, as GPU interconnects are quoted.
                ("MB/s", 8_000_000),
                ("GB/s", 8_000_000_000),
                ("TB/s", 8_000_000_000_000),
            ],
            // Base unit: millimetre.
            Dimension::Length => &[("mm", 1), ("cm", 10), ("m", 1_000), ("km", 1_000_000)],
        }
    }

    /// The accepted unit spellings, for error messages.
    pub fn unit_list(self) -> String {
        self.units()
            .iter()
            .map(|(u, _)| *u)
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// A well-formed quantity of this dimension, for error messages.
    pub fn example(self) -> &'static str {
        match self {
            Dimension::Time => "1.5us",
            Dimension::Size => "4KiB",
            Dimension::Rate => "400Gbps",
            Dimension::Length => "5m",
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Dimension::Time => "time",
            Dimension::Size => "size",
            Dimension::Rate => "rate",
            Dimension::Length => "length",
        }
    }
}

/// Why a quantity did not parse: a sentence about the text as given, without the key,
/// which the caller adds.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    #[error("\"{text}\" is negative; a {dimension} must be positive")]
    Negative {
        text: String,
        dimension: &'static str,
    },
    #[error("\"{text}\" has no number; expected e.g. \"{example}\"")]
    NoNumber { text: String, example: &'static str },
    #[error("\"{text}\" has no unit; expected one of {units}")]
    NoUnit { text: String, units: String },
    #[error(
        "\"{text}\" has unit \"{unit}\", which is not a {dimension} unit; expected one of {units}"
    )]
    WrongUnit {
        text: String,
        unit: String,
        dimension: &'static str,
        units: String,
    },
    #[error("\"{text}\" is not a number")]
    NotANumber { text: String },
    #[error("\"{text}\" has too many digits")]
    TooManyDigits { text: String },
    #[error("\"{text}\" is too large")]
    TooLarge { text: String },
    #[error("\"{text}\" is not a whole number of {base}")]
    NotWhole { text: String, base: &'static str },
}

/// Parses a quantity such as `"1.5us"` into its base unit (picoseconds, bytes, bit/s or
/// millimetres). The number is decimal, parsed exactly; the result must be a whole
/// number of base units. Errors are human sentences without the key, which the caller adds.
pub fn parse_quantity(text: &str, dim: Dimension) -> Result<u64, QuantityError> {
    let s = text.trim();
    let split = s
        .char_indices()
        .find(|(_, c)| !(c.is_ascii_digit() || *c == '.' || *c == '_'))
        .map(|(i, _)| i)
        .unwrap_or(s.len());
    let (num, unit) = (s[..split].replace('_', ""), s[split..].trim());
    if s.starts_with('-') {
        return Err(QuantityError::Negative {
            text: text.into(),
            dimension: dim.name(),
        });
    }
    if num.is_empty() {
        return Err(QuantityError::NoNumber {
            text: text.into(),
            example: dim.example(),
        });
    }
    if unit.is_empty() {
        return Err(QuantityError::NoUnit {
            text: text.into(),
            units: dim.unit_list(),
        });
    }
    let factor = dim
        .units()
        .iter()
        .find(|(u, _)| *u == unit)
        .map(|(_, f)| *f)
        .ok_or_else(|| QuantityError::WrongUnit {
            text: text.into(),
            unit: unit.into(),
            dimension: dim.name(),
            units: dim.unit_list(),
        })?;
    let (int_part, frac_part) = match num.split_once('.') {
        Some((i, f)) => (i, f),
        None => (num.as_str(), ""),
    };
    if frac_part.contains('.') || (int_part.is_empty() && frac_part.is_empty()) {
        return Err(QuantityError::NotANumber { text: text.into() });
    }
    if int_part.len() + frac_part.len() > 30 {
        return Err(QuantityError::TooManyDigits { text: text.into() });
    }
    let digits: u128 = format!("{int_part}{frac_part}")
        .parse()
        .map_err(|_| QuantityError::NotANumber { text: text.into() })?;
    let denom = 10u128.pow(frac_part.len() as u32);
    let scaled = digits
        .checked_mul(factor)
        .ok_or_else(|| QuantityError::TooLarge { text: text.into() })?;
    if scaled % denom != 0 {
        return Err(QuantityError::NotWhole {
            text: text.into(),
            base: dim.units()[0].0,
        });
    }
    let value = scaled / denom;
    u64::try_from(value).map_err(|_| QuantityError::TooLarge { text: text.into() })
}

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Default, Serialize)]
        pub struct $name(pub u32);
        impl $name {
            pub const fn index(self) -> usize {
                self.0 as usize
            }
        }
        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}", self.0)
            }
        }
    };
}

id_type!(
    /// A node (host or switch) of a topology; an index into its node arena.
    NodeId
);
id_type!(
    /// A directed port: one end of a link, owning that end's transmitter.
    PortId
);
id_type!(
    /// A host, numbered 0.. in the order the topology builder lays hosts out.
    HostId
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_exact_decimals() {
        assert_eq!(parse_quantity("1.5us", Dimension::Time), Ok(1_500_000));
        assert_eq!(parse_quantity("150ns", Dimension::Time), Ok(150_000));
        assert_eq!(parse_quantity("4KiB", Dimension::Size), Ok(4096));
        assert_eq!(parse_quantity("2MB", Dimension::Size), Ok(2_000_000));
        assert_eq!(
            parse_quantity("400Gbps", Dimension::Rate),
            Ok(400_000_000_000)
        );
        assert_eq!(parse_quantity("5m", Dimension::Length), Ok(5_000));
    }

    #[test]
    fn rejects_bad_quantities() {
        let err = |text: &str, dim| parse_quantity(text, dim).unwrap_err();
        assert!(matches!(
            err("400", Dimension::Rate),
            QuantityError::NoUnit { .. }
        ));
        let wrong = err("4KiB", Dimension::Rate);
        assert!(matches!(
            wrong,
            QuantityError::WrongUnit {
                dimension: "rate",
                ..
            }
        ));
        assert!(wrong.to_string().contains("not a rate unit"), "{wrong}");
        assert!(matches!(
            err("-3us", Dimension::Time),
            QuantityError::Negative { .. }
        ));
        assert!(matches!(
            err("0.5B", Dimension::Size),
            QuantityError::NotWhole { base: "B", .. }
        ));
        assert!(matches!(
            err("1.2.3us", Dimension::Time),
            QuantityError::NotANumber { .. }
        ));
        let huge = err("99999999999999999999TiB", Dimension::Size);
        assert!(matches!(huge, QuantityError::TooLarge { .. }), "{huge}");
    }

    #[test]
    fn serialization_time_is_exact_for_round_rates() {
        // 4122 B at 400 Gb/s = 4122 * 8 / 400e9 s = 82.44 ns.
        assert_eq!(BitRate::gbps(400).serialization(4122), Time(82_440));
        // Rounded up, never down.
        assert_eq!(BitRate(3).serialization(1), Time(2_666_666_666_667));
    }

    #[test]
    fn whole_ps_per_byte_agrees_with_serialization() {
        assert_eq!(BitRate::gbps(400).whole_ps_per_byte(), Some(20));
        assert_eq!(BitRate::gbps(56).whole_ps_per_byte(), None);
        assert_eq!(
            BitRate(1).whole_ps_per_byte(),
            None,
            "too many ps for a u32"
        );
        for gbps in [1, 10, 25, 40, 50, 100, 200, 400, 800, 1600] {
            let rate = BitRate::gbps(gbps);
            let ps = rate.whole_ps_per_byte().expect("a standard rate") as u64;
            for bytes in [1, 6, 64, 84, 1500, 4122, 9000, (1 << 21) - 1] {
                assert_eq!(rate.serialization(bytes), Time(bytes * ps), "{gbps} Gb/s");
            }
        }
    }

    #[test]
    fn display_is_exact() {
        assert_eq!(Time(1_500_000).to_string(), "1.5us");
        assert_eq!(Time(150_000).to_string(), "150ns");
        assert_eq!(BitRate::gbps(400).to_string(), "400Gbps");
        assert_eq!(ByteSize(4096).to_string(), "4KiB");
    }
}
