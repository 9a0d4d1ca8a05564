//! Helpers shared by the command-line tests.

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
