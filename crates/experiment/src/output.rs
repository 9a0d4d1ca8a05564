//! Result files that are never half-written. A file goes to a unique temporary name
//! beside its place and is renamed over it. A results folder is written whole into a
//! unique temporary folder beside its place and swapped in with one atomic exchange, so
//! the folder always holds one run's complete set, old or new, never a mix; a lock beside
//! it (released by the kernel if the writer dies, removed by a writer that finishes)
//! makes a second writer at the same time fail with a message instead of interleaving.

use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// A name beside `path` no other writer uses: `.{name}.{pid}.{n}.{what}`.
fn sibling(path: &Path, what: &str) -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let name = path.file_name().map(OsString::from).unwrap_or_default();
    let mut hidden = OsString::from(".");
    hidden.push(name);
    hidden.push(format!(".{}.{n}.{what}", std::process::id()));
    path.with_file_name(hidden)
}

/// Writes `data` to `path` atomically: a uniquely named file beside it, then a rename.
pub fn write_file(path: &Path, data: &[u8]) -> io::Result<()> {
    let tmp = sibling(path, "tmp");
    std::fs::write(&tmp, data).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })?;
    std::fs::rename(&tmp, path)
}

/// Replaces the folder `dir` by one holding exactly `files` (name, contents), atomically:
/// readers, and a run killed at any point, see the old complete folder or the new one.
/// An existing `dir` may hold only files named in `replaceable` (what an earlier run
/// wrote), so no other file is ever deleted. Fails with `WouldBlock` if another process
/// is writing `dir` at the same moment.
pub fn write_folder(dir: &Path, files: &[(&str, Vec<u8>)], replaceable: &[&str]) -> io::Result<()> {
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)?;
    }
    let _lock = FolderLock::take(dir)?;
    if dir.exists() {
        let foreign = other_files(dir, replaceable)?;
        if !foreign.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!(
                    "the folder holds other files ({}); give a new folder, or one a run wrote",
                    foreign.join(", ")
                ),
            ));
        }
    }
    remove_abandoned(dir)?;
    let fresh = sibling(dir, "new");
    std::fs::create_dir(&fresh)?;
    let written = files
        .iter()
        .try_for_each(|(name, data)| std::fs::write(fresh.join(name), data));
    let swapped = written.and_then(|()| swap_in(&fresh, dir));
    if swapped.is_err() {
        let _ = std::fs::remove_dir_all(&fresh);
    }
    swapped
}

/// The names in the existing folder `dir` other than `ours` (what a fabricsim command
/// writes there), sorted: files a command must not write among.
pub fn other_files(dir: &Path, ours: &[&str]) -> io::Result<Vec<String>> {
    let mut foreign: Vec<String> = std::fs::read_dir(dir)?
        .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect::<io::Result<_>>()?;
    foreign.retain(|name| !ours.contains(&name.as_str()));
    foreign.sort();
    Ok(foreign)
}

/// Removes the temporary folders of writers that died before swapping theirs in: with the
/// lock held, every `.{name}.*.new` beside `dir` is one.
fn remove_abandoned(dir: &Path) -> io::Result<()> {
    let parent = match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let mut prefix = OsString::from(".");
    prefix.push(dir.file_name().unwrap_or_default());
    let prefix = format!("{}.", prefix.to_string_lossy());
    for entry in std::fs::read_dir(parent)? {
        let name = entry?.file_name().to_string_lossy().into_owned();
        if name.starts_with(&prefix) && name.ends_with(".new") {
            std::fs::remove_dir_all(parent.join(&name))?;
        }
    }
    Ok(())
}

/// The lock on a folder being written: `.{name}.lock` beside it, locked while this
/// lives and removed (still locked) when it is dropped, so nothing is left behind.
struct FolderLock {
    path: PathBuf,
    _file: std::fs::File,
}

impl FolderLock {
    /// Takes the lock, or fails with `WouldBlock` if another writer holds it. A lock file
    /// removed by its last holder between our open and our lock is not the lock any more:
    /// we open the one at the path again.
    fn take(dir: &Path) -> io::Result<FolderLock> {
        use std::os::unix::fs::MetadataExt;
        let path = dir.with_file_name(lock_name(dir));
        loop {
            let file = std::fs::File::options()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&path)?;
            file.try_lock().map_err(|e| match e {
                std::fs::TryLockError::WouldBlock => io::Error::new(
                    io::ErrorKind::WouldBlock,
                    "another fabricsim run is writing this folder now; this run's results were not written",
                ),
                std::fs::TryLockError::Error(e) => e,
            })?;
            let held = file.metadata()?;
            match std::fs::metadata(&path) {
                Ok(m) if m.ino() == held.ino() && m.dev() == held.dev() => {
                    return Ok(FolderLock { path, _file: file })
                }
                Ok(_) => continue,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            }
        }
    }
}

