//! A workspace's changes against its base, tracked and untracked alike, without touching the
//! workspace's own index: the index is copied (for its stat cache, so unchanged files are not
//! read again), everything is staged into the copy (`git add -A`, which honours `.gitignore`),
//! and the copy is compared with the base (`git diff --cached <base>`).

use std::path::Path;

use serde::Serialize;

use super::git::{self, GitError};

/// What changed in a workspace, file by file (the JSON form of the diff endpoint).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DiffSummary {
    /// The commit the changes are measured from.
    pub base: String,
    pub files: Vec<FileChange>,
    pub additions: u64,
    pub deletions: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct FileChange {
    pub path: String,
    /// `added`, `modified`, `deleted` or `typeChanged`.
    pub status: String,
    /// Lines added and deleted; `None` for a binary file.
    pub additions: Option<u64>,
    pub deletions: Option<u64>,
}

/// A copy of the workspace's index with every change staged, removed when dropped.
struct StagedIndex {
    file: tempfile::NamedTempFile,
}

impl StagedIndex {
    async fn new(dir: &Path) -> Result<StagedIndex, GitError> {
        let index = git::run(dir, &["rev-parse", "--git-path", "index"], &[]).await?;
        let index = dir.join(index.trim());
        let file = tempfile::NamedTempFile::new().map_err(GitError::Io)?;
        if index.is_file() {
            std::fs::copy(&index, file.path()).map_err(GitError::Io)?;
        }
        let staged = StagedIndex { file };
        git::run(dir, &["add", "-A"], &staged.env()).await?;
        Ok(staged)
    }

    fn env(&self) -> [(&'static str, &Path); 1] {
        [("GIT_INDEX_FILE", self.file.path())]
    }
}

/// The patch (`text/x-diff`) from `base` to the workspace as it is now.
pub async fn patch(dir: &Path, base: &str) -> Result<String, GitError> {
    let staged = StagedIndex::new(dir).await?;
    let args = [
        "diff",
        "--no-ext-diff",
        "--no-textconv",
        "--cached",
        "--no-renames",
        "--binary",
        base,
        "--",
    ];
    git::run(dir, &args, &staged.env()).await
}

/// Each file changed from `base` to the workspace as it is now, with its line counts.
pub async fn summary(dir: &Path, base: &str) -> Result<DiffSummary, GitError> {
    let staged = StagedIndex::new(dir).await?;
    let env = staged.env();
    let numstat = [
        "diff",
        "--no-ext-diff",
        "--no-textconv",
        "--cached",
        "--no-renames",
        "--numstat",
        "-z",
        base,
        "--",
    ];
    let numstat = git::run(dir, &numstat, &env).await?;
    let statuses = [
        "diff",
        "--no-ext-diff",
        "--no-textconv",
        "--cached",
        "--no-renames",
        "--name-status",
        "-z",
        base,
        "--",
    ];
    let statuses = git::run(dir, &statuses, &env).await?;
    Ok(parse_summary(base, &numstat, &statuses))
}

/// Joins `--numstat -z` (`added\tdeleted\tpath\0`, `-` for a binary file) and `--name-status -z`
/// (`S\0path\0`) output, both without renames.
fn parse_summary(base: &str, numstat: &str, statuses: &str) -> DiffSummary {
    let mut status_of = std::collections::HashMap::new();
    let mut parts = statuses.split('\0').filter(|p| !p.is_empty());
    while let (Some(status), Some(path)) = (parts.next(), parts.next()) {
        let status = match status {
            "A" => "added",
            "D" => "deleted",
            "T" => "typeChanged",
            _ => "modified",
        };
        status_of.insert(path.to_owned(), status);
    }
    let mut files = Vec::new();
    for record in numstat.split('\0').filter(|r| !r.is_empty()) {
        let mut fields = record.splitn(3, '\t');
        let (Some(added), Some(deleted), Some(path)) =
            (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        files.push(FileChange {
            path: path.to_owned(),
            status: status_of
                .get(path)
                .copied()
                .unwrap_or("modified")
                .to_owned(),
            additions: added.parse().ok(),
            deletions: deleted.parse().ok(),
        });
    }
    DiffSummary {
        base: base.to_owned(),
        additions: files.iter().filter_map(|f| f.additions).sum(),
        deletions: files.iter().filter_map(|f| f.deletions).sum(),
        files,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numstat_and_statuses_are_joined_by_path() {
        let numstat = "3\t0\tnew.txt\0-\t-\tlogo.png\x001\t2\tsrc/a.rs\0";
        let statuses = "A\0new.txt\0A\0logo.png\0M\0src/a.rs\0";
        let summary = parse_summary("abc", numstat, statuses);
        assert_eq!(summary.additions, 4);
        assert_eq!(summary.deletions, 2);
        let status: Vec<(&str, &str)> = summary
            .files
            .iter()
            .map(|f| (f.path.as_str(), f.status.as_str()))
            .collect();
        assert_eq!(
            status,
            [
                ("new.txt", "added"),
                ("logo.png", "added"),
                ("src/a.rs", "modified")
            ]
        );
        assert_eq!(summary.files[1].additions, None, "binary");
    }
}
