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
