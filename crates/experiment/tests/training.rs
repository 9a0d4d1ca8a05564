//! Training jobs: iteration time = compute + exposed communication, on cases with a
//! closed-form answer (data parallel with and without overlap, GPipe pipelines with and
//! without activation traffic), and the cost of one more microsecond per exchange.

mod common;
use common::scenario;
use fabricsim_core::wire::ib;
use fabricsim_experiment::results::{add_sensitivity, summary, training_results, TrainingResult};
use fabricsim_experiment::runner;

fn job(traffic: &str) -> (fabricsim_experiment::scenario::Scenario, TrainingResult) {
    let s = scenario(&format!(
        "[topology]\nkind = \"single-switch\"\nhosts = 8\n[[traffic]]\nkind = \"training\"\n{traffic}\n"
    ));
    let out = runner::run(&s, None, false).unwrap();
    let r = training_results(&out).remove(0);
    (s, r)
}

/// Ring all-reduce time of `bytes` over 8 ranks at 400 Gb/s on one switch (as in
/// collectives.rs: bandwidth term plus one step latency per step; chunk pipelining hides
/// part of the latency term, so the simulated time sits up to a few per cent below).
fn ring_ns(s: &fabricsim_experiment::scenario::Scenario, bytes: f64) -> f64 {
    let frame = ib::write_packet_len(4096, false) as f64;
    let b = s.link_rate.bps() as f64 / 8.0 * 4096.0 / frame;
    let step = s.ib.hca_tx_latency
        + s.ib.hca_rx_latency
        + s.link_delay * 2
        + s.ib.switch_latency
        + s.link_rate.serialization(frame as u64);
    14.0 / 8.0 * bytes / b * 1e9 + 14.0 * step.ps() as f64 / 1e3
}

fn assert_close(got: f64, expected: f64, what: &str) {
    let err = (got - expected).abs() / expected;
    assert!(
        err < 0.03,
        "{what}: {got:.0} vs {expected:.0} ({:.2} % off)",
        err * 100.0
    );
}

#[test]
fn without_overlap_the_whole_all_reduce_is_exposed() {
    let (s, r) = job("size = \"64MiB\"\nbuckets = 1\niterations = 3\nforward = \"1ms\"\nbackward = \"2ms\"\noverlap = false");
    let t_ar = ring_ns(&s, (64u64 << 20) as f64);
    let it = r.iteration_time_ns.unwrap();
    assert_close(it, 3e6 + t_ar, "iteration = compute + all-reduce (ns)");
    assert_close(
        r.exposed_communication_ns.unwrap(),
        t_ar,
        "exposed communication (ns)",
    );
    assert!((r.projected_job_seconds.unwrap() - it * 1e-9 * 100_000.0).abs() < 1e-9);
}

#[test]
fn with_overlap_only_the_last_bucket_is_exposed() {
    // Four 16 MiB buckets, one produced every millisecond of backward; each all-reduce
    // (about 0.6 ms) ends before the next bucket is ready, so only the last one shows:
    // iteration = forward + backward + one bucket's all-reduce, that all-reduce measured
    // alone on the same fabric (collectives.rs checks it against its analytic time).
    let (s, r) =
        job("size = \"64MiB\"\nbuckets = 4\niterations = 3\nforward = \"1ms\"\nbackward = \"4ms\"");
    let alone = scenario("[topology]\nkind = \"single-switch\"\nhosts = 8\n[[traffic]]\nkind = \"collective\"\nop = \"all-reduce\"\nsize = \"16MiB\"\n");
    let out = runner::run(&alone, None, false).unwrap();
    let t_bucket = fabricsim_experiment::results::collective_results(&out)[0]
        .time_ns
        .unwrap();
    assert!(t_bucket < 1e6);
    assert_close(
        t_bucket,
        ring_ns(&s, (16u64 << 20) as f64),
        "bucket all-reduce vs analytic (ns)",
    );
    let exposed = r.exposed_communication_ns.unwrap();
    assert!(
        (exposed - t_bucket).abs() / t_bucket < 0.01,
        "exposed {exposed:.0} ns vs the last bucket's all-reduce {t_bucket:.0} ns"
    );
    assert!((r.iteration_time_ns.unwrap() - (5e6 + exposed)).abs() < 1.0);
    // Every rank's steady iterations: ordered percentiles around the mean iteration,
    // which is their mean over ranks' last arrivals (within a rank's arrival skew).
    let spread = r.iteration_spread_ns.clone().unwrap();
    assert!(
        spread.p50 <= spread.p99 && spread.p99 <= spread.max,
        "{spread:?}"
    );
    let mean = r.iteration_time_ns.unwrap();
    assert!(
        (spread.p50 as f64 - mean).abs() / mean < 0.01,
        "{spread:?} vs {mean}"
    );
}

