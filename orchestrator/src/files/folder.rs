//! Files out: what a thread's folder (or workspace) holds, and one of them, never anything
//! outside it.
//!
//! **The folder** is opened from the configured directory that holds it, its *anchor* (the
//! threads' folders, a workspace root, the worktrees folder: [`anchored`]), with `openat2`,
//! `RESOLVE_BENEATH` and `RESOLVE_NO_SYMLINKS` ([`Folder::open`]). A folder swapped for a
//! symlink since it was made (to `/etc`, to another thread's folder) is refused
//! ([`FolderError::Moved`]), not followed: its recorded path held no symlink below the anchor.
//! Everything below is resolved from that descriptor, never from a path again, so a swap while
//! we look changes nothing.
//!
//! **A file's path** is relative and made of plain names only (no `..`, no `.`, not absolute):
//! anything else is refused before the file system is asked. It is opened with
//! `RESOLVE_BENEATH` from the folder, so the kernel refuses any resolution that leaves it,
//! whatever symlinks the model made inside it.
//!
//! **Hard links**: a regular file with more than one link is neither served nor listed. A link
//! made in the folder to a file outside it (the daemon's database, another thread's file) is
//! that file, and would be read with the daemon's rights; a link cannot be told from the file it
//! links to, so none is taken. What a thread writes has one link; a workspace that holds
//! hard-linked files (a `pnpm` store, `cp -l`) does not serve those.
//!
//! **The listing** walks the folder by descriptor, each subfolder opened from its parent with
//! `O_NOFOLLOW`; it leaves out symlinks and `.git`, and stops at [`LIST_LIMIT`] entries
//! (`truncated` then says so).
//!
//! Everything refused below the folder reads as "not found".

use std::ffi::OsStr;
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use chrono::{DateTime, Utc};
use nix::dir::{Dir, Type};
use nix::errno::Errno;
use nix::fcntl::{openat2, OFlag, OpenHow, ResolveFlag};
use nix::sys::stat::{fstatat, FileStat, SFlag};
use serde::Serialize;

use crate::store::Workspace;

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

/// Why a thread's folder cannot be opened.
#[derive(Debug, thiserror::Error)]
pub enum FolderError {
    /// It is not where it was made: outside its anchors, or a symlink (or a file) in its place.
    /// The API answers 409 `workspace_unavailable`, as a turn would be refused.
    #[error("{0}")]
    Moved(String),
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// The directories a thread's folder may be made in, as configured (`Config::folder_roots`).
#[derive(Clone, Debug)]
pub struct FolderRoots {
    /// `claude.workdir`: the threads' own folders.
    pub threads: PathBuf,
    /// `workspaces.roots`: where a `path` workspace may lie.
    pub workspaces: Vec<PathBuf>,
    /// Where worktrees are made.
    pub worktrees: PathBuf,
}

/// The directories a thread's folder may lie under, by what it is: the threads' folders
/// (`claude.workdir`) for its own, `workspaces.roots` for a `path`, and the worktrees folder too
/// for a worktree; each as configured and resolved (a workspace's path was stored resolved). They
/// are the operator's, so a symlink in them is followed; below them, none is.
pub fn anchors(roots: &FolderRoots, workspace: Option<&Workspace>) -> Vec<PathBuf> {
    let candidates: Vec<PathBuf> = match workspace {
        None => vec![roots.threads.clone()],
        Some(Workspace::Path { .. }) => roots.workspaces.clone(),
        Some(Workspace::Worktree { .. }) => roots
            .workspaces
            .iter()
            .cloned()
            .chain(std::iter::once(roots.worktrees.clone()))
            .collect(),
    };
    candidates
        .into_iter()
        .flat_map(|dir| [dir.canonicalize().ok(), Some(dir)])
        .flatten()
        .collect()
}

/// The longest of `anchors` that `folder` lies under, and `folder` below it: where
/// [`Folder::open`] starts. `None`: under none of them.
pub fn anchored(folder: &Path, anchors: &[PathBuf]) -> Option<(PathBuf, PathBuf)> {
    anchors
        .iter()
        .filter_map(|anchor| {
            let below = folder.strip_prefix(anchor).ok()?;
            let plain = below
                .components()
                .all(|part| matches!(part, Component::Normal(_)));
            plain.then(|| (anchor.clone(), below.to_path_buf()))
        })
        .max_by_key(|(anchor, _)| anchor.as_os_str().len())
}

/// A thread's folder, open: what is listed or read in it is resolved from this descriptor.
#[derive(Debug)]
pub struct Folder {
    dir: File,
}

impl Folder {
    /// The folder `below` the directory `anchor`, followed through no symlink; `Ok(None)` when
    /// it does not exist (yet).
    pub fn open(anchor: &Path, below: &Path) -> Result<Option<Folder>, FolderError> {
        let anchor_dir = File::open(anchor)?;
        let how = OpenHow::new()
            .flags(OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC)
            .resolve(
                ResolveFlag::RESOLVE_BENEATH
                    | ResolveFlag::RESOLVE_NO_SYMLINKS
                    | ResolveFlag::RESOLVE_NO_MAGICLINKS,
            );
        let target = if below.as_os_str().is_empty() {
            Path::new(".")
        } else {
            below
        };
        match openat2(anchor_dir.as_raw_fd(), target, how) {
            // SAFETY: `openat2` just returned this descriptor; nothing else owns it.
            Ok(fd) => Ok(Some(Folder {
                dir: unsafe { File::from_raw_fd(fd) },
            })),
            Err(Errno::ENOENT) => Ok(None),
            Err(Errno::ELOOP | Errno::EXDEV | Errno::ENOTDIR) => Err(FolderError::Moved(format!(
                "{} is not the folder it was: a symlink or a file is in its place",
                anchor.join(below).display()
            ))),
            Err(errno) => Err(FolderError::Io(errno.into())),
        }
    }

