//! Tells the tests which external tools they can drive, so that a test whose tool is
//! missing says "ignored" rather than passing without having run. Each `tool_*` cfg is set
//! when the tool is installed, and always under CI, where `.ci/run` installs every tool and
//! a missing one must fail its test.

use std::path::Path;

/// Each cfg and the paths its tool may be installed at.
const TOOLS: [(&str, &[&str]); 3] = [
    ("tool_tshark", &["/usr/bin/tshark", "/usr/local/bin/tshark"]),
    (
        "tool_chromium",
        &["/usr/bin/chromium", "/usr/bin/chromium-browser"],
    ),
    ("tool_slurm", &["/usr/bin/sinfo", "/usr/local/bin/sinfo"]),
];

fn main() {
    println!("cargo:rerun-if-env-changed=CI");
    // Installing or removing a tool changes its folder.
    for dir in ["/usr/bin", "/usr/local/bin"] {
        if Path::new(dir).is_dir() {
            println!("cargo:rerun-if-changed={dir}");
        }
    }
    let ci = std::env::var_os("CI").is_some();
    for (cfg, paths) in TOOLS {
        println!("cargo:rustc-check-cfg=cfg({cfg})");
        if ci || paths.iter().any(|p| Path::new(p).exists()) {
            println!("cargo:rustc-cfg={cfg}");
        }
    }
}
