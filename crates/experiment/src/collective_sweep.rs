//! `fabricsim collective`: a message-size sweep of one collective, printed the way
//! nccl-tests prints it.

use crate::results::{collective_results, CollectiveResult};
use crate::runner;
use crate::scenario::{Scenario, NO_NVLS};
use fabricsim_core::units::{HostId, Time};
use fabricsim_fabric::workload::collective::{NcclProtocol, DEFAULT_CHUNK};
use fabricsim_fabric::workload::{Collective, CollectiveAlgorithm, CollectiveOp, Traffic};

/// nccl-tests' size syntax: a number with an optional K, M or G suffix (powers of 1024).
pub fn parse_size(flag: &str, text: &str) -> Result<u64, String> {
    let t = text.trim();
    let (num, mult) = match t.chars().last() {
        Some('K' | 'k') => (&t[..t.len() - 1], 1u64 << 10),
        Some('M' | 'm') => (&t[..t.len() - 1], 1 << 20),
        Some('G' | 'g') => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    num.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .filter(|&n| n > 0)
        .ok_or_else(|| format!("{flag} {text}: expected a positive size like 8, 64K, 8M or 1G"))
        .and_then(|n| {
            if n > MAX_COLLECTIVE {
                Err(format!(
                    "{flag} {text}: at most 512G, the largest size a scenario accepts"
                ))
            } else {
                Ok(n)
            }
        })
}

/// The largest size `-b` and `-e` take: a scenario's bound on sizes (512 GiB).
const MAX_COLLECTIVE: u64 = 512 << 30;

/// The sizes from `begin` to `end`, multiplying by `factor`.
pub fn sizes(begin: u64, end: u64, factor: u64) -> Result<Vec<u64>, String> {
    if end < begin {
        return Err(format!("-e {end} is below -b {begin}"));
    }
    if factor < 2 {
        return Err(format!("-f {factor}: the factor must be at least 2"));
    }
    let mut out = vec![begin];
    while let Some(next) = out.last().and_then(|s| s.checked_mul(factor)) {
        if next > end {
            break;
        }
        out.push(next);
    }
    Ok(out)
}

/// The collective the sweep runs: the scenario's first collective entry (or an
/// all-reduce over every host), with `op` and `algorithm` overriding it.
pub fn template(
    scenario: &Scenario,
    op: Option<&str>,
    algorithm: Option<&str>,
) -> Result<Collective, String> {
    let mut c = scenario
        .traffic
        .iter()
        .find_map(|t| match t {
            Traffic::Collective(c) => Some(c.clone()),
            _ => None,
        })
        .unwrap_or_else(|| Collective {
            op: CollectiveOp::AllReduce,
            algorithm: CollectiveAlgorithm::Ring,
            ranks: (0..scenario.host_count()).map(HostId).collect(),
            size: 1,
            start: Time::ZERO,
            channels: 1,
            chunk: DEFAULT_CHUNK,
            protocol: NcclProtocol::Simple,
            sl: 0,
            root: 0,
            group: scenario.gpus_per_node,
        });
    if let Some(o) = op {
        c.op = CollectiveOp::parse(o)
            .ok_or_else(|| format!("--op {o}: expected one of {:?}", CollectiveOp::NAMES))?;
        if algorithm.is_none() {
            c.algorithm = c.op.default_algorithm();
        }
    }
    if let Some(a) = algorithm {
        c.algorithm = CollectiveAlgorithm::parse(a).ok_or_else(|| {
            format!(
                "--algorithm {a}: expected one of {:?}",
                CollectiveAlgorithm::NAMES
            )
        })?;
    }
    c.group = scenario.gpus_per_node;
    c.validate().map_err(|m| format!("collective: {m}"))?;
    if c.algorithm == CollectiveAlgorithm::Nvls && !scenario.nvls {
        return Err(format!("collective: nvls: {NO_NVLS}"));
    }
    Ok(c)
}

/// Runs the collective alone at each of `sizes`, in order, handing each size's result to
/// `row` as soon as it is known (so a table can be printed row by row), and saying on
/// standard error how far the sweep is: sizes done, elapsed time and the time left,
/// estimated from the bytes still to run at the rate so far.
pub fn run(
    scenario: &Scenario,
    c: &Collective,
    sizes: &[u64],
    mut row: impl FnMut(&CollectiveResult) -> Result<(), String>,
) -> Result<(), String> {
    let started = std::time::Instant::now();
    let total: u64 = sizes.iter().sum();
    let mut done = 0u64;
    for (i, &size) in sizes.iter().enumerate() {
        let s = Scenario {
            traffic: vec![Traffic::Collective(Collective { size, ..c.clone() })],
            ..scenario.clone()
        };
        let outcome = runner::run(&s, None, true)?;
        for r in collective_results(&outcome) {
            row(&r)?;
        }
        done += size;
        let elapsed = started.elapsed().as_secs_f64();
        let left = elapsed * (total - done) as f64 / done as f64;
        eprintln!(
            "fabricsim collective: {} of {} sizes ({:.0} % of the bytes), {elapsed:.1} s elapsed, about {left:.0} s left",
            i + 1,
            sizes.len(),
            done as f64 * 100.0 / total as f64
        );
    }
    Ok(())
}

/// The nccl-tests table's header: the collective, then the column names and units.
pub fn header(c: &Collective) -> String {
    format!(
        "# fabricsim collective: {} ({}), {} ranks, {} channel(s)\n#\n# {:>12} {:>12} {:>8} {:>6} {:>6} {:>10} {:>8} {:>8}\n# {:>12} {:>12} {:>8} {:>6} {:>6} {:>10} {:>8} {:>8}\n",
        c.op.name(),
        c.algorithm.name(),
        c.ranks.len(),
        c.channels,
        "size", "count", "type", "redop", "root", "time", "algbw", "busbw",
        "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)"
    )
}

/// One row of the nccl-tests table: size and count (float elements), type, redop, root,
/// time (us), algbw and busbw (GB/s).
pub fn table_row(c: &Collective, r: &CollectiveResult) -> String {
    let root = if c.op == CollectiveOp::Broadcast {
        c.root as i64
    } else {
        -1
    };
    let fmt = |v: Option<f64>, prec: usize| v.map_or("n/a".to_string(), |x| format!("{x:.prec$}"));
    format!(
        "  {:>12} {:>12} {:>8} {:>6} {:>6} {:>10} {:>8} {:>8}\n",
        r.size,
        r.size / 4,
        "float",
        c.op.redop(),
        root,
        fmt(r.time_ns.map(|t| t / 1e3), 2),
        fmt(r.algbw_gbps, 2),
        fmt(r.busbw_gbps, 2)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_follow_nccl_tests_flags() {
        assert_eq!(parse_size("-e", "8G").unwrap(), 8 << 30);
        assert_eq!(parse_size("-b", "64K").unwrap(), 65536);
        assert!(parse_size("-b", "0").is_err());
        assert!(parse_size("-b", "8X").unwrap_err().contains("-b 8X"));
        assert_eq!(sizes(8, 128, 2).unwrap(), vec![8, 16, 32, 64, 128]);
        assert_eq!(sizes(8, 100, 4).unwrap(), vec![8, 32]);
        assert!(sizes(8, 4, 2).is_err());
        assert!(parse_size("-b", "512G").is_ok());
        assert!(parse_size("-b", "600G")
            .unwrap_err()
            .contains("at most 512G"));
    }
}
