//! `Read`, `Write` and `Edit`: file tools bounded by the filesystem capability. Every path goes
//! through [`FsCapability::resolve`] in `check` (so a refusal happens before any permission
//! prompt) and again in `run`, which then works on the resolved path only, opened beneath its
//! root without following symlinks ([`FsCapability::open`], TOOL-04).

use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::{Value, json};

use super::file_state::{may_write, state_of};
use super::fs::FsCapability;
use super::output::{failure, success, truncate};
use super::regular_file::{read_bytes, read_text, write_bytes, write_text};
use super::{Tool, ToolCheck, ToolContext, ToolEffect, ToolOutcome};
use crate::provider::ToolSpec;
use crate::tools::text;

/// Largest file `Read`, `Edit` and `NotebookEdit` load: 10 MiB.
pub(super) const MAX_FILE_BYTES: u64 = 10 * 1024 * 1024;

/// What the file tools share.
#[derive(Debug)]
pub struct FileEnv {
    pub fs: FsCapability,
    pub max_output_bytes: usize,
}

impl FileEnv {
    /// The whole UTF-8 file `real` (at most [`MAX_FILE_BYTES`]) that a tool edits in place.
    pub(super) async fn read_for_edit(
        &self,
        real: &std::path::Path,
        shown: &str,
    ) -> Result<String, String> {
        read_text(
            self.fs.clone(),
            real.to_path_buf(),
            shown.into(),
            MAX_FILE_BYTES,
        )
        .await
    }
}

