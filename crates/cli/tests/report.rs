//! The decision report, rendered for real: `fabricsim compare --report` in headless
//! Chromium (Debian's, installed by .ci/run). The DOM must hold the recommendation and
//! the plots, and the first screen must show the decision, not a blank page.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

fn tmpdir(name: &str) -> common::Scratch {
    common::Scratch::new("report", name)
}

/// Chromium, which must be present in CI; elsewhere the test says it skipped.
fn chromium() -> Option<PathBuf> {
    common::required_tool(
        &["/usr/bin/chromium", "/usr/bin/chromium-browser"],
        "chromium",
    )
}

/// Runs headless Chromium on `page` with `args`; returns its standard output.
fn headless(chromium: &Path, profile: &Path, page: &Path, args: &[&str]) -> Vec<u8> {
    let out = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("chromium starts");
    assert!(
        out.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// Where the first plot starts in the DOM.
fn first_plot_of(dom: &str) -> usize {
    dom.find("class=\"plot\"").expect("plots")
}

/// A screenshot's pixels (RGB or RGBA, each a slice).
fn pixels(png_path: &Path) -> Vec<Vec<u8>> {
    let decoder = png::Decoder::new(std::io::BufReader::new(
        std::fs::File::open(png_path).unwrap(),
    ));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    let channels = info.line_size / info.width as usize;
    buf[..info.buffer_size()]
        .chunks(channels)
        .map(<[u8]>::to_vec)
        .collect()
}

/// Whether an axis or legend label is a raw float: a trailing ".0", five or more digits
/// without separators, or more than four decimals.
fn raw_float(label: &str) -> bool {
    let t = label.trim();
    let digits = |x: &str| !x.is_empty() && x.chars().all(|c| c.is_ascii_digit());
    let unsigned = t.strip_prefix('-').unwrap_or(t);
    match unsigned.split_once('.') {
        Some((whole, frac)) if digits(whole) && digits(frac) => {
            frac.chars().all(|c| c == '0') || frac.len() > 4 || whole.len() >= 5
        }
        None => digits(unsigned) && unsigned.len() >= 5,
        _ => false,
    }
}

/// The text of every `<text>` element in `svg`.
fn svg_texts(svg: &str) -> Vec<String> {
    let mut v = Vec::new();
    let mut rest = svg;
    while let Some(at) = rest.find("<text") {
        rest = &rest[at..];
        let open = rest.find('>').expect("a text element closes its tag");
        let close = rest.find("</text>").expect("a text element ends");
        v.push(rest[open + 1..close].to_string());
        rest = &rest[close..];
    }
    v
}

fn page_of(report: &Path) -> PathBuf {
    report.join("report.html")
}

/// A small cluster with a training job, an incast that makes RoCEv2 pause and cut rates.
const SCENARIO: &str = "[cluster]\ngpus = 32\n[fabric.rocev2]\nswitch_buffer = \"6MiB\"\necn = { kmin = \"20KB\", kmax = \"80KB\", pmax = 0.5 }\n\
[[traffic]]\nkind = \"training\"\nsize = \"16MiB\"\nbuckets = 2\niterations = 2\nforward = \"100us\"\nbackward = \"200us\"\n\
[[traffic]]\nkind = \"incast\"\nsenders = [8, 16, 24, 9, 17, 25]\ndst = 0\nsize = \"2MiB\"\n";

/// `fabricsim compare FILE --report DIR/report` on `text` written to DIR/`file`: its
/// output (checked to succeed) and the report folder.
fn compare_with_report(d: &Path, file: &str, text: &str) -> (std::process::Output, PathBuf) {
    let file = d.join(file);
    std::fs::write(&file, text).unwrap();
    let report = d.join("report");
    let out = Command::new(env!("CARGO_BIN_EXE_fabricsim"))
        .arg("compare")
        .arg(&file)
        .arg("--report")
        .arg(&report)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (out, report)
}

#[test]
#[cfg_attr(not(tool_chromium), ignore = "chromium is not installed")]
fn the_report_renders_in_headless_chromium_with_the_decision_first() {
    let Some(chromium) = chromium() else { return };
    let d = tmpdir("render");
    let (out, report) = compare_with_report(&d, "cluster.toml", SCENARIO);
    for f in ["report.html", "summary.md", "summary.json"] {
        assert!(report.join(f).is_file(), "{f}");
    }
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("report written to {}", page_of(&report).display())),
        "the command says where the report is: {err}"
    );
    let beside = common::names(&d);
    assert_eq!(
        beside,
        ["cluster.toml", "report"],
        "no lock or temporary left"
    );
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(report.join("summary.json")).unwrap()).unwrap();
    let d_json = &summary["recommendation"];
    let verdict = d_json["verdict"].as_str().unwrap();
    let title = match verdict {
        "rocev2" => "Recommendation: RoCEv2",
        "infiniband" => "Recommendation: InfiniBand",
        _ => "Too close to call",
    };
    let shares: f64 = ["infiniband", "rocev2"]
        .iter()
        .map(|f| d_json["share"][f].as_f64().unwrap())
        .sum();
    assert!((shares - 1.0).abs() < 1e-12, "the shares cover the samples");
    assert!(
        !d_json["drivers"].as_array().unwrap().is_empty(),
        "a designed cluster's inputs have ranges"
    );
    let page = page_of(&report);
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(
        !html.contains("src=\"http") && !html.contains("href=\"http"),
        "self-contained"
    );

    // The DOM as Chromium built it: the decision, then every plot as inline SVG.
    let dom = String::from_utf8(headless(
        &chromium,
        &d.join("profile1"),
        &page,
        &["--dump-dom"],
    ))
    .unwrap();
    let rec = dom
        .find("id=\"recommendation\"")
        .expect("the recommendation section");
    assert!(dom[rec..].contains(title), "says {title}");
    assert!(
        dom.find("id=\"drivers\"")
            .is_some_and(|at| at < first_plot_of(&dom)),
        "the inputs that move the answer are listed before the plots"
    );
    let first_plot = first_plot_of(&dom);
    // What the verdict answers: the cluster, each network, the workload and the cost
    // assumptions, before the plots.
    let inputs = dom.find("id=\"inputs\"").expect("the inputs table");
    assert!(inputs < first_plot, "the inputs come before the plots");
    for needle in [
        "32 GPUs in 4 servers of 8, one 400Gbps NIC each",
        "InfiniBand network",
        "RoCEv2 network",
        "data-parallel training over 32 GPUs",
        "a 6:1 incast of 2MiB",
        "GPU h100-sxm at $",
        "5 years of life",
        "$0.08/kWh at PUE 1.3",
        "network support 10 %",
    ] {
        assert!(
            dom[inputs..first_plot].contains(needle),
            "inputs state {needle:?}"
        );
    }
    assert!(
        rec < first_plot,
        "the recommendation comes before the plots"
    );
    for id in [
        "tornado",
        "job-cost",
        "iteration",
        "fct-cdf",
        "slowdown",
        "queues",
        "paused",
        "dcqcn",
        "cost",
    ] {
        let at = dom
            .find(&format!("id=\"plot-{id}\""))
            .unwrap_or_else(|| panic!("plot {id}"));
        assert!(
            dom[at..].trim_start().contains("<svg"),
            "plot {id} is an SVG"
        );
    }
    assert!(!dom.contains("plot not drawn"), "every plot drew");

    // The first screen: not blank, and showing the recommendation's green box.
    let png_path = d.join("first-screen.png");
    headless(
        &chromium,
        &d.join("profile2"),
        &page,
        &[
            "--window-size=1280,800",
            &format!("--screenshot={}", png_path.display()),
        ],
    );
    let first_screen = pixels(&png_path);
    let white = first_screen
        .iter()
        .filter(|p| p[..3] == [255, 255, 255])
        .count();
    let inked = 1.0 - white as f64 / first_screen.len() as f64;
    assert!(
        inked > 0.05,
        "the first screen is {:.1} % ink",
        inked * 100.0
    );
    let border = first_screen
        .iter()
        .filter(|p| p[..3] == [0x2a, 0x7a, 0x2a])
        .count();
    assert!(
        border > 1000,
        "the recommendation box is on the first screen ({border} border pixels)"
    );

    // Every plot on its own: ink in its area (coloured marks, not only grey grid and
    // black text), and no axis label a raw float.
    let mut rest = html.as_str();
    let mut drawn = 0;
    while let Some(at) = rest.find("<figure class=\"plot\" id=\"plot-") {
        rest = &rest[at..];
        let end = rest.find("</figure>").expect("a figure ends");
        let figure = &rest[..end];
        rest = &rest[end..];
        let id = &figure["<figure class=\"plot\" id=\"plot-".len()..];
        let id = &id[..id.find('"').unwrap()];
        let svg = &figure[figure.find("<svg").expect("an SVG")..figure.find("</svg>").unwrap() + 6];
        for label in svg_texts(svg) {
            assert!(
                !raw_float(&label),
                "plot {id}: the label {label:?} is a raw float"
            );
        }
        let one = d.join(format!("plot-{id}.html"));
        std::fs::write(
            &one,
            format!("<html><body style=\"margin:0\">{svg}</body></html>"),
        )
        .unwrap();
        let shot = d.join(format!("plot-{id}.png"));
        headless(
            &chromium,
            &d.join(format!("profile-{id}")),
            &one,
            &[
                "--window-size=740,380",
                &format!("--screenshot={}", shot.display()),
            ],
        );
        let coloured = pixels(&shot)
            .iter()
            .filter(|p| {
                let (hi, lo) = (p[..3].iter().max().unwrap(), p[..3].iter().min().unwrap());
                hi - lo > 60
            })
            .count();
        assert!(
            coloured > 500,
            "plot {id} has {coloured} coloured pixels: no ink"
        );
        drawn += 1;
    }
    assert!(drawn >= 9, "{drawn} plots drawn");
}

