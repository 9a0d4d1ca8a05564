//! `[[job]]`: several jobs on one cluster, each placed on hosts by a policy. A traffic
//! entry with `job = "NAME"` numbers its hosts 0 to gpus - 1 inside the job; they are
//! mapped onto the hosts the job was placed on, in increasing order.
//!
//! Jobs are placed in file order, each on hosts no earlier job took, whole servers at a
//! time (`gpus` a multiple of `gpus_per_node`) unless the hosts are listed:
//! - `packed`: the lowest-numbered free servers, so a job fills a leaf before the next;
//! - `spread`: one free server from each leaf in turn (a server's leaf is its first GPU's
//!   switch: a rail group on rail-optimized designs), so a job touches as many leaves as
//!   it can;
//! - `random`: free servers drawn uniformly with the scenario's seed and the job's index;
//! - `list`: the hosts given in `hosts`.
//!
//! With a `[cluster]` the leaves are those of the InfiniBand design, and both fabrics get
//! the same hosts, so that a comparison compares fabrics and not placements.

use super::reader::{invalid, reject_present, Ctx, Field, Raw};
use super::ScenarioError;
use fabricsim_core::topology::Topology;
use fabricsim_core::units::HostId;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::Deserialize;
use std::fmt::Write as _;
use toml::Spanned;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileJob {
    name: Option<Spanned<String>>,
    gpus: Field,
    placement: Option<Spanned<String>>,
    hosts: Option<Vec<Spanned<Raw>>>,
}

/// How a job's hosts were chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    Packed,
    Spread,
    Random,
    List,
}

impl Placement {
    pub const NAMES: [&'static str; 4] = ["packed", "spread", "random", "list"];

    pub fn name(self) -> &'static str {
        Self::NAMES[self as usize]
    }

    fn parse(s: &str) -> Option<Placement> {
        let all = [Self::Packed, Self::Spread, Self::Random, Self::List];
        all.into_iter().find(|p| p.name() == s)
    }
}

/// A placed job: its name, policy and hosts (increasing; rank r of the job is `hosts[r]`).
#[derive(Clone, Debug, PartialEq)]
pub struct Job {
    pub name: String,
    pub placement: Placement,
    pub hosts: Vec<HostId>,
    /// Distinct leaves (first-hop switches of the servers' first GPUs) the job touches.
    pub leaves: u32,
}

impl Job {
    /// The cluster host of the job's rank `r` (callers keep `r` below the job's size).
    pub fn host(&self, r: HostId) -> HostId {
        self.hosts[r.0 as usize]
    }

    /// The job's rank on cluster host `h`, if the job holds it.
    pub fn rank(&self, h: HostId) -> Option<HostId> {
        self.hosts.binary_search(&h).ok().map(|i| HostId(i as u32))
    }
}