    /// The regular files in the folder, by path (see the module's rules).
    pub fn list(&self) -> std::io::Result<FolderListing> {
        let mut files = Vec::new();
        let mut truncated = false;
        let mut pending = vec![(PathBuf::new(), self.dir.try_clone()?)];
        while let Some((relative, dir)) = pending.pop() {
            let mut entries = Dir::from(dir)?;
            let fd = entries.as_raw_fd();
            let mut subfolders = Vec::new();
            for entry in entries.iter() {
                let entry = entry?;
                let name = OsStr::from_bytes(entry.file_name().to_bytes());
                if name == "." || name == ".." {
                    continue;
                }
                let kind = match entry.file_type() {
                    Some(kind) => kind,
                    None => file_type(&fstatat(Some(fd), name, no_follow())?),
                };
                let path = relative.join(name);
                if kind == Type::Directory && name != ".git" {
                    subfolders.push(path);
                } else if kind == Type::File {
                    let Ok(stat) = fstatat(Some(fd), name, no_follow()) else {
                        continue; // gone since it was read
                    };
                    if stat.st_nlink > 1 || file_type(&stat) != Type::File {
                        continue;
                    }
                    if files.len() == LIST_LIMIT {
                        truncated = true;
                        break;
                    }
                    files.push(FolderFile {
                        path: path.to_string_lossy().into_owned(),
                        bytes: u64::try_from(stat.st_size).unwrap_or_default(),
                        modified: DateTime::from_timestamp(
                            stat.st_mtime,
                            u32::try_from(stat.st_mtime_nsec).unwrap_or_default(),
                        ),
                    });
                }
            }
            if truncated {
                break;
            }
            for path in subfolders {
                let name = path.file_name().unwrap_or_default();
                if let Some(sub) = open_subfolder(fd, name) {
                    pending.push((path, sub));
                }
            }
        }
        files.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(FolderListing { files, truncated })
    }

