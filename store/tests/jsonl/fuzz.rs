//! JSONL-13: a seeded structured fuzzer of the JSONL loader. Two real journals written by the
//! store (the appended history and its compacted snapshot, each with several sessions, keyed
//! events, command receipts, transcripts and durable journal events) are damaged one way per
//! case: one byte changed, cut at a random point, one line deleted or one line duplicated; a few
//! hundred files of random bytes follow.
//!
//! Every reopen must answer, without panicking, exactly one of: loaded; loaded with the last
//! (unterminated) line skipped; `RUNTIME_STORE_CORRUPT_JOURNAL` naming `file:line`. A line that
//! is not JSON is reported at exactly its line when it is the first changed one, and lines before
//! the first change never are. Whatever loads is compacted into a journal that loads back to the
//! same state, so a damaged journal the store accepted cannot brick the next start.
//!
//! No fuzzing dependency: the generator is a fixed-seed xorshift, so a failure names its case and
//! mutation and replays exactly.

use std::fs;
use std::path::Path;

use super::open_default;
use crate::support::{T, event, exercise_every_port, lease_of, session};
use agent_runtime_store::jsonl::JOURNAL_FILE;
use agent_runtime_store::testing::rng::SeededRng as Rng;
use agent_runtime_store::*;
use serde_json::Value;

const SEED: u64 = 0x006a_736f_6e6c_3133;
const STRUCTURED_CASES_PER_JOURNAL: u64 = 1_000;
const RANDOM_FILES: u64 = 300;

/// The fuzzer's own draws on top of the seeded generator.
trait Draws {
    fn byte(&mut self) -> u8;
}

impl Draws for Rng {
    /// A byte, half the time one that matters to JSON or to line framing.
    fn byte(&mut self) -> u8 {
        const TELLING: &[u8] = b"\n\r\"{}[]:,\\ 019-.aetnfu\xff\x00";
        if self.below(2) == 0 {
            TELLING[self.index(TELLING.len())]
        } else {
            self.below(256) as u8
        }
    }
}

/// A journal as the loader frames it: newline-terminated lines (without the `\n`) and the
/// unterminated rest.
struct Lines<'a> {
    complete: Vec<&'a [u8]>,
    tail: &'a [u8],
}

fn lines(bytes: &[u8]) -> Lines<'_> {
    let mut complete: Vec<&[u8]> = bytes.split(|b| *b == b'\n').collect();
    let tail = complete.pop().unwrap_or_default();
    Lines { complete, tail }
}

impl Lines<'_> {
    /// The first (1-based) line that is not empty and not JSON.
    fn first_not_json(&self) -> Option<usize> {
        let broken =
            |line: &&[u8]| !line.is_empty() && serde_json::from_slice::<Value>(line).is_err();
        self.complete.iter().position(broken).map(|index| index + 1)
    }

    /// The first (1-based) complete line that differs from `original`'s line of that number.
    fn first_change_from(&self, original: &Lines<'_>) -> usize {
        let same = |(index, line): &(usize, &&[u8])| original.complete.get(*index) == Some(*line);
        let unchanged = self.complete.iter().enumerate().take_while(same).count();
        unchanged + 1
    }
}

/// What reopening a directory answered.
#[derive(Debug)]
enum Outcome {
    Loaded(Vec<JournalEntry>),
    CorruptAt(usize),
}

async fn reopen(dir: &Path) -> Outcome {
    let journal = dir.join(JOURNAL_FILE);
    match JsonlStore::open(dir, StoreOptions::default()).await {
        Ok(store) => {
            let state = store.snapshot().unwrap();
            store.close().await.unwrap();
            Outcome::Loaded(state)
        }
        Err(StoreError::Runtime {
            code: RuntimeErrorCode::CorruptJournal,
            message,
        }) => {
            let named = format!("{}:", journal.display());
            let line = message
                .strip_prefix(&named)
                .and_then(|rest| rest.split(' ').next())
                .and_then(|number| number.parse().ok());
            Outcome::CorruptAt(line.unwrap_or_else(|| panic!("no file:line in {message:?}")))
        }
        Err(other) => panic!("neither loaded nor a corrupt journal: {other:?}"),
    }
}

