//! Files out: what a thread's folder (or workspace) holds, and one of them, never anything
//! outside it.
//!
//! A path is relative and made of plain names only (no `..`, no `.`, not absolute): anything else
//! is refused before the file system is asked. The file is then opened with `openat2` and
//! `RESOLVE_BENEATH` from the folder itself, so the kernel refuses any resolution that leaves
//! the folder, whatever symlinks the model made inside it or swaps in while we look (no check
//! and then open, which a swap could race). Everything refused reads as "not found".
//!
//! The listing walks the folder without following symlinks (a link is not listed), skips `.git`,
//! and stops at [`LIST_LIMIT`] entries (`truncated` then says so).

use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd};
use std::path::{Component, Path, PathBuf};

use chrono::{DateTime, Utc};
use nix::fcntl::{openat2, OFlag, OpenHow, ResolveFlag};
use serde::Serialize;

/// Most entries one listing returns.
pub const LIST_LIMIT: usize = 5_000;

/// One file of a thread's folder.
#[derive(Clone, Debug, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct FolderFile {
    /// Relative to the folder, `/`-separated.
    pub path: String,
    pub bytes: u64,
    pub modified: Option<DateTime<Utc>>,
}

/// A thread's files.
#[derive(Clone, Debug, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct FolderListing {
    /// Sorted by path.
    pub files: Vec<FolderFile>,
    /// More files than [`LIST_LIMIT`]: the rest are left out.
    pub truncated: bool,
}

/// The regular files under `root`, by path. A folder that does not exist (yet) has none.
pub fn list(root: &Path) -> std::io::Result<FolderListing> {
    let mut files = Vec::new();
    let mut truncated = false;
    let mut pending = vec![PathBuf::new()];
    while let Some(relative) = pending.pop() {
        let entries = match std::fs::read_dir(root.join(&relative)) {
            Ok(entries) => entries,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => continue,
            Err(err) => return Err(err),
        };
        for entry in entries {
            let entry = entry?;
            let kind = entry.file_type()?;
            let path = relative.join(entry.file_name());
            if kind.is_dir() {
                if entry.file_name() != ".git" {
                    pending.push(path);
                }
            } else if kind.is_file() {
                if files.len() == LIST_LIMIT {
                    truncated = true;
                    pending.clear();
                    break;
                }
                let meta = entry.metadata()?;
                files.push(FolderFile {
                    path: path.to_string_lossy().into_owned(),
                    bytes: meta.len(),
                    modified: meta.modified().ok().map(DateTime::<Utc>::from),
                });
            }
        }
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(FolderListing { files, truncated })
}

/// The regular file `path` under `root`, open for reading; `None` when there is none there, or
/// the path (or a symlink on it) would leave `root`.
pub fn open(root: &Path, path: &str) -> Option<(File, u64)> {
    let relative = Path::new(path);
    let plain = !path.is_empty()
        && relative
            .components()
            .all(|part| matches!(part, Component::Normal(_)));
    if !plain {
        return None;
    }
    let dir = File::open(root).ok()?;
    let how = OpenHow::new()
        .flags(OFlag::O_RDONLY | OFlag::O_CLOEXEC | OFlag::O_NOCTTY | OFlag::O_NONBLOCK)
        .resolve(ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_MAGICLINKS);
    let fd = openat2(dir.as_raw_fd(), relative, how).ok()?;
    // SAFETY: `openat2` just returned this descriptor; nothing else owns it.
    let file = unsafe { File::from_raw_fd(fd) };
    let meta = file.metadata().ok()?;
    meta.is_file().then_some((file, meta.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn folder() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("thread");
        std::fs::create_dir_all(root.join("out/deep")).unwrap();
        std::fs::create_dir_all(root.join(".git")).unwrap();
        std::fs::write(root.join("report.md"), "# hi").unwrap();
        std::fs::write(root.join("out/deep/data.csv"), "a,b").unwrap();
        std::fs::write(root.join(".git/config"), "x").unwrap();
        std::fs::write(dir.path().join("secret.txt"), "outside").unwrap();
        std::os::unix::fs::symlink(dir.path().join("secret.txt"), root.join("escape")).unwrap();
        std::os::unix::fs::symlink(dir.path(), root.join("up")).unwrap();
        std::os::unix::fs::symlink("report.md", root.join("inside")).unwrap();
        (dir, root)
    }

    #[test]
    fn the_listing_has_the_regular_files_and_no_links_or_git() {
        let (_dir, root) = folder();
        let listing = list(&root).unwrap();
        let paths: Vec<&str> = listing.files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths, ["out/deep/data.csv", "report.md"]);
        assert_eq!(listing.files[1].bytes, 4);
        assert!(!listing.truncated);
        assert!(list(&root.join("missing")).unwrap().files.is_empty());
    }

    #[test]
    fn only_plain_paths_beneath_the_folder_open() {
        let (_dir, root) = folder();
        let (_, bytes) = open(&root, "out/deep/data.csv").expect("a file inside");
        assert_eq!(bytes, 3);
        assert!(open(&root, "inside").is_some(), "a link that stays inside");
        for refused in [
            "../secret.txt",
            "out/../../secret.txt",
            "/etc/passwd",
            "escape",
            "up/secret.txt",
            "out",
            "./report.md",
            "",
            "missing",
        ] {
            assert!(open(&root, refused).is_none(), "{refused}");
        }
    }
}
