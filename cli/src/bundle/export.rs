//! `agent-runtime export`: a store's tenants, sessions and records into a bundle directory, one
//! part at a time (memory holds one session), resumable: an export that was interrupted is
//! continued by running it again with the same directory. Parts are written in a fixed order
//! (tenants ascending; per tenant its sessions by id, then its records), so the last part the
//! index lists says where to go on; a part written after it, or listed with a digest its file
//! does not match, is written again.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, Write};
use std::path::Path;

use agent_runtime_store::JournalEntry;
use agent_runtime_store::journal::encode_line;
use agent_runtime_store::portable::MAX_EXPORT_PAGE;
use anyhow::{Context, bail};

use super::format::{
    FORMAT, HashedFile, INDEX, IndexSummary, MANIFEST, Manifest, PartKind, PartLine, SIGNATURE,
    Totals, VERSION, create_dirs, file_digest, part_path, sign, sync_tree, write_atomically,
};
use super::progress::Progress;
use super::{BundleStore, tenant_receipts};

/// What `export` is asked for.
pub struct ExportRequest<'a> {
    pub out: &'a Path,
    /// `None`: every tenant.
    pub tenants: Option<Vec<String>>,
    /// Only these `(tenant, session)`s, with the receipts of commands that acted on them (a
    /// tenant's memories are not a session's: they stay behind).
    pub sessions: Option<Vec<(String, String)>>,
    /// `jsonl` or `postgres`, recorded in the manifest.
    pub source_store: &'a str,
    pub sign_with: Option<&'a Path>,
}

/// Where an interrupted export goes on: after this tenant's session, or after this tenant.
enum Resume {
    Start,
    AfterSession(String, String),
    AfterTenant(String),
}

/// The index so far: its lines, kept to count the totals, and its file, appended to.
struct Index {
    lines: Vec<PartLine>,
    file: std::fs::File,
}

impl Index {
    /// Opens the index of `out`, keeping the lines whose parts are whole (see the module docs).
    fn open(out: &Path) -> anyhow::Result<Self> {
        let path = out.join(INDEX);
        let mut lines = Vec::new();
        if let Ok(file) = std::fs::File::open(&path) {
            for line in std::io::BufReader::new(file).lines() {
                let Ok(line) = line else { break };
                let Ok(part) = serde_json::from_str::<PartLine>(&line) else {
                    break;
                };
                match file_digest(&out.join(&part.path)) {
                    Ok((bytes, sha256)) if bytes == part.bytes && sha256 == part.sha256 => {
                        lines.push(part)
                    }
                    _ => break,
                }
            }
        }
        let mut text = Vec::new();
        for line in &lines {
            serde_json::to_writer(&mut text, line)?;
            text.push(b'\n');
        }
        write_atomically(&path, &text)?;
        let file = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .context("opening the bundle's index")?;
        Ok(Self { lines, file })
    }

    fn resume(&self) -> Resume {
        match self.lines.last() {
            None => Resume::Start,
            Some(PartLine {
                kind: PartKind::Session,
                tenant_id,
                session_id: Some(session),
                ..
            }) => Resume::AfterSession(tenant_id.clone(), session.clone()),
            Some(last) => Resume::AfterTenant(last.tenant_id.clone()),
        }
    }

    /// Writes a part's entries, then its index line: the part is in the bundle only once its
    /// line is. Neither is synced here (a sync per part would bound an export by the disk's
    /// flushes): an export that resumes checks every listed part against its digest, and the
    /// whole tree is synced before the manifest is written.
    fn add(
        &mut self,
        out: &Path,
        kind: PartKind,
        tenant_id: &str,
        session_id: Option<&str>,
        entries: &[JournalEntry],
    ) -> anyhow::Result<()> {
        let (relative, path) = part_path(out, self.lines.len() as u64 + 1);
        let mut file = HashedFile::create(&path)?;
        let mut counts = PartCounts::default();
        for entry in entries {
            counts.count(entry);
            file.write(&encode_line(std::slice::from_ref(entry))?)?;
        }
        let (bytes, sha256) = file.finish(false)?;
        let line = PartLine {
            path: relative,
            kind,
            tenant_id: tenant_id.to_owned(),
            session_id: session_id.map(str::to_owned),
            entries: entries.len() as u64,
            bytes,
            sha256,
            events: counts.events,
            durable_events: counts.durable_events,
            receipts: counts.receipts,
            memories: counts.memories,
        };
        let mut text = serde_json::to_vec(&line)?;
        text.push(b'\n');
        self.file
            .write_all(&text)
            .context("writing the bundle's index")?;
        self.lines.push(line);
        Ok(())
    }
}

