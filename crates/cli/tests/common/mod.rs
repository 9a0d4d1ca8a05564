//! Helpers shared by the command-line tests.
// Each test crate includes this module and uses part of it.
#![allow(dead_code)]

use std::path::PathBuf;

/// The first of `candidates` that exists: a real tool a test drives. In CI (where .ci/run
/// installs it) a missing tool fails the test; elsewhere the test says it skipped.
pub fn required_tool(candidates: &[&str], what: &str) -> Option<PathBuf> {
    let found = candidates.iter().map(PathBuf::from).find(|p| p.exists());
    if found.is_none() {
        assert!(std::env::var_os("CI").is_none(), "{what} is missing in CI");
        eprintln!("skipped: {what} is not installed (apt-get install {what})");
    }
    found
}

/// The names in folder `dir`, sorted: what a command left there.
pub fn names(dir: &std::path::Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// A test's own folder in the temporary directory (a `tempfile::TempDir`), removed with
/// everything in it when the test ends, passed or failed, so runs of the suite leave
/// nothing behind; it reads as the folder's path.
pub struct Scratch(tempfile::TempDir);

impl Scratch {
    /// A fresh, empty folder `fabricsim-{what}-{name}-XXXXXX`.
    pub fn new(what: &str, name: &str) -> Scratch {
        let d = tempfile::Builder::new()
            .prefix(&format!("fabricsim-{what}-{name}-"))
            .tempdir()
            .unwrap();
        Scratch(d)
    }
}

impl std::ops::Deref for Scratch {
    type Target = std::path::Path;
    fn deref(&self) -> &std::path::Path {
        self.0.path()
    }
}

impl AsRef<std::path::Path> for Scratch {
    fn as_ref(&self) -> &std::path::Path {
        self.0.path()
    }
}
