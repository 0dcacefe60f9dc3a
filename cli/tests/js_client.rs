//! Runs the browser client's own test suite (`clients/js/test/`, node's test runner) against this
//! build of the server binary, so the JavaScript client is tested in CI with everything else.

use std::path::Path;
use std::process::Command;

#[test]
fn the_javascript_client_passes_its_tests_against_the_real_server() {
    let client_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../clients/js");
    let mut tests: Vec<_> = std::fs::read_dir(client_dir.join("test"))
        .expect("clients/js/test exists")
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.to_string_lossy().ends_with(".test.js"))
        .collect();
    tests.sort();
    assert!(!tests.is_empty(), "no JavaScript tests found");
    let output = Command::new("node")
        .arg("--test")
        // The summary checked below is TAP's; name the reporter rather than rely on the default.
        .arg("--test-reporter=tap")
        .args(&tests)
        .current_dir(&client_dir)
        .env("AGENT_RUNTIME_BIN", env!("CARGO_BIN_EXE_agent-runtime"))
        .output()
        .expect("node must be installed (scripts/test.sh installs it)");
    let report = String::from_utf8_lossy(&output.stdout);
    let errors = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the JavaScript client's tests failed:\n{report}\n{errors}"
    );
    assert!(
        report.contains("# fail 0") && !report.contains("# pass 0"),
        "unexpected test report:\n{report}"
    );
}