/// Reads and places every `[[job]]` on `topo` (whose servers have `gpn` GPUs each).
pub(super) fn parse(
    c: &Ctx,
    entries: &[FileJob],
    topo: &Topology,
    gpn: u32,
    seed: u64,
) -> Result<Vec<Job>, ScenarioError> {
    let hosts = topo.host_count();
    let servers = hosts / gpn;
    let leaf_of: Vec<u32> = (0..servers)
        .map(|s| {
            let port = topo.port(topo.host_port(HostId(s * gpn)));
            topo.port(port.peer).node.0
        })
        .collect();
    let mut taken = vec![false; hosts as usize];
    let mut jobs: Vec<Job> = Vec::new();
    for (i, f) in entries.iter().enumerate() {
        let at = |k: &str| format!("job[{i}].{k}");
        let name = f
            .name
            .as_ref()
            .ok_or_else(|| invalid(format!("job[{i}]: name is required")))?;
        let name = name.get_ref().clone();
        if name.is_empty() || jobs.iter().any(|j| j.name == name) {
            return Err(invalid(format!(
                "job[{i}].name = \"{name}\": each job needs its own non-empty name"
            )));
        }
        let placement = match &f.placement {
            None => Placement::Packed,
            Some(p) => c.named(&at("placement"), p, Placement::parse, &Placement::NAMES)?,
        };
        let gpus = c.count(&at("gpus"), &f.gpus, 1, hosts as u64)?;
        let chosen = if placement == Placement::List {
            let list = f.hosts.as_deref().ok_or_else(|| {
                invalid(format!(
                    "job[{i}].hosts: required with placement = \"list\""
                ))
            })?;
            let mut hs = Vec::with_capacity(list.len());
            for v in list {
                let h = c.host(&at("hosts"), v, hosts)?;
                if taken[h.0 as usize] || hs.contains(&h) {
                    return Err(c.err(
                        &at("hosts"),
                        v,
                        "host already taken by this or an earlier job",
                    ));
                }
                hs.push(h);
            }
            if gpus.is_some_and(|g| g != hs.len() as u64) {
                return Err(invalid(format!(
                    "job[{i}].gpus = {}: the job lists {} hosts",
                    gpus.unwrap_or(0),
                    hs.len()
                )));
            }
            hs
        } else {
            reject_present(
                &[("hosts", f.hosts.is_some())],
                &format!("job[{i}]."),
                "a job unless placement = \"list\"",
            )?;
            let gpus = gpus.ok_or_else(|| invalid(format!("job[{i}]: gpus is required")))?;
            if gpus % gpn as u64 != 0 {
                return Err(invalid(format!(
                    "job[{i}].gpus = {gpus}: jobs take whole servers of {gpn} GPUs (list hosts with placement = \"list\" for another shape)"
                )));
            }
            let free: Vec<u32> = (0..servers)
                .filter(|&s| (0..gpn).all(|g| !taken[(s * gpn + g) as usize]))
                .collect();
            let want = (gpus / gpn as u64) as usize;
            if want > free.len() {
                return Err(invalid(format!(
                    "job[{i}].gpus = {gpus}: only {} whole servers ({} GPUs) are free after the earlier jobs",
                    free.len(),
                    free.len() as u64 * gpn as u64
                )));
            }
            let picked = pick(placement, &free, want, &leaf_of, seed, i);
            picked
                .iter()
                .flat_map(|&s| (0..gpn).map(move |g| HostId(s * gpn + g)))
                .collect()
        };
        if chosen.len() < 2 {
            return Err(invalid(format!(
                "job[{i}]: a job needs at least 2 GPUs, it has {}",
                chosen.len()
            )));
        }
        let mut hosts_of = chosen;
        hosts_of.sort_unstable();
        for h in &hosts_of {
            taken[h.0 as usize] = true;
        }
        let mut leaves: Vec<u32> = hosts_of
            .iter()
            .map(|h| leaf_of[(h.0 / gpn) as usize])
            .collect();
        leaves.sort_unstable();
        leaves.dedup();
        jobs.push(Job {
            name,
            placement,
            hosts: hosts_of,
            leaves: leaves.len() as u32,
        });
    }
    Ok(jobs)
}

/// `want` of the `free` servers (increasing) by `placement`.
fn pick(
    placement: Placement,
    free: &[u32],
    want: usize,
    leaf_of: &[u32],
    seed: u64,
    job: usize,
) -> Vec<u32> {
    match placement {
        Placement::Packed | Placement::List => free[..want].to_vec(),
        Placement::Random => {
            let mut rng = ChaCha8Rng::seed_from_u64(
                seed ^ 0xA076_1D64_78BD_642F_u64.wrapping_mul(job as u64 + 1),
            );
            let mut pool = free.to_vec();
            pool.shuffle(&mut rng);
            pool.truncate(want);
            pool
        }
        Placement::Spread => {
            // Free servers grouped by leaf, leaves in order of their first server.
            let mut groups: Vec<(u32, Vec<u32>)> = Vec::new();
            for &s in free {
                match groups.iter_mut().find(|g| g.0 == leaf_of[s as usize]) {
                    Some(g) => g.1.push(s),
                    None => groups.push((leaf_of[s as usize], vec![s])),
                }
            }
            let mut out = Vec::with_capacity(want);
            let mut round = 0;
            while out.len() < want {
                for g in &groups {
                    if out.len() < want && round < g.1.len() {
                        out.push(g.1[round]);
                    }
                }
                round += 1;
            }
            out
        }
    }
}

/// The jobs as `[[job]]` tables that place them again exactly: listed hosts, with the
/// policy that chose them as a comment.
pub(super) fn write_toml(jobs: &[Job], s: &mut String) {
    for j in jobs {
        let ids: Vec<u32> = j.hosts.iter().map(|h| h.0).collect();
        let _ = writeln!(
            s,
            "\n[[job]]   # placed \"{}\" on {} GPUs over {} leaves\nname = {}\nplacement = \"list\"\nhosts = {ids:?}",
            j.placement.name(),
            j.hosts.len(),
            j.leaves,
            super::quoted(&j.name)
        );
    }
}