fn path_input(input: &Value) -> &str {
    input
        .get("file_path")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// The resolved path of the call, inside the roots.
fn resolve_file(env: &FileEnv, input: &Value) -> Result<PathBuf, String> {
    resolve_path(env, "file_path", path_input(input))
}

/// `raw` (the argument `field`) resolved inside the roots, refused when it is a file with other
/// names (hard links). Errors name `raw`, never the resolved path (TOOL-26).
pub(super) fn resolve_path(env: &FileEnv, field: &str, raw: &str) -> Result<PathBuf, String> {
    let path = env.fs.resolve(field, raw)?;
    // Containment is by path, and a hard link is the same file under another name, which may lie
    // outside the roots (reliability TOOL-01/03): such files are neither read nor written through.
    // Checked here so the refusal comes before any prompt, and again on the opened file.
    if let Ok(meta) = std::fs::symlink_metadata(&path)
        && meta.is_file()
        && meta.nlink() > 1
    {
        return Err(format!(
            "{field} {raw} has {} hard links; another name of it may lie outside the allowed \
             roots, so file tools do not use it",
            meta.nlink()
        ));
    }
    Ok(path)
}

fn check_path(env: &FileEnv, input: &Value) -> Result<ToolCheck, String> {
    check_raw_path(env, "file_path", path_input(input))
}

/// The permission subject and affected path of a call on `raw`, the argument `field`.
pub(super) fn check_raw_path(env: &FileEnv, field: &str, raw: &str) -> Result<ToolCheck, String> {
    let path = resolve_path(env, field, raw)?;
    let shown = path.display().to_string();
    Ok(ToolCheck {
        subject: Some(shown.clone()),
        affected_paths: vec![shown],
    })
}

#[derive(Debug)]
pub struct ReadTool(pub Arc<FileEnv>);

/// Extensions of files that are not text: `Read` returns them base64-encoded.
const BINARY_EXTENSIONS: [&str; 32] = [
    "png", "jpg", "jpeg", "gif", "bmp", "ico", "webp", "tiff", "pdf", "zip", "gz", "tgz", "bz2",
    "xz", "7z", "rar", "tar", "jar", "class", "exe", "dll", "so", "dylib", "bin", "wasm", "mp3",
    "mp4", "wav", "ogg", "woff", "woff2", "ttf",
];

/// The longest line `Read` shows with line numbers, in characters.
const MAX_LINE_CHARS: usize = 2000;

fn is_binary_file(path: &std::path::Path) -> bool {
    path.extension()
        .and_then(|extension| extension.to_str())
        .is_some_and(|extension| {
            BINARY_EXTENSIONS.contains(&extension.to_ascii_lowercase().as_str())
        })
}

/// Lines `offset..offset + limit` (0-based) as `%6d→text`, numbered from 1, each cut at
/// [`MAX_LINE_CHARS`].
fn numbered_lines(text: &str, offset: usize, limit: Option<usize>) -> (String, usize) {
    let mut shown = String::new();
    let mut count = 0;
    for (index, line) in text
        .lines()
        .enumerate()
        .skip(offset)
        .take(limit.unwrap_or(usize::MAX))
    {
        let cut: String = line.chars().take(MAX_LINE_CHARS).collect();
        shown.push_str(&format!("{:>6}\u{2192}{cut}\n", index + 1));
        count += 1;
    }
    (shown, count)
}

#[async_trait]
impl Tool for ReadTool {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "Read".to_owned(),
            description:
                "Reads a file. Without `offset`/`limit` the text comes back as it is; with \
                them, the lines from `offset` (0-based) on, at most `limit` of them, each \
                numbered from 1. `encoding` base64 (or binary) returns the bytes base64-encoded, \
                as known binary files always are."
                    .to_owned(),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "file_path": { "type": "string", "minLength": 1 },
                    "offset": { "type": "integer", "minimum": 0 },
                    "limit": { "type": "integer", "minimum": 1 },
                    "encoding": { "type": "string", "enum": ["utf8", "base64", "binary"] },
                },
                "required": ["file_path"],
                "additionalProperties": false,
            }),
        }
    }

    fn effect(&self) -> ToolEffect {
        ToolEffect::ReadOnly
    }

    fn check(&self, input: &Value) -> Result<ToolCheck, String> {
        check_path(&self.0, input)
    }

    fn approval_title(&self, input: &Value) -> String {
        format!("Read {}", path_input(input))
    }

    async fn run(&self, input: Value, context: ToolContext) -> ToolOutcome {
        let path = match resolve_file(&self.0, &input) {
            Ok(path) => path,
            Err(error) => return failure(error),
        };
        let shown = path_input(&input);
        context.say(format!("Reading {}", path.display()));
        if std::fs::symlink_metadata(&path).is_err() {
            return failure(format!("File not found: {shown}"));
        }
        let read = read_bytes(
            self.0.fs.clone(),
            path.clone(),
            shown.into(),
            MAX_FILE_BYTES,
        );
        let bytes = match read.await {
            Ok(bytes) => bytes,
            Err(error) => return failure(error),
        };
        let limit = self.0.max_output_bytes;
        let encoding = input["encoding"].as_str().unwrap_or("utf8");
        if encoding != "utf8" || is_binary_file(&path) {
            let (content, _) = truncate(&BASE64.encode(&bytes), limit);
            let summary = format!("Read {} bytes of {} (base64)", bytes.len(), path.display());
            return with_state(success(Value::String(content), summary), &path);
        }
        let Ok(text) = String::from_utf8(bytes) else {
            return failure(format!(
                "{shown} is not UTF-8 text; read it with encoding \"base64\""
            ));
        };
        let offset = input["offset"].as_u64().map(|o| o as usize);
        let lines = input["limit"].as_u64().map(|l| l as usize);
        let (shown, summary) = match (offset, lines) {
            (None, None) => {
                let summary = format!("Read {} lines of {}", text.lines().count(), path.display());
                (text, summary)
            }
            (offset, lines) => {
                let (shown, count) = numbered_lines(&text, offset.unwrap_or(0), lines);
                (shown, format!("Read {count} lines of {}", path.display()))
            }
        };
        let (content, _) = truncate(&shown, limit);
        with_state(success(Value::String(content), summary), &path)
    }
}

/// `outcome` with the state of `path` recorded (what the session now knows of the file).
fn with_state(mut outcome: ToolOutcome, path: &std::path::Path) -> ToolOutcome {
    outcome.state = state_of(path);
    outcome
}

#[derive(Debug)]
pub struct WriteTool(pub Arc<FileEnv>);