#[derive(Default)]
pub(super) struct PartCounts {
    pub events: u64,
    pub durable_events: u64,
    pub receipts: u64,
    pub memories: u64,
}

impl PartCounts {
    pub fn count(&mut self, entry: &JournalEntry) {
        match entry {
            JournalEntry::Event { .. } => self.events += 1,
            JournalEntry::DurableEvent { .. } => self.durable_events += 1,
            JournalEntry::Lease { .. } => self.receipts += 1,
            JournalEntry::Memory { .. } => self.memories += 1,
            _ => {}
        }
    }
}

/// Exports into `request.out` (made, or continued: see the module docs); returns the manifest.
pub async fn export(
    store: &dyn BundleStore,
    request: &ExportRequest<'_>,
    progress: &mut Progress,
) -> anyhow::Result<Manifest> {
    let out = request.out;
    if out.join(MANIFEST).exists() {
        bail!(
            "{} already holds a finished bundle: export into a new directory",
            out.display()
        );
    }
    create_dirs(out)?;
    let mut index = Index::open(out)?;
    let resume = index.resume();
    for line in &index.lines {
        progress.part_done(line);
    }
    let chosen: Option<BTreeMap<String, BTreeSet<String>>> =
        request.sessions.as_ref().map(|sessions| {
            let mut chosen: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
            for (tenant, session) in sessions {
                chosen
                    .entry(tenant.clone())
                    .or_default()
                    .insert(session.clone());
            }
            chosen
        });
    if let Some(chosen) = &chosen {
        for (tenant, sessions) in chosen {
            for session in sessions {
                if store.get_session(tenant, session).await?.is_none() {
                    bail!("tenant {tenant} has no session {session}");
                }
            }
        }
    }
    let tenants = match (&chosen, &request.tenants) {
        (Some(chosen), _) => chosen.keys().cloned().collect(),
        (None, Some(tenants)) => {
            let mut tenants = tenants.clone();
            tenants.sort();
            tenants.dedup();
            tenants
        }
        (None, None) => all_tenants(store).await?,
    };
    for tenant in &tenants {
        let after = match &resume {
            Resume::AfterTenant(done) if tenant <= done => continue,
            Resume::AfterSession(at, _) if tenant < at => continue,
            Resume::AfterSession(at, session) if tenant == at => Some(session.clone()),
            _ => None,
        };
        let only = chosen.as_ref().and_then(|chosen| chosen.get(tenant));
        match only {
            Some(sessions) => {
                let pending = sessions
                    .iter()
                    .filter(|session| after.as_ref().is_none_or(|after| *session > after));
                for session in pending {
                    export_one(store, &mut index, out, tenant, session, progress).await?;
                }
            }
            None => {
                let mut after = after;
                loop {
                    let page = store
                        .list_session_ids(tenant, after.as_deref(), MAX_EXPORT_PAGE)
                        .await?;
                    for session in &page {
                        export_one(store, &mut index, out, tenant, session, progress).await?;
                    }
                    match page.last() {
                        Some(last) if page.len() == MAX_EXPORT_PAGE as usize => {
                            after = Some(last.clone())
                        }
                        _ => break,
                    }
                }
            }
        }
        let records = tenant_records(store, tenant, only).await?;
        if !records.is_empty() {
            index.add(out, PartKind::Records, tenant, None, &records)?;
            progress.part_done(index.lines.last().expect("just added"));
        }
    }
    progress.finish();
    finish(out, &index, request).await
}

