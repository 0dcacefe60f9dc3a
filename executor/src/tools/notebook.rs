//! `NotebookEdit`: replace, insert or delete one cell of a Jupyter notebook (docs/agent.md §6.3).
//!
//! The path goes through the same filesystem capability as `Write` (beneath a root, no symlinks,
//! no hard-linked files); the notebook is loaded whole only up to the 10 MiB file limit, and its
//! JSON nesting is bounded by the parser, so a hostile notebook costs bounded work
//! (reliability TOOL-31).

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Map, Value, json};

use super::files::{FileEnv, check_raw_path, resolve_path};
use super::output::{failure, success};
use super::regular_file::write_text;
use super::{Tool, ToolCheck, ToolContext, ToolEffect, ToolOutcome};
use crate::provider::ToolSpec;

pub const NOTEBOOK_EDIT_TOOL: &str = "NotebookEdit";

#[derive(Debug)]
pub struct NotebookEditTool(pub Arc<FileEnv>);

fn notebook_path(input: &Value) -> &str {
    input
        .get("notebook_path")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

fn field<'a>(input: &'a Value, key: &str) -> Option<&'a str> {
    input.get(key).and_then(Value::as_str)
}

#[async_trait]
impl Tool for NotebookEditTool {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: NOTEBOOK_EDIT_TOOL.to_owned(),
            description: "Replaces, inserts or deletes one cell of a Jupyter notebook (.ipynb). \
                `cell_id` is the cell's `id`; `insert` puts the new cell after it (first without \
                one) and needs `cell_type`."
                .to_owned(),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "notebook_path": { "type": "string", "minLength": 1 },
                    "cell_id": { "type": "string" },
                    "new_source": { "type": "string" },
                    "cell_type": { "type": "string", "enum": ["code", "markdown"] },
                    "edit_mode": { "type": "string", "enum": ["replace", "insert", "delete"] },
                },
                "required": ["notebook_path", "new_source"],
                "additionalProperties": false,
            }),
        }
    }

    fn effect(&self) -> ToolEffect {
        ToolEffect::Edit
    }

    fn check(&self, input: &Value) -> Result<ToolCheck, String> {
        check_raw_path(&self.0, "notebook_path", notebook_path(input))
    }

    fn approval_title(&self, input: &Value) -> String {
        let mode = field(input, "edit_mode").unwrap_or("replace");
        format!("Edit notebook {} ({mode})", notebook_path(input))
    }

    async fn run(&self, input: Value, _context: ToolContext) -> ToolOutcome {
        let shown = notebook_path(&input);
        let path = match resolve_path(&self.0, "notebook_path", shown) {
            Ok(path) => path,
            Err(error) => return failure(error),
        };
        let text = match self.0.read_for_edit(&path, shown).await {
            Ok(text) => text,
            Err(error) => return failure(error),
        };
        let mut notebook: Value = match serde_json::from_str(&text) {
            Ok(notebook) => notebook,
            Err(error) => return failure(format!("Invalid notebook JSON: {error}")),
        };
        let edited = match edit(&mut notebook, &input) {
            Ok(edited) => edited,
            Err(error) => return failure(error),
        };
        let mut written = serde_json::to_string_pretty(&notebook).unwrap_or_default();
        written.push('\n');
        match write_text(self.0.fs.clone(), path.clone(), shown.into(), written).await {
            Ok(()) => {
                let message = format!("Successfully {edited} cell in {}", path.display());
                success(Value::String(message.clone()), message)
            }
            Err(error) => failure(error),
        }
    }
}