#[async_trait]
impl Tool for WriteTool {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "Write".to_owned(),
            description: "Writes a file, replacing it if it exists (an existing file must have \
                been read with Read first, and not changed since). `encoding` base64 writes the \
                decoded bytes; missing parent directories are created unless \
                `create_directories` is false."
                .to_owned(),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "file_path": { "type": "string", "minLength": 1 },
                    "content": { "type": "string" },
                    "encoding": { "type": "string", "enum": ["utf8", "base64", "binary"] },
                    "create_directories": { "type": "boolean" },
                },
                "required": ["file_path", "content"],
                "additionalProperties": false,
            }),
        }
    }

    fn effect(&self) -> ToolEffect {
        ToolEffect::Edit
    }

    fn check(&self, input: &Value) -> Result<ToolCheck, String> {
        check_path(&self.0, input)
    }

    fn approval_title(&self, input: &Value) -> String {
        format!("Write {}", path_input(input))
    }

    async fn run(&self, input: Value, context: ToolContext) -> ToolOutcome {
        let path = match resolve_file(&self.0, &input) {
            Ok(path) => path,
            Err(error) => return failure(error),
        };
        if let Err(error) = may_write(&context.conversation, &path, "writing") {
            return failure(error);
        }
        let shown = path_input(&input);
        context.say(format!("Writing {}", path.display()));
        let content = text(&input, "content");
        let bytes = match input["encoding"].as_str().unwrap_or("utf8") {
            "utf8" => content.as_bytes().to_vec(),
            _ => match BASE64.decode(content.trim()) {
                Ok(bytes) => bytes,
                Err(_) => return failure("content is not valid base64"),
            },
        };
        if let Some(parent) = path.parent() {
            if input["create_directories"] == false && !parent.is_dir() {
                return failure(format!(
                    "the directory of {shown} does not exist (create_directories is false)"
                ));
            }
            let (fs, parent) = (self.0.fs.clone(), parent.to_path_buf());
            let named = format!("the directory of {shown}");
            let created =
                tokio::task::spawn_blocking(move || fs.create_dirs(&parent, &named)).await;
            match created {
                Ok(Ok(())) => {}
                Ok(Err(error)) => return failure(error),
                Err(_) => return failure("creating the directories was interrupted"),
            }
        }
        let size = bytes.len();
        match write_bytes(self.0.fs.clone(), path.clone(), shown.into(), bytes).await {
            Ok(()) => {
                let modified = std::fs::symlink_metadata(&path)
                    .and_then(|meta| meta.modified())
                    .ok()
                    .and_then(|time| time.duration_since(std::time::UNIX_EPOCH).ok())
                    .map_or(0, |since| since.as_millis() as u64);
                let output = json!({
                    "file_path": path.display().to_string(), "size": size, "modified": modified,
                });
                let summary = format!("Wrote {size} bytes to {}", path.display());
                with_state(success(output, summary), &path)
            }
            Err(error) => failure(error),
        }
    }
}

#[derive(Debug)]
pub struct EditTool(pub Arc<FileEnv>);

#[async_trait]
impl Tool for EditTool {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "Edit".to_owned(),
            description: "Replaces `old_string` with `new_string` in a file. `old_string` must occur exactly once unless `replace_all` is true.".to_owned(),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "file_path": { "type": "string", "minLength": 1 },
                    "old_string": { "type": "string", "minLength": 1 },
                    "new_string": { "type": "string" },
                    "replace_all": { "type": "boolean" },
                },
                "required": ["file_path", "old_string", "new_string"],
                "additionalProperties": false,
            }),
        }
    }

    fn effect(&self) -> ToolEffect {
        ToolEffect::Edit
    }

    fn check(&self, input: &Value) -> Result<ToolCheck, String> {
        if input.get("old_string") == input.get("new_string") {
            return Err("old_string and new_string are the same".to_owned());
        }
        check_path(&self.0, input)
    }

    fn approval_title(&self, input: &Value) -> String {
        format!("Edit {}", path_input(input))
    }

    async fn run(&self, input: Value, context: ToolContext) -> ToolOutcome {
        let path = match resolve_file(&self.0, &input) {
            Ok(path) => path,
            Err(error) => return failure(error),
        };
        if let Err(error) = may_write(&context.conversation, &path, "editing") {
            return failure(error);
        }
        let shown = path_input(&input);
        context.say(format!("Editing {}", path.display()));
        let text = match self.0.read_for_edit(&path, shown).await {
            Ok(text) => text,
            Err(error) => return failure(error),
        };
        let old = input
            .get("old_string")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let new = input
            .get("new_string")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let replace_all = input
            .get("replace_all")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let found: Vec<usize> = text.match_indices(old).map(|(at, _)| at).collect();
        let total = found.len();
        let (edited, replacements) = match (total, replace_all) {
            (0, _) => return failure(format!("old_string was not found in {shown}")),
            (1, _) => (text.replacen(old, new, 1), 1),
            (_, true) => (text.replace(old, new), total),
            (n, false) => {
                let lines: Vec<String> = found
                    .iter()
                    .map(|&at| (text[..at].matches('\n').count() + 1).to_string())
                    .collect();
                return failure(format!(
                    "old_string occurs {n} times in {shown} (at lines {}); give more context or \
                     set replace_all",
                    lines.join(", ")
                ));
            }
        };
        match write_text(self.0.fs.clone(), path.clone(), shown.into(), edited).await {
            Ok(()) => {
                let output = json!({
                    "file_path": path.display().to_string(),
                    "replacements": replacements,
                    "total_matches": total,
                });
                let summary = format!("Edited {} ({replacements} replacement(s))", path.display());
                with_state(success(output, summary), &path)
            }
            Err(error) => failure(error),
        }
    }
}
