//! `docs/reliability.md` names a test for every P0 entry of the catalogue; this keeps the names
//! honest: each one is a test function somewhere in the workspace.

use std::path::{Path, PathBuf};

const P0_IDS: usize = 54;

#[test]
fn every_p0_row_names_tests_that_exist() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("docs/reliability.md")).unwrap();
    let section = doc
        .split("## The P0 tests")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("a P0 section");
    let rows: Vec<&str> = section
        .lines()
        .filter(|line| line.starts_with("| ") && !line.starts_with("| id "))
        .collect();
    assert_eq!(rows.len(), P0_IDS, "one row per P0 entry");

    let mut sources = String::new();
    collect_rust_sources(root, &mut sources);
    for row in rows {
        let id = row.split('|').nth(1).unwrap().trim();
        let prefix = id.to_lowercase().replace('-', "_") + "_";
        let tests_cell = row.split('|').nth(2).unwrap();
        let names: Vec<&str> = tests_cell
            .split('`')
            .skip(1)
            .step_by(2)
            .map(|name| name.rsplit("::").next().unwrap())
            .filter(|name| name.starts_with(&prefix))
            .collect();
        assert!(!names.is_empty(), "{id}: no test named {prefix}…");
        for name in names {
            assert!(
                sources.contains(&format!("fn {name}(")),
                "{id}: test {name} not found in the workspace"
            );
        }
    }
}

fn collect_rust_sources(dir: &Path, out: &mut String) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path: PathBuf = entry.path();
        let name = entry.file_name();
        if name == "target" || name == "node_modules" || name.to_string_lossy().starts_with('.') {
            continue;
        }
        if path.is_dir() {
            collect_rust_sources(&path, out);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            out.push_str(&std::fs::read_to_string(&path).unwrap());
        }
    }
}
