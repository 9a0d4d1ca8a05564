//! What a comparison rests on, stated in the report: the cluster (GPUs, servers, network
//! style, NIC rate, each fabric's design and hardware), the workload, the simulation level
//! and the cost assumptions, so that a reader never has to ask which case the verdict
//! answers.

use crate::compare::Comparison;
use crate::decision::{gpu, thousands};
use crate::scenario::{describe_design, Scenario, TopologySpec};
use fabricsim_core::units::ByteSize;
use fabricsim_fabric::workload::Traffic;

/// The inputs as (what, value) rows, in reading order.
pub fn rows(c: &Comparison) -> Vec<(String, String)> {
    let s = &c.runs[0].scenario;
    let mut rows = vec![("cluster".to_string(), cluster(s))];
    for (name, run) in c.candidates() {
        let fabric = run.scenario.fabric;
        let design = match &run.scenario.topology {
            TopologySpec::Cluster(d) => match &d.plans[fabric as usize] {
                Ok(plan) => describe_design(plan),
                Err(why) => why.clone(),
            },
            _ => format!(
                "as written in [topology]: {} tier(s), {} switches",
                run.design.tiers, run.design.switches
            ),
        };
        let (title, balancing) = if name == crate::scenario::ROCEV2_ADAPTIVE {
            (
                "Ethernet with adaptive routing".to_string(),
                format!(
                    "; load balancing \"{}\", the NICs placing packets out of order",
                    run.scenario.roce.load_balancing.name()
                ),
            )
        } else {
            (format!("{} network", fabric.label()), String::new())
        };
        rows.push((
            title,
            format!(
                "{design}; switch {}, NIC {}{balancing}; simulated at {} level",
                run.scenario.hardware.switch_for(fabric),
                run.scenario.hardware.nic,
                run.summary.level
            ),
        ));
    }
    for j in &s.jobs {
        rows.push((
            format!("job \"{}\"", j.name),
            format!(
                "{} GPUs placed {} over {} leaves (the same hosts on every fabric)",
                thousands(j.hosts.len() as f64),
                j.placement.name(),
                j.leaves
            ),
        ));
    }
    for (i, f) in s.failures.iter().enumerate() {
        let what = match f.part {
            crate::scenario::FailedPart::Link(a, b) => {
                format!("the link between nodes {a} and {b}")
            }
            crate::scenario::FailedPart::Switch(n) => format!("switch {n}"),
        };
        let back = f
            .until
            .map_or(" for good".to_string(), |u| format!(" until {u}"));
        rows.push((
            format!("failure #{i}"),
            format!(
                "{what} down at {}{back}; InfiniBand re-routes after {} + {}, RoCEv2 after {} + {} (detection + re-route, estimates)",
                f.at,
                s.ib.failures.detection,
                s.ib.failures.reroute,
                s.roce.failures.detection,
                s.roce.failures.reroute
            ),
        ));
    }
    for (i, (t, owner)) in s.traffic.iter().zip(&s.traffic_jobs).enumerate() {
        let of = owner.map_or(String::new(), |j| format!(" of job \"{}\"", s.jobs[j].name));
        rows.push((format!("workload #{i}{of}"), traffic(t)));
    }
    let g = gpu(s);
    let k = &s.cost;
    rows.push((
        "cost assumptions".into(),
        format!(
            "GPU {} at ${}{} and {} W; {} years of life; electricity ${}/kWh at PUE {}; network support {} % of its capital cost a year{}; {}",
            s.hardware.gpu,
            thousands(g.usd()),
            g.nic_included.map_or(String::new(), |(nic, usd)| format!(
                " (${} listed with its NIC; the {nic} at ${} is counted in the network)",
                thousands(g.listed_usd),
                thousands(usd)
            )),
            thousands(g.watts),
            k.lifetime_years,
            k.electricity_usd_per_kwh,
            k.pue,
            k.support_share_per_year * 100.0,
            if k.software.is_empty() {
                String::new()
            } else {
                format!("; software: {}", k.software.join(", "))
            },
            operations(k)
        ),
    ));
    rows.push(("seed".into(), s.seed.to_string()));
    rows
}

