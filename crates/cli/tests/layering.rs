//! The layering holds: every dependency points down. Crates: core < fabric < experiment
//! < cli. Inside core: units < wire < protocol machines < engine, pool, topology. Inside
//! fabric: workloads < report < driver < the two fabrics and flow level, which never use
//! each other.
//! A new crate or module must be given its place here, or this test fails.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The workspace's crates, lowest layer first.
const CRATES: &[(&str, &str)] = &[
    ("fabricsim-core", "crates/core"),
    ("fabricsim-fabric", "crates/fabric"),
    ("fabricsim-experiment", "crates/experiment"),
    ("fabricsim", "crates/cli"),
];

#[test]
fn crates_depend_only_on_lower_crates() {
    let workspace: toml::Table =
        toml::from_str(&std::fs::read_to_string(root().join("Cargo.toml")).unwrap()).unwrap();
    let members: Vec<&str> = workspace["workspace"]["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m.as_str().unwrap())
        .collect();
    let placed: Vec<&str> = CRATES.iter().map(|(_, dir)| *dir).collect();
    assert_eq!(members, placed, "every workspace member has its layer here");
    for (rank, (name, dir)) in CRATES.iter().enumerate() {
        let manifest: toml::Table =
            toml::from_str(&std::fs::read_to_string(root().join(dir).join("Cargo.toml")).unwrap())
                .unwrap();
        assert_eq!(manifest["package"]["name"].as_str(), Some(*name));
        for table in ["dependencies", "dev-dependencies", "build-dependencies"] {
            let Some(deps) = manifest.get(table).and_then(|t| t.as_table()) else {
                continue;
            };
            for dep in deps.keys().filter(|d| d.starts_with("fabricsim")) {
                let dep_rank = CRATES.iter().position(|(n, _)| n == dep);
                assert!(
                    dep_rank.is_some_and(|r| r < rank),
                    "{name} ({table}) depends on {dep}, which is not a lower layer"
                );
            }
        }
    }
}

/// The top-level modules a source file names through `crate::` paths.
fn crate_paths(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for (i, _) in text.match_indices("crate::") {
        let rest = &text[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let body = &group[..group.find('}').unwrap_or(group.len())];
            for item in body.split(',') {
                let name: String = item
                    .trim()
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() {
                    found.push(name);
                }
            }
        } else {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            found.push(name);
        }
    }
    found
}

/// Checks that each module of `src` uses only modules of a lower rank in `layers`.
fn check_modules(src: &str, layers: &[(&str, u32)]) {
    let dir = root().join(src);
    let mut files = Vec::new();
    let mut stack = vec![dir.clone()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                files.push(p);
            }
        }
    }
    files.sort();
    let rank = |m: &str| layers.iter().find(|(n, _)| *n == m).map(|(_, r)| *r);
    for f in files {
        let rel = f.strip_prefix(&dir).unwrap();
        let module = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_string();
        if module == "lib" {
            continue;
        }
        let own = rank(&module).unwrap_or_else(|| panic!("{src}/{module}: give it a layer"));
        for used in crate_paths(&std::fs::read_to_string(&f).unwrap()) {
            if used == module {
                continue;
            }
            let theirs = rank(&used).unwrap_or_else(|| panic!("{src}: unknown module {used}"));
            assert!(
                theirs < own,
                "{}: module {module} uses crate::{used}, which is not a lower layer",
                f.display()
            );
        }
    }
}

#[test]
fn core_modules_depend_only_on_lower_layers() {
    check_modules(
        "crates/core/src",
        &[
            ("units", 0),
            ("prefetch", 0),
            ("wire", 1),
            ("proto", 2),
            ("engine", 3),
            ("pool", 3),
            ("topology", 3),
            ("clos", 4),
        ],
    );
}

#[test]
fn fabric_modules_depend_only_on_lower_layers() {
    check_modules(
        "crates/fabric/src",
        &[
            ("workload", 0),
            ("report", 1),
            ("driver", 2),
            ("parallel", 3),
            ("infiniband", 4),
            ("rocev2", 4),
            ("flow", 4),
        ],
    );
}

#[test]
fn the_path_scanner_sees_single_and_grouped_paths() {
    assert_eq!(
        crate_paths("use crate::units::Time;\nuse crate::{wire::ib, proto};"),
        ["units", "wire", "proto"]
    );
}
