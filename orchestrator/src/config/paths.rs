//! Where the daemon keeps things: the data folder and what derives from it (the database, the
//! CLI's config dir, the threads' folders), made absolute at start.

use std::path::{Path, PathBuf};

use super::{Config, ConfigError};
use crate::files::folder::FolderRoots;

impl Config {
    /// Makes the folders and the database file absolute, against the directory the daemon
    /// started in. A relative one would otherwise be read against each child's own folder (the
    /// CLI runs in the thread's folder): its config dir, transcripts and deny rules would land
    /// under every thread instead of in one place.
    pub fn absolute_paths(&mut self) -> Result<(), ConfigError> {
        let absolute = |path: &Path| {
            std::path::absolute(path).map_err(|error| {
                ConfigError::Invalid(format!(
                    "cannot make `{}` absolute: {error}",
                    path.display()
                ))
            })
        };
        self.data_dir = absolute(&self.data_dir)?;
        for path in [
            &mut self.claude.config_dir,
            &mut self.claude.workdir,
            &mut self.workspaces.worktrees_dir,
        ]
        .into_iter()
        .flatten()
        {
            *path = absolute(path)?;
        }
        for root in &mut self.workspaces.roots {
            *root = absolute(root)?;
        }
        if let Some(db) = &self.db {
            if db != ":memory:" && !crate::store::is_postgres_url(db) {
                self.db = Some(absolute(Path::new(db))?.to_string_lossy().into_owned());
            }
        }
        Ok(())
    }

    /// The database location: `db` (a file path, `:memory:` or a `postgres://` URL), or
    /// `<data_dir>/harness.db`.
    pub fn db_path(&self) -> String {
        self.db.clone().unwrap_or_else(|| {
            self.data_dir
                .join("harness.db")
                .to_string_lossy()
                .into_owned()
        })
    }

    /// Where threads' worktrees are made: `workspaces.worktrees_dir`, or `<data_dir>/worktrees`.
    pub fn worktrees_dir(&self) -> PathBuf {
        self.workspaces
            .worktrees_dir
            .clone()
            .unwrap_or_else(|| self.data_dir.join("worktrees"))
    }

    pub fn claude_config_dir(&self) -> PathBuf {
        self.claude
            .config_dir
            .clone()
            .unwrap_or_else(|| self.data_dir.join("claude"))
    }

    pub fn claude_workdir(&self) -> PathBuf {
        self.claude
            .workdir
            .clone()
            .unwrap_or_else(|| self.data_dir.join("work"))
    }

    /// The directories threads' folders are made in, for `files::folder::anchors`.
    pub fn folder_roots(&self) -> FolderRoots {
        FolderRoots {
            threads: self.claude_workdir(),
            workspaces: self.workspaces.roots.clone(),
            worktrees: self.worktrees_dir(),
        }
    }
}

/// `$XDG_DATA_HOME/harness`, else `~/.local/share/harness`, else `./harness-data`.
pub(super) fn default_data_dir() -> PathBuf {
    if let Some(xdg) = std::env::var_os("XDG_DATA_HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(xdg).join("harness");
    }
    if let Some(home) = std::env::var_os("HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(home).join(".local/share/harness");
    }
    PathBuf::from("harness-data")
}