impl Drop for FolderLock {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// `.{name}.lock`, the lock file of folder `dir`.
fn lock_name(dir: &Path) -> OsString {
    let mut name = OsString::from(".");
    name.push(dir.file_name().unwrap_or_default());
    name.push(".lock");
    name
}

/// Puts the folder `fresh` at `dir`: a rename if `dir` does not exist, else an atomic
/// exchange of the two, after which the old folder (now at `fresh`) is removed.
fn swap_in(fresh: &Path, dir: &Path) -> io::Result<()> {
    if !dir.exists() {
        return std::fs::rename(fresh, dir);
    }
    exchange(fresh, dir)?;
    std::fs::remove_dir_all(fresh)
}

/// Swaps two existing paths in one step (Linux renameat2 with RENAME_EXCHANGE).
#[cfg(target_os = "linux")]
fn exchange(a: &Path, b: &Path) -> io::Result<()> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let c = |p: &Path| {
        CString::new(p.as_os_str().as_bytes())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a path with a NUL byte"))
    };
    let (a, b) = (c(a)?, c(b)?);
    // SAFETY: both pointers are valid NUL-terminated strings for the length of the call.
    #[allow(unsafe_code)]
    let rc = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Elsewhere: the old folder is moved aside first, so a crash between the two renames
/// leaves it beside `b` under a hidden name rather than mixed with the new one.
#[cfg(not(target_os = "linux"))]
fn exchange(a: &Path, b: &Path) -> io::Result<()> {
    let aside = sibling(b, "old");
    std::fs::rename(b, &aside)?;
    std::fs::rename(a, b)?;
    std::fs::rename(&aside, a)
}

/// Claims `dir` for a resumable job (a sweep, a tune) whose identity is `manifest`,
/// kept as DIR/`manifest_name`: a new folder (or an empty one) gets the manifest and
/// DIR/`items`; a folder with the same manifest is resumed; a folder with another
/// manifest, or with other files and none, is refused, naming `job`.
pub fn claim_folder(
    dir: &Path,
    manifest_name: &str,
    manifest: &str,
    items: &str,
    job: &str,
) -> Result<(), String> {
    let at = |e: io::Error| format!("--out {}: {e}", dir.display());
    let path = dir.join(manifest_name);
    // A job never writes among other files (as `run --out` never does).
    if !path.exists() && dir.exists() {
        let foreign = other_files(dir, &[]).map_err(at)?;
        if !foreign.is_empty() {
            return Err(format!(
                "--out {}: the folder holds other files ({}) and no {manifest_name}; give a new folder, or one a {job} wrote",
                dir.display(),
                foreign.join(", ")
            ));
        }
    }
    std::fs::create_dir_all(dir.join(items)).map_err(at)?;
    match std::fs::read_to_string(&path) {
        Ok(old) if old == manifest => Ok(()),
        Ok(_) => Err(format!(
            "--out {}: the folder holds a different {job} (its {manifest_name} differs); give a new folder",
            dir.display()
        )),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            write_file(&path, manifest.as_bytes()).map_err(at)
        }
        Err(e) => Err(at(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A test's scratch folder, removed when the test ends, pass or fail.
    struct Scratch(PathBuf);

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// A fresh scratch folder, and the results folder to write in it.
    fn folder(name: &str) -> (Scratch, PathBuf) {
        let d =
            std::env::temp_dir().join(format!("fabricsim-output-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let results = d.join("results");
        (Scratch(d), results)
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn a_new_set_replaces_the_old_one_whole() {
        let (_scratch, dir) = folder("replace");
        let ours = ["a.csv", "rates.csv"];
        write_folder(
            &dir,
            &[("a.csv", b"1".to_vec()), ("rates.csv", b"old".to_vec())],
            &ours,
        )
        .unwrap();
        write_folder(&dir, &[("a.csv", b"2".to_vec())], &ours).unwrap();
        // No stale file from the older set, nothing left beside the folder, not its lock.
        assert_eq!(names(&dir), ["a.csv"]);
        assert_eq!(std::fs::read(dir.join("a.csv")).unwrap(), b"2");
        assert_eq!(names(dir.parent().unwrap()), ["results"]);
    }

    #[test]
    fn a_second_writer_at_the_same_time_is_refused() {
        let (_scratch, dir) = folder("lock");
        let held = std::fs::File::create(dir.with_file_name(lock_name(&dir))).unwrap();
        held.lock().unwrap();
        // Another open file description: flock excludes it even within this process.
        let err = write_folder(&dir, &[("a.csv", b"1".to_vec())], &[]).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::WouldBlock);
        assert!(!dir.exists());
        held.unlock().unwrap();
        write_folder(&dir, &[("a.csv", b"1".to_vec())], &[]).unwrap();
    }

    #[test]
    fn a_folder_with_other_files_is_left_alone() {
        let (_scratch, dir) = folder("foreign");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("notes.txt"), b"mine").unwrap();
        let err = write_folder(&dir, &[("a.csv", b"1".to_vec())], &["a.csv"]).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AlreadyExists);
        assert!(err.to_string().contains("notes.txt"), "{err}");
        assert_eq!(names(&dir), ["notes.txt"]);
    }

    #[test]
    fn a_dead_writers_folder_is_cleared_by_the_next() {
        let (_scratch, dir) = folder("abandoned");
        let dead = dir.with_file_name(".results.4242.0.new");
        std::fs::create_dir_all(&dead).unwrap();
        std::fs::write(dead.join("flows.csv"), b"half").unwrap();
        write_folder(&dir, &[("a.csv", b"1".to_vec())], &[]).unwrap();
        assert!(!dead.exists());
        assert_eq!(names(dir.parent().unwrap()), ["results"]);
    }

    #[test]
    fn files_are_replaced_through_unique_names() {
        let (_scratch, dir) = folder("file");
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("run.pcap");
        write_file(&f, b"one").unwrap();
        write_file(&f, b"two").unwrap();
        assert_eq!(std::fs::read(&f).unwrap(), b"two");
        assert_eq!(names(&dir), ["run.pcap"]);
    }
}