/// Staff and licences per fabric, or that none are counted.
fn operations(k: &crate::scenario::CostSettings) -> String {
    let o = &k.operations;
    if (0..2).all(|f| o.usd_per_year(f) == 0.0) {
        return "staff and licences not counted (zero unless set: [cost] staff_usd_per_year, licences_usd_per_year)".into();
    }
    let per = |f: usize| {
        format!(
            "${} staff and ${} licences a year",
            thousands(o.staff_usd_per_year[f].range.base),
            thousands(o.licences_usd_per_year[f].range.base)
        )
    };
    format!("InfiniBand {}, RoCEv2 {}", per(0), per(1))
}

/// GPUs, servers, the network's style and rate.
fn cluster(s: &Scenario) -> String {
    let gpus = s.host_count();
    let g = s.gpus_per_node.max(1);
    let style = match &s.topology {
        TopologySpec::Cluster(d) => format!("{}, {}:1 asked", d.style.name(), d.oversubscription),
        TopologySpec::SingleSwitch { .. } => "one switch".into(),
        TopologySpec::LeafSpine { leaves, spines, .. } => {
            format!("leaf-spine, {leaves} leaves and {spines} spines")
        }
        TopologySpec::FatTree { k } => format!("k={k} fat-tree"),
        TopologySpec::RailOptimized { spines, .. } => {
            format!("rail-optimized, {spines} spines")
        }
        TopologySpec::File { path, .. } => format!("from {path}"),
    };
    format!(
        "{} GPUs in {} servers of {g}, one {} NIC each; {style}",
        thousands(gpus as f64),
        thousands((gpus / g) as f64),
        s.link_rate
    )
}

/// One traffic entry in a line.
fn traffic(t: &Traffic) -> String {
    match t {
        Traffic::Flow { src, dst, size, .. } => {
            format!("a flow of {} from host {src} to {dst}", ByteSize(*size))
        }
        Traffic::Incast { senders, dst, size, .. } => format!(
            "a {}:1 incast of {} each into host {dst}",
            senders.len(),
            ByteSize(*size)
        ),
        Traffic::Permutation { hosts, size, .. } => format!(
            "a permutation of {} over {} hosts",
            ByteSize(*size),
            hosts.len()
        ),
        Traffic::Listed { source, messages } => {
            format!("{} flows from {source}", thousands(messages.len() as f64))
        }
        Traffic::Collective(c) => format!(
            "{} of {} over {} ranks, {} algorithm, {} channel(s)",
            c.op.name(),
            ByteSize(c.size),
            c.ranks.len(),
            c.algorithm.name(),
            c.channels
        ),
        Traffic::Training(j) => format!(
            "data-parallel training over {} GPUs{}: {} of gradients per iteration in {} buckets, {} all-reduce, forward {} and backward {}, {} iterations simulated, projected over {}",
            thousands(j.ranks.len() as f64),
            if j.tensor_parallel * j.pipeline_parallel > 1 {
                format!(
                    " (tensor {} x pipeline {})",
                    j.tensor_parallel, j.pipeline_parallel
                )
            } else {
                String::new()
            },
            ByteSize(j.gradient),
            j.buckets,
            j.algorithm.name(),
            j.forward,
            j.backward,
            j.iterations,
            thousands(j.job_iterations as f64)
        ),
        Traffic::Chakra(job) => format!(
            "Chakra traces from {}, {} ranks",
            job.source,
            job.ranks.len()
        ),
        Traffic::Background(b) => format!(
            "{} background at {:.0} % load over {} hosts for {}",
            b.distribution.name(),
            b.load * 100.0,
            b.hosts.len(),
            b.duration
        ),
    }
}