/// Three candidates (`[compare] candidates` with "rocev2-adaptive"): a ring across the
/// leaves of a 4:1 leaf-spine beside a permutation.
const THREE: &str = "[topology]\nkind = \"leaf-spine\"\nhosts = 32\nleaves = 4\nspines = 2\n\
[compare]\ncandidates = [\"infiniband\", \"rocev2\", \"rocev2-adaptive\"]\n\
[[traffic]]\nkind = \"collective\"\nop = \"all-reduce\"\nalgorithm = \"ring\"\nranks = [0, 8, 16, 24, 1, 9, 17, 25]\nsize = \"4MiB\"\n\
[[traffic]]\nkind = \"permutation\"\nhosts = [4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31]\nsize = \"4MiB\"\n";

#[test]
#[cfg_attr(not(tool_chromium), ignore = "chromium is not installed")]
fn a_three_candidate_report_shows_each_candidate_with_its_design_and_cost() {
    let Some(chromium) = chromium() else { return };
    let d = tmpdir("three");
    let (out, report) = compare_with_report(&d, "three.toml", THREE);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("InfiniBand vs RoCEv2 vs Ethernet with adaptive routing"),
        "{table}"
    );
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(report.join("summary.json")).unwrap()).unwrap();
    for k in ["infiniband", "rocev2", "rocev2-adaptive"] {
        assert!(summary[k]["design"]["switches"].as_u64().is_some(), "{k}");
        assert!(summary[k]["cost"]["capex_usd"].as_f64().is_some(), "{k}");
        assert!(
            summary["recommendation"]["share"][k].as_f64().is_some(),
            "{k}"
        );
    }
    let dom = String::from_utf8(headless(
        &chromium,
        &d.join("profile"),
        &page_of(&report),
        &["--dump-dom"],
    ))
    .unwrap();
    let side = dom
        .find("id=\"side-by-side\"")
        .expect("the side-by-side table");
    let header = &dom[side..side + dom[side..].find("</tr>").unwrap()];
    for k in ["infiniband", "rocev2", "rocev2-adaptive"] {
        assert!(
            header.contains(&format!("data-candidate=\"{k}\"")),
            "{k}: {header}"
        );
    }
    assert!(header.contains("Ethernet adaptive / IB"), "{header}");
    let inputs = dom.find("id=\"inputs\"").expect("the inputs table");
    assert!(
        dom[inputs..side].contains("Ethernet with adaptive routing")
            && dom[inputs..side].contains("bluefield-3-supernic-400g"),
        "the inputs name the third candidate's equipment"
    );
    let md = std::fs::read_to_string(report.join("summary.md")).unwrap();
    assert!(
        md.contains("| | InfiniBand | RoCEv2 | Ethernet adaptive |"),
        "{md}"
    );
}

#[test]
fn raw_floats_are_told_from_labels() {
    for raw in [
        "2000.0",
        "100000",
        "0.30000000000000004",
        "-10.0",
        "12345.5",
    ] {
        assert!(raw_float(raw), "{raw}");
    }
    for fine in [
        "2,000",
        "0.95",
        "1 MiB",
        "40:3",
        "flow 3968",
        "10",
        "1.25",
        "InfiniBand",
    ] {
        assert!(!raw_float(fine), "{fine}");
    }
}
