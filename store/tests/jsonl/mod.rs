//! The embedded JSONL store.

mod catalogue;
mod compaction;
mod crash;
mod disk_full;
mod edge_files;
mod fuzz;
mod semantics;
mod store;

use std::fs::File;
use std::path::Path;

use agent_runtime_store::jsonl::LOCK_FILE;
use agent_runtime_store::{JsonlStore, StoreOptions};

/// The lock is free when this process can take it itself.
pub fn lock_is_free(dir: &Path) -> bool {
    let file = File::open(dir.join(LOCK_FILE)).unwrap();
    let free = file.try_lock().is_ok();
    if free {
        file.unlock().unwrap();
    }
    free
}

/// A JSONL store on `dir` with the default options, which must open.
pub async fn open_default(dir: &Path) -> JsonlStore {
    JsonlStore::open(dir, StoreOptions::default())
        .await
        .expect("the store opens")
}
