//! What a file looked like when this session last read or wrote it, for the read-before-write
//! guard of `Write` and `Edit` (docs/agent.md §6.2): writing an existing file, or editing one,
//! needs a `Read` of it by this session first, and fails when the file changed since.
//!
//! The record is session state, kept where the conversation is: each `Read`, `Write` and `Edit`
//! leaves `{file: {path, fingerprint}}` in its tool message's `extensions.toolState` (never sent
//! to the model), so the guard survives a restart and a handoff, and a fork inherits what its
//! prefix read. The fingerprint is a SHA-256 of the file's device, inode, size and modification
//! time: it tells a changed file apart without showing any of them.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Arc;

use agent_runtime::protocol::JsonObject;
use agent_runtime::protocol::canonical::sha256_hex;
use agent_runtime::protocol::content::{ModelMessage, Role};
use serde_json::{Value, json};

/// The key of a tool's state inside its message's `extensions`.
pub const TOOL_STATE_EXTENSION: &str = "toolState";

/// A message's `extensions` holding a tool's state.
pub fn state_extensions(state: Value) -> JsonObject {
    let mut extensions = JsonObject::new();
    extensions.insert(TOOL_STATE_EXTENSION.to_owned(), state);
    extensions
}

/// The file's fingerprint now, `None` when it does not exist.
fn fingerprint(path: &Path) -> Option<String> {
    let meta = std::fs::symlink_metadata(path).ok()?;
    let stamp = format!(
        "{}:{}:{}:{}.{}",
        meta.dev(),
        meta.ino(),
        meta.size(),
        meta.mtime(),
        meta.mtime_nsec()
    );
    Some(sha256_hex(stamp.as_bytes()))
}

/// The state a call leaves after reading or writing `path`.
pub(super) fn state_of(path: &Path) -> Option<Value> {
    let fingerprint = fingerprint(path)?;
    Some(json!({ "file": { "path": path.display().to_string(), "fingerprint": fingerprint } }))
}

/// The fingerprint this session last recorded for `path`.
fn recorded(conversation: &[Arc<ModelMessage>], path: &Path) -> Option<String> {
    let path = path.display().to_string();
    conversation
        .iter()
        .rev()
        .filter(|message| message.role == Role::Tool)
        .filter_map(|message| message.extensions.as_ref()?.get(TOOL_STATE_EXTENSION))
        .map(|state| &state["file"])
        .find(|file| file["path"] == path.as_str())
        .and_then(|file| file["fingerprint"].as_str().map(str::to_owned))
}

/// `Ok` when `path` may be written: it does not exist, or this session read (or wrote) it and it
/// has not changed since. `verb` is `writing` or `editing`.
pub(super) fn may_write(
    conversation: &[Arc<ModelMessage>],
    path: &Path,
    verb: &str,
) -> Result<(), String> {
    let Some(now) = fingerprint(path) else {
        return Ok(());
    };
    match recorded(conversation, path) {
        None => Err(format!(
            "You must use the Read tool before {verb} this existing file."
        )),
        Some(seen) if seen != now => Err(format!(
            "The file changed since it was read. Read it again before {verb} it."
        )),
        Some(_) => Ok(()),
    }
}