/// A fresh directory, in memory where the system has one: every open compacts with two fsyncs,
/// which on a disk cost two thirds of the run, and this test is about parsing, not durability.
fn scratch_dir() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir()
        && let Ok(dir) = tempfile::tempdir_in(shm)
    {
        return dir;
    }
    tempfile::tempdir().unwrap()
}

/// Writes `bytes` as the journal of a fresh directory and reopens it.
async fn open_bytes(bytes: &[u8]) -> (tempfile::TempDir, Outcome) {
    let dir = scratch_dir();
    fs::write(dir.path().join(JOURNAL_FILE), bytes).unwrap();
    let outcome = reopen(dir.path()).await;
    (dir, outcome)
}

/// The three answers a reopen may give, counted so a run shows it reached each of them.
#[derive(Debug, Default)]
struct Tally {
    loaded: u64,
    tail_skipped: u64,
    corrupt: u64,
}

impl Tally {
    fn assert_each_seen(&self) {
        assert!(
            self.loaded > 0 && self.tail_skipped > 0 && self.corrupt > 0,
            "the cases did not reach every outcome: {self:?}"
        );
    }
}

/// Runs one case in its own task, so a panic anywhere in it is reported with the case.
async fn check_case(
    tally: &mut Tally,
    case: String,
    bytes: Vec<u8>,
    original: Option<Vec<u8>>,
    must_load: bool,
) {
    let task = tokio::spawn(check(bytes, original, must_load));
    match task.await {
        Ok(Answer::Loaded) => tally.loaded += 1,
        Ok(Answer::TailSkipped) => tally.tail_skipped += 1,
        Ok(Answer::Corrupt) => tally.corrupt += 1,
        Err(error) => panic!("case {case}: {error}"),
    }
}

enum Answer {
    Loaded,
    TailSkipped,
    Corrupt,
}

async fn check(bytes: Vec<u8>, original: Option<Vec<u8>>, must_load: bool) -> Answer {
    let mutated = lines(&bytes);
    let not_json = mutated.first_not_json();
    let (dir, outcome) = open_bytes(&bytes).await;
    match outcome {
        Outcome::CorruptAt(line) => {
            assert!(
                !must_load,
                "a cut journal must load, got an error at {line}"
            );
            assert!(
                (1..=mutated.complete.len()).contains(&line),
                "error at line {line} of {} lines",
                mutated.complete.len()
            );
            if let Some(not_json) = not_json {
                assert!(
                    line <= not_json,
                    "error at {line}, past the non-JSON {not_json}"
                );
            }
            if let Some(original) = &original {
                let changed = mutated.first_change_from(&lines(original));
                assert!(
                    line >= changed,
                    "error at {line}, before the change at {changed}"
                );
                if not_json == Some(changed) {
                    assert_eq!(line, changed, "a broken line is reported at its number");
                }
            }
            Answer::Corrupt
        }
        Outcome::Loaded(state) => {
            assert_eq!(not_json, None, "a line that is not JSON was loaded");
            // The tail was skipped and cut off: the compacted journal is whole lines only, and
            // it loads back to the same state.
            let compacted = fs::read(dir.path().join(JOURNAL_FILE)).unwrap();
            assert!(compacted.is_empty() || compacted.ends_with(b"\n"));
            match reopen(dir.path()).await {
                Outcome::Loaded(again) => assert_eq!(again, state, "compaction changed the state"),
                Outcome::CorruptAt(line) => panic!("the compacted journal is corrupt at {line}"),
            }
            if mutated.tail.is_empty() {
                return Answer::Loaded;
            }
            let whole_lines = &bytes[..bytes.len() - mutated.tail.len()];
            match open_bytes(whole_lines).await.1 {
                Outcome::Loaded(without_tail) => {
                    assert_eq!(without_tail, state, "only the last partial line is skipped");
                }
                Outcome::CorruptAt(line) => panic!("loaded, but not without its tail ({line})"),
            }
            Answer::TailSkipped
        }
    }
}

