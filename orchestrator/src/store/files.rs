//! The bytes of images and documents (`crate::files` owns the rules); the facade of
//! `harness_db::FileQueries`.

use super::{on_db, Db, FileQueries, FileRow, NewFile, Store, StoreError};

impl Store {
    /// Stores `file` unless its id is stored already; the stored row either way.
    pub async fn insert_file(&self, file: NewFile<'_>) -> Result<FileRow, StoreError> {
        let _timer = self.metrics.time("insert_file");
        on_db!(self, db => db.insert_file(file).await)
    }

    /// The file `id` without its bytes.
    pub async fn file(&self, id: &str) -> Result<Option<FileRow>, StoreError> {
        let _timer = self.metrics.time("file");
        on_db!(self, db => db.file(id).await)
    }

    /// The bytes of the file `id`.
    pub async fn file_data(&self, id: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let _timer = self.metrics.time("file_data");
        on_db!(self, db => db.file_data(id).await)
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::store_tests;
    use crate::store::NewFile;

    fn file<'a>(id: &'a str, owner: &'a str, data: &'a [u8]) -> NewFile<'a> {
        NewFile {
            id,
            owner,
            sha256: "abc",
            media_type: "image/png",
            data,
        }
    }

    store_tests! {
        /// A file is stored once by its id: a second insert keeps the first bytes; its row and
        /// its bytes read back apart.
        async fn a_file_is_stored_once_and_reads_back(store: sqlite_memory) {
            let data = vec![7u8; 70_000];
            let first = store.insert_file(file("file_a", "acme", &data)).await.unwrap();
            assert_eq!((first.bytes, first.owner.as_str()), (70_000, "acme"));
            let again = store.insert_file(file("file_a", "acme", b"other")).await.unwrap();
            assert_eq!(again, first);
            assert_eq!(store.file_data("file_a").await.unwrap(), Some(data));
            assert_eq!(store.file("file_b").await.unwrap(), None);
            assert_eq!(store.file_data("file_b").await.unwrap(), None);
        }
    }
}