    /// The regular file `path` in the folder, open for reading, and its size; `None` when there
    /// is none there, the path (or a symlink on it) would leave the folder, or it has more than
    /// one link.
    pub fn file(&self, path: &str) -> Option<(File, u64)> {
        let relative = Path::new(path);
        let plain = !path.is_empty()
            && relative
                .components()
                .all(|part| matches!(part, Component::Normal(_)));
        if !plain {
            return None;
        }
        let how = OpenHow::new()
            .flags(OFlag::O_RDONLY | OFlag::O_CLOEXEC | OFlag::O_NOCTTY | OFlag::O_NONBLOCK)
            .resolve(ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_MAGICLINKS);
        let fd = openat2(self.dir.as_raw_fd(), relative, how).ok()?;
        // SAFETY: `openat2` just returned this descriptor; nothing else owns it.
        let file = unsafe { File::from_raw_fd(fd) };
        let meta = file.metadata().ok()?;
        let single = std::os::unix::fs::MetadataExt::nlink(&meta) == 1;
        (meta.is_file() && single).then_some((file, meta.len()))
    }
}

/// The subfolder `name` of the folder open as `parent`, unless it is a symlink (or gone).
fn open_subfolder(parent: RawFd, name: &OsStr) -> Option<File> {
    let how = OpenHow::new()
        .flags(OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC)
        .resolve(ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_SYMLINKS);
    let fd = openat2(parent, name, how).ok()?;
    // SAFETY: `openat2` just returned this descriptor; nothing else owns it.
    Some(unsafe { File::from_raw_fd(fd) })
}

fn no_follow() -> nix::fcntl::AtFlags {
    nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW
}

/// The kind of file `stat` describes, as a directory entry names it.
fn file_type(stat: &FileStat) -> Type {
    match SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT {
        SFlag::S_IFDIR => Type::Directory,
        SFlag::S_IFREG => Type::File,
        SFlag::S_IFLNK => Type::Symlink,
        _ => Type::Fifo,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

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

    fn open(dir: &tempfile::TempDir) -> Folder {
        Folder::open(dir.path(), Path::new("thread"))
            .unwrap()
            .expect("the folder")
    }

    #[test]
    fn the_listing_has_the_regular_files_and_no_links_or_git() {
        let (dir, _root) = folder();
        let listing = open(&dir).list().unwrap();
        let paths: Vec<&str> = listing.files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths, ["out/deep/data.csv", "report.md"]);
        assert_eq!(listing.files[1].bytes, 4);
        assert!(listing.files[1].modified.is_some());
        assert!(!listing.truncated);
        let missing = Folder::open(dir.path(), Path::new("missing")).unwrap();
        assert!(missing.is_none(), "no folder yet");
    }

    #[test]
    fn only_plain_paths_beneath_the_folder_open() {
        let (dir, _root) = folder();
        let folder = open(&dir);
        let (_, bytes) = folder.file("out/deep/data.csv").expect("a file inside");
        assert_eq!(bytes, 3);
        assert!(folder.file("inside").is_some(), "a link that stays inside");
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
            assert!(folder.file(refused).is_none(), "{refused}");
        }
    }

    /// #46: a folder swapped for a symlink to `/etc` served `/etc/passwd`.
    #[test]
    fn a_folder_swapped_for_a_symlink_is_refused_not_followed() {
        let (dir, root) = folder();
        std::fs::rename(&root, dir.path().join("moved")).unwrap();
        std::os::unix::fs::symlink("/etc", &root).unwrap();
        let refused = Folder::open(dir.path(), Path::new("thread"));
        assert!(matches!(refused, Err(FolderError::Moved(_))), "{refused:?}");
        // Deeper: a folder on the way swapped.
        std::fs::create_dir_all(dir.path().join("a/b")).unwrap();
        std::fs::rename(dir.path().join("a"), dir.path().join("a-real")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("a-real"), dir.path().join("a")).unwrap();
        let refused = Folder::open(dir.path(), Path::new("a/b"));
        assert!(matches!(refused, Err(FolderError::Moved(_))), "{refused:?}");
    }

    /// #46: a hard link to the daemon's database in a thread's folder was served.
    #[test]
    fn a_file_with_another_link_is_neither_served_nor_listed() {
        let (dir, root) = folder();
        let database = dir.path().join("harness.db");
        std::fs::write(&database, "SQLite format 3").unwrap();
        std::fs::hard_link(&database, root.join("copy.db")).unwrap();
        let folder = open(&dir);
        assert!(folder.file("copy.db").is_none());
        let listing = folder.list().unwrap();
        assert!(
            listing.files.iter().all(|f| f.path != "copy.db"),
            "{listing:?}"
        );
        assert!(folder.file("report.md").is_some(), "one link: served");
    }

    /// The threads' folders are where the operator put them, through a symlink too.
    #[test]
    fn a_threads_own_folder_is_anchored_as_configured_or_resolved() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("real/work/thr_1")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("real"), dir.path().join("data")).unwrap();
        let config = Config {
            data_dir: dir.path().join("data"),
            ..Config::default()
        };
        let anchors = anchors(&config.folder_roots(), None);
        let (anchor, below) = anchored(&config.claude_workdir().join("thr_1"), &anchors)
            .expect("under the configured path");
        assert_eq!(below, Path::new("thr_1"));
        assert!(Folder::open(&anchor, &below).unwrap().is_some());
        let resolved = dir.path().canonicalize().unwrap().join("real/work/thr_1");
        assert!(anchored(&resolved, &anchors).is_some(), "and resolved");
    }

    #[test]
    fn a_folder_is_anchored_under_the_longest_anchor_that_holds_it() {
        let anchors = [PathBuf::from("/srv"), PathBuf::from("/srv/work")];
        assert_eq!(
            anchored(Path::new("/srv/work/thr_1"), &anchors),
            Some((PathBuf::from("/srv/work"), PathBuf::from("thr_1")))
        );
        assert_eq!(anchored(Path::new("/etc"), &anchors), None);
        assert_eq!(
            anchored(Path::new("/srv/../etc"), &anchors),
            None,
            "plain names only"
        );
    }
}