/// Applies the edit to the parsed notebook; returns the verb of the success message.
fn edit(notebook: &mut Value, input: &Value) -> Result<&'static str, String> {
    let Some(cells) = notebook.get_mut("cells").and_then(Value::as_array_mut) else {
        return Err("Invalid notebook format: no cells array found".to_owned());
    };
    let cell_id = field(input, "cell_id");
    let found = cell_id.and_then(|id| {
        cells
            .iter()
            .position(|cell| cell.get("id").and_then(Value::as_str) == Some(id))
    });
    let not_found = || format!("Cell with ID \"{}\" not found", cell_id.unwrap_or_default());
    let source = source_lines(field(input, "new_source").unwrap_or_default());
    let cell_type = field(input, "cell_type");
    match field(input, "edit_mode").unwrap_or("replace") {
        "insert" => {
            let Some(cell_type) = cell_type else {
                return Err("cell_type is required for insert operation".to_owned());
            };
            let mut cell = Map::new();
            cell.insert("cell_type".to_owned(), Value::from(cell_type));
            // nbformat 4.5 wants an id on every cell.
            cell.insert("id".to_owned(), Value::from(agent_runtime::ids::nanoid()));
            cell.insert("metadata".to_owned(), json!({}));
            cell.insert("source".to_owned(), source);
            if cell_type == "code" {
                cell.insert("execution_count".to_owned(), Value::Null);
                cell.insert("outputs".to_owned(), json!([]));
            }
            let at = found.map_or(0, |index| index + 1);
            cells.insert(at, Value::Object(cell));
            Ok("inserted")
        }
        "delete" => {
            let index = found.ok_or_else(not_found)?;
            cells.remove(index);
            Ok("deleted")
        }
        _ => {
            let index = found.ok_or_else(not_found)?;
            let Some(cell) = cells[index].as_object_mut() else {
                return Err(not_found());
            };
            cell.insert("source".to_owned(), source);
            if let Some(cell_type) = cell_type {
                cell.insert("cell_type".to_owned(), Value::from(cell_type));
            }
            Ok("replaced")
        }
    }
}

/// A cell's `source` as nbformat stores it: one string per line, each but the last keeping its
/// `\n`.
fn source_lines(text: &str) -> Value {
    let pieces: Vec<&str> = text.split('\n').collect();
    let last = pieces.len() - 1;
    pieces
        .iter()
        .enumerate()
        .map(|(index, line)| match index < last {
            true => Value::String(format!("{line}\n")),
            false => Value::String((*line).to_owned()),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn notebook() -> Value {
        json!({"cells": [
            {"cell_type": "markdown", "id": "a", "metadata": {}, "source": ["# Title"]},
            {"cell_type": "code", "id": "b", "metadata": {}, "source": ["x = 1"],
             "execution_count": 3, "outputs": []}
        ], "metadata": {}, "nbformat": 4, "nbformat_minor": 5})
    }

    #[test]
    fn replace_sets_the_source_split_in_lines_and_the_type_when_given() {
        let mut nb = notebook();
        let input = json!({"cell_id": "b", "new_source": "y = 2\nprint(y)\n", "cell_type": "code"});
        assert_eq!(edit(&mut nb, &input), Ok("replaced"));
        assert_eq!(
            nb["cells"][1]["source"],
            json!(["y = 2\n", "print(y)\n", ""])
        );
        assert_eq!(nb["cells"][1]["execution_count"], 3);
    }

    #[test]
    fn insert_puts_a_new_cell_after_the_anchor_or_first_and_needs_a_type() {
        let mut nb = notebook();
        let input =
            json!({"cell_id": "a", "new_source": "z", "edit_mode": "insert", "cell_type": "code"});
        assert_eq!(edit(&mut nb, &input), Ok("inserted"));
        let cell = &nb["cells"][1];
        assert_eq!(cell["source"], json!(["z"]));
        assert_eq!(cell["outputs"], json!([]));
        assert_eq!(cell["execution_count"], Value::Null);
        assert!(cell["id"].as_str().is_some_and(|id| !id.is_empty()));
        let first = json!({"cell_id": "nope", "new_source": "m", "edit_mode": "insert", "cell_type": "markdown"});
        assert_eq!(edit(&mut nb, &first), Ok("inserted"));
        assert_eq!(nb["cells"][0]["source"], json!(["m"]));
        assert!(nb["cells"][0].get("outputs").is_none());
        let untyped = json!({"new_source": "m", "edit_mode": "insert"});
        assert_eq!(
            edit(&mut nb, &untyped),
            Err("cell_type is required for insert operation".to_owned())
        );
    }

    #[test]
    fn delete_and_replace_need_a_known_cell_and_a_notebook_needs_cells() {
        let mut nb = notebook();
        let input = json!({"cell_id": "a", "new_source": "", "edit_mode": "delete"});
        assert_eq!(edit(&mut nb, &input), Ok("deleted"));
        assert_eq!(nb["cells"].as_array().unwrap().len(), 1);
        assert_eq!(
            edit(&mut nb, &input),
            Err("Cell with ID \"a\" not found".to_owned())
        );
        let mut not_a_notebook = json!({"worksheets": []});
        assert_eq!(
            edit(
                &mut not_a_notebook,
                &json!({"cell_id": "a", "new_source": ""})
            ),
            Err("Invalid notebook format: no cells array found".to_owned())
        );
    }
}
