//! Files and folders only the daemon's user may read: the data directory and everything the
//! daemon creates in it hold every conversation.

use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// Creates `path` (and missing parents) as a folder of mode 0700, or narrows an existing one to
/// 0700.
pub fn create_dir(path: &Path) -> io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)?;
    narrow(path, 0o700)
}

/// Creates `path` as an empty file of mode 0600 when missing, or narrows an existing one to 0600.
/// SQLite gives its `-wal` and `-shm` files the mode of the database file, so a database created
/// through this stays private with its journal.
pub fn create_file(path: &Path) -> io::Result<()> {
    std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .open(path)?;
    narrow(path, 0o600)
}

/// Sets `mode` unless the permissions already are no wider.
fn narrow(path: &Path, mode: u32) -> io::Result<()> {
    let current = std::fs::metadata(path)?.permissions().mode() & 0o777;
    if current & !mode != 0 {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn folders_and_files_are_created_private_and_wide_ones_are_narrowed() {
        let dir = tempfile::tempdir().unwrap();
        let nested = dir.path().join("a/b");
        create_dir(&nested).unwrap();
        assert_eq!(mode(&nested), 0o700);

        let wide = dir.path().join("wide");
        std::fs::create_dir(&wide).unwrap();
        std::fs::set_permissions(&wide, std::fs::Permissions::from_mode(0o755)).unwrap();
        create_dir(&wide).unwrap();
        assert_eq!(mode(&wide), 0o700);

        let file = nested.join("db");
        create_file(&file).unwrap();
        assert_eq!(mode(&file), 0o600);
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        std::fs::write(&file, b"kept").unwrap();
        create_file(&file).unwrap();
        assert_eq!(mode(&file), 0o600);
        assert_eq!(std::fs::read(&file).unwrap(), b"kept", "contents untouched");
    }
}