/// Adds one session's part (a session purged since it was listed is simply not in the bundle).
async fn export_one(
    store: &dyn BundleStore,
    index: &mut Index,
    out: &Path,
    tenant: &str,
    session: &str,
    progress: &mut Progress,
) -> anyhow::Result<()> {
    if let Some(entries) = store.export_session(tenant, session).await? {
        index.add(out, PartKind::Session, tenant, Some(session), &entries)?;
        progress.part_done(index.lines.last().expect("just added"));
    }
    Ok(())
}

/// Every tenant of the store.
async fn all_tenants(store: &dyn BundleStore) -> anyhow::Result<Vec<String>> {
    let mut tenants: Vec<String> = Vec::new();
    loop {
        let page = store
            .list_tenants(tenants.last().map(String::as_str), MAX_EXPORT_PAGE)
            .await?;
        let full = page.len() == MAX_EXPORT_PAGE as usize;
        tenants.extend(page);
        if !full {
            return Ok(tenants);
        }
    }
}

/// A tenant's receipts and memories (both bounded per tenant: the stored-results budget and the
/// memory quota, so they make one part); with `only`, the receipts of commands that acted on
/// those sessions.
async fn tenant_records(
    store: &dyn BundleStore,
    tenant: &str,
    only: Option<&BTreeSet<String>>,
) -> anyhow::Result<Vec<JournalEntry>> {
    let mut records: Vec<JournalEntry> = tenant_receipts(store, tenant)
        .await?
        .into_iter()
        .filter(|entry| match (only, entry) {
            (
                Some(sessions),
                JournalEntry::Lease {
                    lease: Some(lease), ..
                },
            ) => lease
                .target
                .as_ref()
                .and_then(|target| target.session_id.as_ref())
                .is_some_and(|session| sessions.contains(session)),
            _ => true,
        })
        .collect();
    if only.is_none() {
        records.extend(store.export_memories(tenant).await?);
    }
    Ok(records)
}

/// Writes the manifest (and its signature, first: the manifest marks the bundle finished).
async fn finish(
    out: &Path,
    index: &Index,
    request: &ExportRequest<'_>,
) -> anyhow::Result<Manifest> {
    sync_tree(out)?;
    let (bytes, sha256) = file_digest(&out.join(INDEX))?;
    let mut totals = Totals::default();
    let mut tenants = std::collections::BTreeSet::new();
    for line in &index.lines {
        tenants.insert(line.tenant_id.as_str());
        totals.sessions += u64::from(line.kind == PartKind::Session);
        totals.events += line.events;
        totals.durable_events += line.durable_events;
        totals.receipts += line.receipts;
        totals.memories += line.memories;
    }
    totals.tenants = tenants.len() as u64;
    let manifest = Manifest {
        format: FORMAT.to_owned(),
        version: VERSION,
        created_at: agent_runtime::timefmt::format_iso_ms(now_ms()),
        producer: format!("agent-runtime {}", env!("CARGO_PKG_VERSION")),
        source_store: request.source_store.to_owned(),
        tenants: request.tenants.clone(),
        sessions: request.sessions.as_ref().map(|sessions| {
            sessions
                .iter()
                .map(|(tenant, session)| format!("{tenant}/{session}"))
                .collect()
        }),
        index: IndexSummary {
            path: INDEX.to_owned(),
            parts: index.lines.len() as u64,
            bytes,
            sha256,
        },
        totals,
    };
    let mut text = serde_json::to_vec_pretty(&manifest)?;
    text.push(b'\n');
    if let Some(key) = request.sign_with {
        let signature = sign(&text, key)?;
        write_atomically(&out.join(SIGNATURE), format!("{signature}\n").as_bytes())?;
    }
    write_atomically(&out.join(MANIFEST), &text)?;
    Ok(manifest)
}

pub(super) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis() as u64)
}
