//! The README's curl walkthrough, run as written against the real binary.

use crate::support::*;

#[tokio::test]
async fn the_readme_curl_walkthrough_works_as_written_twice_in_a_row() {
    let dir = tempfile::tempdir().unwrap();
    let served = serve(dir.path());
    let first = run_readme_walkthrough(&served.base, &served.token);
    // A second run is a new session with its own answer, not a replay of the first.
    let second = run_readme_walkthrough(&served.base, &served.token);
    assert_ne!(first, second);
    stop(served);
}

/// The README's AG-UI and A2A block, run as written: an AG-UI run streams to its end and the
/// A2A message's task completes with the demo model's answer.
#[tokio::test]
async fn the_readme_protocols_block_works_as_written() {
    let dir = tempfile::tempdir().unwrap();
    let served = serve(dir.path());
    let stdout = run_readme_block("<!-- readme-protocols", &served.base, &served.token);
    for shown in [
        "\"type\":\"RUN_STARTED\"",
        "[demo] You said: hello",
        "\"type\":\"RUN_FINISHED\"",
        "\"protocolBinding\":\"JSONRPC\"",
        "\"state\":\"TASK_STATE_COMPLETED\"",
    ] {
        assert!(stdout.contains(shown), "{shown} in {stdout}");
    }
    stop(served);
}