#[test]
fn one_more_microsecond_per_exchange_lengthens_the_job() {
    let s = scenario("[topology]\nkind = \"single-switch\"\nhosts = 8\n[[traffic]]\nkind = \"training\"\nsize = \"8MiB\"\nbuckets = 2\niterations = 2\nforward = \"50us\"\nbackward = \"100us\"\noverlap = false\njob_iterations = 1000000\n");
    let out = runner::run(&s, None, false).unwrap();
    let mut sum = summary(&s, &out);
    let plus = runner::run(&runner::plus_one_us_per_exchange(&s), None, false).unwrap();
    add_sensitivity(&mut sum, &plus);
    let extra = sum.training[0]
        .extra_job_seconds_per_us_per_exchange
        .unwrap();
    // Each 4 MiB bucket's ring all-reduce over 8 ranks moves one 512 KiB block per step,
    // a single chunk: each of its 2 (n - 1) = 14 steps is one exchange that waits for the
    // previous one to arrive, so each pays the microsecond. Without overlap the two
    // buckets run one after the other on NCCL's stream: 28 us per iteration, 28 s over a
    // million iterations.
    let expected = 2.0 * 14.0 * 1e-6 * 1e6;
    assert!((extra - expected).abs() < 1e-6, "{extra} s vs {expected} s");
}

#[test]
fn a_gpipe_iteration_is_its_compute_slots_plus_the_replica_all_reduce() {
    // 8 ranks: 4 pipeline stages x 2 replicas, 4 microbatches, no activation traffic. A
    // GPipe iteration computes (M + P - 1) slots of forward and of backward, then each
    // rank's gradient shard (1/4 of 64 MiB) is all-reduced between its 2 replicas.
    let (_, r) = job("size = \"64MiB\"\nbuckets = 1\niterations = 3\nforward = \"100us\"\nbackward = \"200us\"\npipeline_parallel = 4\nmicrobatches = 4");
    assert_eq!(r.compute_ns, 7.0 * 300e3);
    let pair = scenario("[topology]\nkind = \"single-switch\"\nhosts = 8\n[[traffic]]\nkind = \"collective\"\nop = \"all-reduce\"\nranks = [0, 2]\nsize = \"16MiB\"\n");
    let t_ar = fabricsim_experiment::results::collective_results(
        &runner::run(&pair, None, false).unwrap(),
    )[0]
    .time_ns
    .unwrap();
    assert_close(
        r.iteration_time_ns.unwrap(),
        7.0 * 300e3 + t_ar,
        "GPipe iteration (ns)",
    );
}

#[test]
fn pipeline_stages_pay_for_their_activation_sends() {
    // Two stages, one microbatch, no replicas: forward on stage 0, 16 MiB of activations
    // to stage 1, forward and backward there, 16 MiB of gradients back, backward on
    // stage 0: one iteration is 2 forwards, 2 backwards and 2 transfers.
    let (_, r) = job("ranks = [0, 1]\nsize = \"1MiB\"\niterations = 3\nforward = \"100us\"\nbackward = \"200us\"\npipeline_parallel = 2\nactivation = \"16MiB\"");
    let flow = scenario("[topology]\nkind = \"single-switch\"\nhosts = 8\n[[traffic]]\nkind = \"flow\"\nsrc = 0\ndst = 1\nsize = \"16MiB\"\n");
    let f = &runner::run(&flow, None, false).unwrap().report.flows[0];
    let transfer = (f.finish.unwrap() - f.start).ps() as f64 / 1e3;
    assert_close(
        r.iteration_time_ns.unwrap(),
        600e3 + 2.0 * transfer,
        "pipeline iteration (ns)",
    );
}
