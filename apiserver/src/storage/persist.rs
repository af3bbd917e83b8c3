//! Persistence of the embedded API server's objects with `--data-dir`, in a redb database.
//!
//! Every write is committed before the API server answers it; on start the objects and the
//! resourceVersion counter are loaded back. Watch history is not persisted.

use std::path::Path;

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use serde_json::Value;

use super::{Durable, Key};
use krec_core::error::ApiError;

const OBJECTS: TableDefinition<&str, &[u8]> = TableDefinition::new("objects");
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
const RESOURCE_VERSION: &str = "resourceVersion";

/// The database file in a data directory.
pub const DB_FILE: &str = "krec-cluster.redb";

/// An open object database.
pub struct Persistence {
    db: Database,
}

fn storage_error(action: &str, err: impl std::fmt::Display) -> ApiError {
    ApiError::internal(format!("storage: {action}: {err}"))
}

impl Persistence {
    /// Open (or create) the database in `dir`.
    pub fn open(dir: &Path) -> Result<Self, ApiError> {
        std::fs::create_dir_all(dir)
            .map_err(|e| storage_error(&format!("creating {}", dir.display()), e))?;
        let path = dir.join(DB_FILE);
        let db = Database::create(&path)
            .map_err(|e| storage_error(&format!("opening {}", path.display()), e))?;
        let txn = db.begin_write().map_err(|e| storage_error("begin", e))?;
        txn.open_table(OBJECTS)
            .map_err(|e| storage_error("objects table", e))?;
        txn.open_table(META)
            .map_err(|e| storage_error("meta table", e))?;
        txn.commit().map_err(|e| storage_error("commit", e))?;
        Ok(Persistence { db })
    }

    /// Every stored object and the last resourceVersion.
    pub fn load(&self) -> Result<(u64, Vec<(Key, Value)>), ApiError> {
        let txn = self
            .db
            .begin_read()
            .map_err(|e| storage_error("begin read", e))?;
        let meta = txn
            .open_table(META)
            .map_err(|e| storage_error("meta table", e))?;
        let rv = meta
            .get(RESOURCE_VERSION)
            .map_err(|e| storage_error("read resourceVersion", e))?
            .map(|v| v.value())
            .unwrap_or(0);
        let table = txn
            .open_table(OBJECTS)
            .map_err(|e| storage_error("objects table", e))?;
        let mut objects = Vec::new();
        for entry in table.iter().map_err(|e| storage_error("scan", e))? {
            let (key, value) = entry.map_err(|e| storage_error("scan", e))?;
            let Some(key) = Key::decode(key.value()) else {
                tracing::warn!("storage: skipping a malformed key {:?}", key.value());
                continue;
            };
            match serde_json::from_slice(value.value()) {
                Ok(mut object) => {
                    // Written as clients see it; kept with `fieldsV1` as text, as every
                    // stored object.
                    crate::managed::compact(&mut object);
                    objects.push((key, object));
                }
                Err(err) => tracing::warn!("storage: skipping undecodable {key:?}: {err}"),
            }
        }
        Ok((rv, objects))
    }

    fn commit(&self, key: &Key, object: Option<&Value>, rv: u64) -> Result<(), ApiError> {
        let txn = self
            .db
            .begin_write()
            .map_err(|e| storage_error("begin", e))?;
        {
            let mut table = txn
                .open_table(OBJECTS)
                .map_err(|e| storage_error("objects table", e))?;
            let encoded = key.encode();
            match object {
                Some(object) => {
                    let bytes = krec_core::json::object_to_vec(object);
                    table
                        .insert(encoded.as_str(), bytes.as_slice())
                        .map_err(|e| storage_error("insert", e))?;
                }
                None => {
                    table
                        .remove(encoded.as_str())
                        .map_err(|e| storage_error("remove", e))?;
                }
            }
            let mut meta = txn
                .open_table(META)
                .map_err(|e| storage_error("meta table", e))?;
            meta.insert(RESOURCE_VERSION, rv)
                .map_err(|e| storage_error("resourceVersion", e))?;
        }
        txn.commit().map_err(|e| storage_error("commit", e))
    }
}

impl Durable for Persistence {
    fn put(&self, key: &Key, object: &Value, rv: u64) -> Result<(), ApiError> {
        self.commit(key, Some(object), rv)
    }

    fn remove(&self, key: &Key, rv: u64) -> Result<(), ApiError> {
        self.commit(key, None, rv)
    }
}
