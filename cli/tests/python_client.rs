//! Runs the Python client's own test suite (`clients/python/tests/`, pytest) against this build of
//! the server binary, so the Python client is tested in CI with everything else.

use std::path::Path;
use std::process::Command;

#[test]
fn the_python_client_passes_its_tests_against_the_real_server() {
    let client_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../clients/python");
    let tests = client_dir.join("tests");
    assert!(
        std::fs::read_dir(&tests)
            .expect("clients/python/tests exists")
            .any(|entry| {
                let name = entry.unwrap().file_name();
                let name = name.to_string_lossy();
                name.starts_with("test_") && name.ends_with(".py")
            }),
        "no Python tests found"
    );
    let output = Command::new("python3")
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"])
        .current_dir(&client_dir)
        // The package is tested from its source tree, not from an installed copy.
        .env("PYTHONPATH", client_dir.join("src"))
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("AGENT_RUNTIME_BIN", env!("CARGO_BIN_EXE_agent-runtime"))
        .output()
        .expect("python3 must be installed (scripts/test.sh installs httpx and pytest for it)");
    let report = String::from_utf8_lossy(&output.stdout);
    let errors = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the Python client's tests failed:\n{report}\n{errors}"
    );
    let summary = report.lines().last().unwrap_or_default();
    assert!(
        summary.contains(" passed")
            && !summary.contains("failed")
            && !summary.contains("error")
            && !summary.contains("skipped")
            && !summary.starts_with("0 passed"),
        "unexpected test report:\n{report}"
    );
}
