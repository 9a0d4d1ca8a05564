//! The layering holds: every dependency points down. Crates: core < fabric < experiment
//! < cli. Inside core: units < wire < protocol machines < engine, pool, topology. Inside
//! fabric: workloads < report < driver < parallel < the two fabrics and flow level, which
//! never use each other. Inside experiment: what a run hands back and the recorded error
//! < file formats and the catalog < scenario < estimate < results < runner < what runs
//! it (bench, compare, report, validate, sweep, calibrate). Paths are read with syn.
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

/// The top-level modules that a source file, module `module` of its crate (its path from
/// the crate root: `["rocev2", "sim", "nic"]`), names by `crate::` paths or by `super::`
/// paths that climb to the crate root: in `use` items and in paths anywhere in its code
/// (parsed with syn, so comments, doc links and strings do not count).
fn crate_paths(text: &str, module: &[String]) -> Vec<String> {
    let file = syn::parse_file(text).unwrap_or_else(|e| panic!("{module:?}: {e}"));
    let mut uses = Uses {
        module: module.to_vec(),
        found: Vec::new(),
    };
    syn::visit::Visit::visit_file(&mut uses, &file);
    uses.found
}

/// What [`crate_paths`] collects while it walks a file.
struct Uses {
    module: Vec<String>,
    found: Vec<String>,
}

impl Uses {
    /// Notes the top-level module a path of these segments reaches, if it leaves the
    /// file's own top-level module through the crate root.
    fn resolve(&mut self, segments: &[String]) {
        let (mut at, mut i) = match segments.first().map(String::as_str) {
            Some("crate") => (Vec::new(), 1),
            Some("super") => (self.module.clone(), 0),
            _ => return,
        };
        while segments.get(i).map(String::as_str) == Some("super") {
            at.pop();
            i += 1;
        }
        if let (true, Some(top)) = (at.is_empty(), segments.get(i)) {
            self.found.push(top.clone());
        }
    }

    fn use_tree(&mut self, tree: &syn::UseTree, mut prefix: Vec<String>) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(&p.tree, prefix);
            }
            syn::UseTree::Name(n) => {
                prefix.push(n.ident.to_string());
                self.resolve(&prefix);
            }
            syn::UseTree::Rename(r) => {
                prefix.push(r.ident.to_string());
                self.resolve(&prefix);
            }
            syn::UseTree::Glob(_) => self.resolve(&prefix),
            syn::UseTree::Group(g) => {
                for t in &g.items {
                    self.use_tree(t, prefix.clone());
                }
            }
        }
    }
}

impl<'ast> syn::visit::Visit<'ast> for Uses {
    /// An inline module (`mod tests { .. }`) is a level deeper for its `super` paths.
    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        self.module.push(m.ident.to_string());
        syn::visit::visit_item_mod(self, m);
        self.module.pop();
    }

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        self.use_tree(&u.tree, Vec::new());
    }

    fn visit_path(&mut self, p: &'ast syn::Path) {
        let segments: Vec<String> = p.segments.iter().map(|s| s.ident.to_string()).collect();
        self.resolve(&segments);
        syn::visit::visit_path(self, p);
    }
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
        let mut path: Vec<String> = rel
            .with_extension("")
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        if path
            .last()
            .is_some_and(|l| l == "mod" || l == "lib" || l == "main")
        {
            path.pop();
        }
        let Some(module) = path.first().cloned() else {
            continue; // the crate root
        };
        let own = rank(&module).unwrap_or_else(|| panic!("{src}/{module}: give it a layer"));
        for used in crate_paths(&std::fs::read_to_string(&f).unwrap(), &path) {
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
fn experiment_modules_depend_only_on_lower_layers() {
    check_modules(
        "crates/experiment/src",
        &[
            ("output", 0),
            ("heap", 0),
            ("outcome", 0),
            ("flow_error", 0),
            ("formats", 1),
            ("catalog", 1),
            ("scenario", 2),
            ("estimate", 3),
            ("results", 4),
            ("runner", 5),
            ("bench", 6),
            ("collective_sweep", 6),
            ("decision", 6),
            ("compare", 7),
            ("report", 8),
            ("validate", 9),
            ("sweep", 9),
            ("calibrate", 10),
            ("tune", 10),
        ],
    );
}

#[test]
fn the_path_scanner_sees_used_and_written_paths_and_climbs_super() {
    let module = |m: &[&str]| m.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let text =
        "//! crate::docs don't count\nuse crate::units::Time;\nuse crate::{wire::ib, proto};\n\
                use super::super::engine::Queue;\nuse super::sibling;\n\
                fn f() { let _ = crate::topology::x(); let _ = \"crate::string\"; }\n\
                mod tests { use super::super::super::clos; use super::super::pool_item; }";
    assert_eq!(
        crate_paths(text, &module(&["pool", "inner"])),
        ["units", "wire", "proto", "engine", "topology", "clos"]
    );
}