/// The journal a busy store appends (`history`) and the snapshot start-up compacts it to.
async fn journals() -> [Vec<u8>; 2] {
    let dir = tempfile::tempdir().unwrap();
    let store = open_default(dir.path()).await;
    exercise_every_port(&store).await;
    store.put_session(&session("b")).await.unwrap();
    for n in 0..3 {
        let key = format!("b-{n}");
        store.append_event(T, event("b"), Some(&key)).await.unwrap();
    }
    let released = lease_of(&store, "released", 30_000).await;
    store
        .release_command(T, "released", &released)
        .await
        .unwrap();
    store.delete_transcript(T, "fork").await.unwrap();
    store.close().await.unwrap();
    let history = fs::read(dir.path().join(JOURNAL_FILE)).unwrap();
    let store = open_default(dir.path()).await;
    store.close().await.unwrap();
    let snapshot = fs::read(dir.path().join(JOURNAL_FILE)).unwrap();
    [history, snapshot]
}

/// One structured mutation of `base`; says what it did and whether the result must load.
fn mutate(rng: &mut Rng, base: &[u8]) -> (String, Vec<u8>, bool) {
    let mut bytes = base.to_vec();
    let line_starts: Vec<usize> = std::iter::once(0)
        .chain(
            base.iter()
                .enumerate()
                .filter(|(_, b)| **b == b'\n')
                .map(|(i, _)| i + 1),
        )
        .filter(|start| *start < base.len())
        .collect();
    let line_span = |index: usize| {
        let start = line_starts[index];
        let end = line_starts.get(index + 1).copied().unwrap_or(base.len());
        start..end
    };
    match rng.below(4) {
        0 => {
            let at = rng.index(bytes.len());
            let mut value = rng.byte();
            if value == bytes[at] {
                value ^= 0x20;
            }
            bytes[at] = value;
            (format!("byte {at} := {value:#04x}"), bytes, false)
        }
        1 => {
            let at = rng.index(bytes.len());
            bytes.truncate(at);
            (format!("cut at {at}"), bytes, true)
        }
        2 => {
            let index = rng.index(line_starts.len());
            bytes.drain(line_span(index));
            (format!("line {} deleted", index + 1), bytes, false)
        }
        _ => {
            let index = rng.index(line_starts.len());
            let span = line_span(index);
            let copy = base[span.clone()].to_vec();
            bytes.splice(span.end..span.end, copy);
            (format!("line {} duplicated", index + 1), bytes, false)
        }
    }
}

#[tokio::test]
async fn jsonl_13_structured_mutations_of_a_real_journal_load_or_name_their_line() {
    let journals = journals().await;
    let mut rng = Rng::new(SEED);
    let mut tally = Tally::default();
    for (which, base) in ["history", "snapshot"].into_iter().zip(&journals) {
        assert!(matches!(open_bytes(base).await.1, Outcome::Loaded(_)));
        for n in 0..STRUCTURED_CASES_PER_JOURNAL {
            let (what, bytes, must_load) = mutate(&mut rng, base);
            let case = format!("{which} #{n}: {what}");
            check_case(&mut tally, case, bytes, Some(base.clone()), must_load).await;
        }
    }
    eprintln!("structured mutations: {tally:?}");
    tally.assert_each_seen();
}

#[tokio::test]
async fn jsonl_13_random_bytes_load_or_name_their_line() {
    let mut rng = Rng::new(SEED ^ 0xff);
    let mut tally = Tally::default();
    for n in 0..RANDOM_FILES {
        let len = rng.index(2_048);
        // Half fully random, half biased to JSON punctuation and newlines (more lines, more
        // near-misses).
        let biased = n % 2 == 1;
        let bytes: Vec<u8> = (0..len)
            .map(|_| {
                if biased {
                    rng.byte()
                } else {
                    rng.below(256) as u8
                }
            })
            .collect();
        let case = format!("random #{n} ({len} bytes)");
        check_case(&mut tally, case, bytes, None, false).await;
    }
    eprintln!("random files: {tally:?}");
    tally.assert_each_seen();
}
