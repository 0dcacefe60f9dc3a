//! Private PostgreSQL for tests: a cluster started from the local PostgreSQL 15 binaries in a
//! temporary directory, and a fresh database per test.
//!
//! [`fresh_database_url`] creates a database `test_p<pid>_<random>` and returns its URL:
//! - on the server named by `AGENT_RUNTIME_TEST_DATABASE_URL` when it is set (scripts/test.sh
//!   starts one cluster for the whole run and exports it);
//! - otherwise on a cluster this process starts on first use and shares between its tests, so a
//!   plain `cargo nextest run` works too and no test is ever skipped for lack of PostgreSQL.
//!
//! [`PgCluster`] is also usable directly by a test that must stop and restart its database.
//! PostgreSQL refuses to run as root, so as root the binaries run as the `postgres` user. A
//! watchdog process stops the cluster and deletes its directory once the test process is gone,
//! even when it dies without unwinding.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use sqlx::Connection;
use sqlx::postgres::PgConnection;
use tokio::sync::OnceCell;

/// The environment variable naming an existing server to create test databases on.
pub const DATABASE_URL_ENV: &str = "AGENT_RUNTIME_TEST_DATABASE_URL";

/// Where the PostgreSQL binaries are, unless `PG_BIN_DIR` says otherwise.
const DEFAULT_BIN_DIR: &str = "/usr/lib/postgresql/15/bin";

/// Errors of the test support, as text: tests fail with it.
pub type TestResult<T> = Result<T, String>;

/// A PostgreSQL cluster in a temporary directory, listening on a free loopback port with trust
/// authentication. Stopped and deleted on drop.
pub struct PgCluster {
    root: tempfile::TempDir,
    port: u16,
    bin_dir: PathBuf,
    as_postgres_user: bool,
    running: bool,
}

fn run(command: &mut Command, what: &str) -> TestResult<()> {
    let output = command
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{what}: cannot run: {e}"))?;
    if output.status.success() {
        return Ok(());
    }
    Err(format!(
        "{what} failed ({}): {}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    ))
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|out| String::from_utf8_lossy(&out.stdout).trim() == "0")
        .unwrap_or(false)
}

fn free_port() -> TestResult<u16> {
    let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("free port: {e}"))?;
    let port = listener
        .local_addr()
        .map_err(|e| format!("free port: {e}"))?
        .port();
    Ok(port)
}

impl PgCluster {
    /// Runs `initdb` and starts the server (blocking; a few seconds).
    pub fn start() -> TestResult<Self> {
        let bin_dir = PathBuf::from(
            std::env::var("PG_BIN_DIR").unwrap_or_else(|_| DEFAULT_BIN_DIR.to_owned()),
        );
        if !bin_dir.join("initdb").exists() {
            return Err(format!(
                "PostgreSQL binaries not found in {} (install postgresql-15 or set PG_BIN_DIR)",
                bin_dir.display()
            ));
        }
        let root = tempfile::Builder::new()
            .prefix("agent-runtime-pg-")
            .tempdir()
            .map_err(|e| format!("temporary directory: {e}"))?;
        let as_postgres_user = is_root();
        if as_postgres_user {
            run(
                Command::new("chown")
                    .arg("postgres:postgres")
                    .arg(root.path()),
                "chown the cluster directory",
            )?;
        }
        std::fs::create_dir_all(root.path().join("sock"))
            .map_err(|e| format!("socket directory: {e}"))?;
        if as_postgres_user {
            run(
                Command::new("chown")
                    .arg("postgres:postgres")
                    .arg(root.path().join("sock")),
                "chown the socket directory",
            )?;
        }
        let mut cluster = PgCluster {
            port: free_port()?,
            root,
            bin_dir,
            as_postgres_user,
            running: false,
        };
        let data = cluster.data_dir();
        run(
            cluster
                .pg_command("initdb")
                .args([
                    "-U",
                    "postgres",
                    "--auth=trust",
                    "-E",
                    "UTF8",
                    "--locale=C",
                    "-N",
                    "-D",
                ])
                .arg(&data),
            "initdb",
        )?;
        cluster.spawn_watchdog()?;
        cluster.start_server()?;
        Ok(cluster)
    }

    fn data_dir(&self) -> PathBuf {
        self.root.path().join("data")
    }

    fn pg_command(&self, binary: &str) -> Command {
        let program = self.bin_dir.join(binary);
        if self.as_postgres_user {
            let mut command = Command::new("runuser");
            command.args(["-u", "postgres", "--"]).arg(program);
            command
        } else {
            Command::new(program)
        }
    }

    /// Stops the cluster and deletes its directory once this process has exited.
    fn spawn_watchdog(&self) -> TestResult<()> {
        let script = format!(
            "while kill -0 {pid} 2>/dev/null; do sleep 0.5; done; {stop} -D '{data}' stop -m immediate >/dev/null 2>&1; rm -rf '{root}'",
            pid = std::process::id(),
            stop = self.pg_ctl_shell(),
            data = self.data_dir().display(),
            root = self.root.path().display(),
        );
        Command::new("sh")
            .arg("-c")
            .arg(script)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cluster watchdog: {e}"))?;
        Ok(())
    }

    fn pg_ctl_shell(&self) -> String {
        let pg_ctl = self.bin_dir.join("pg_ctl");
        if self.as_postgres_user {
            format!("runuser -u postgres -- '{}'", pg_ctl.display())
        } else {
            format!("'{}'", pg_ctl.display())
        }
    }

    fn start_server(&mut self) -> TestResult<()> {
        let options = format!(
            "-c listen_addresses=127.0.0.1 -p {} -k {} -c fsync=off -c synchronous_commit=off \
             -c full_page_writes=off -c max_connections=400 -c shared_buffers=32MB",
            self.port,
            self.root.path().join("sock").display()
        );
        run(
            self.pg_command("pg_ctl")
                .arg("-D")
                .arg(self.data_dir())
                .arg("-l")
                .arg(self.root.path().join("server.log"))
                .args(["-o", &options, "-w", "-t", "60", "start"]),
            "pg_ctl start",
        )?;
        self.running = true;
        Ok(())
    }

    /// Stops the server (fast shutdown: open connections are terminated). Restart with
    /// [`PgCluster::restart`]; the port and the data stay.
    pub fn stop(&mut self) -> TestResult<()> {
        if !self.running {
            return Ok(());
        }
        run(
            self.pg_command("pg_ctl")
                .arg("-D")
                .arg(self.data_dir())
                .args(["-m", "fast", "-w", "stop"]),
            "pg_ctl stop",
        )?;
        self.running = false;
        Ok(())
    }

    /// Starts a stopped server again on the same port with the same data.
    pub fn restart(&mut self) -> TestResult<()> {
        if self.running {
            return Ok(());
        }
        self.start_server()
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn path(&self) -> &Path {
        self.root.path()
    }

    /// The URL of database `database` as the `postgres` superuser.
    pub fn url(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }

    /// Creates a fresh, empty database and returns its URL.
    pub async fn create_database(&self) -> TestResult<String> {
        create_database_at(&self.url("postgres")).await
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        if self.running {
            let _stopped = run(
                self.pg_command("pg_ctl")
                    .arg("-D")
                    .arg(self.data_dir())
                    .args(["-m", "immediate", "-w", "stop"]),
                "pg_ctl stop",
            );
        }
    }
}

/// `url` with its database name replaced by `database` (query parameters kept).
fn with_database(url: &str, database: &str) -> TestResult<String> {
    let scheme_end = url
        .find("://")
        .ok_or_else(|| format!("{DATABASE_URL_ENV} is not a URL"))?
        + 3;
    let (base, query) = match url.find('?') {
        Some(at) => (&url[..at], &url[at..]),
        None => (url, ""),
    };
    let authority_end = base[scheme_end..]
        .find('/')
        .map_or(base.len(), |at| scheme_end + at);
    Ok(format!("{}/{database}{query}", &base[..authority_end]))
}

/// The prefix of the databases this process creates: dropped together once it has exited.
fn database_prefix() -> String {
    format!("test_p{}_", std::process::id())
}

/// Creates `test_p<pid>_<random>` on the server of `admin_url` and returns its URL. The first call
/// for a server starts a watchdog that drops this process's databases once it has exited, so a
/// whole suite run against one server holds only the databases of the tests still running (each
/// is a few megabytes, and a run creates hundreds).
pub async fn create_database_at(admin_url: &str) -> TestResult<String> {
    let name = format!(
        "{}{}",
        database_prefix(),
        agent_runtime::ids::nanoid()
            .to_ascii_lowercase()
            .replace('-', "_")
    );
    let mut conn = PgConnection::connect(admin_url)
        .await
        .map_err(|e| format!("connecting to the test server: {e}"))?;
    spawn_database_reaper(admin_url)?;
    sqlx::query(&format!("CREATE DATABASE \"{name}\""))
        .execute(&mut conn)
        .await
        .map_err(|e| format!("creating database {name}: {e}"))?;
    let _closed = conn.close().await;
    with_database(admin_url, &name)
}

/// The servers this process has a database reaper for.
static REAPED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// Starts, once per server, a process that waits for this one to exit and then drops every
/// database it created there (`WITH (FORCE)`: connections of children it left are ended too).
fn spawn_database_reaper(admin_url: &str) -> TestResult<()> {
    let mut reaped = REAPED
        .lock()
        .map_err(|_| "database reaper lock".to_owned())?;
    if reaped.iter().any(|url| url == admin_url) {
        return Ok(());
    }
    reaped.push(admin_url.to_owned());
    let bin_dir = std::env::var("PG_BIN_DIR").unwrap_or_else(|_| DEFAULT_BIN_DIR.to_owned());
    // Database names are `[a-z0-9_]` (see `create_database_at`): no quoting needed.
    let script = "while kill -0 \"$3\" 2>/dev/null; do sleep 0.5; done; \
        \"$0\" -X -q -At -d \"$1\" \
          -c \"SELECT datname FROM pg_database WHERE starts_with(datname, '$2')\" \
        | while read -r name; do \
            \"$0\" -X -q -d \"$1\" -c \"DROP DATABASE IF EXISTS $name WITH (FORCE)\"; \
          done";
    Command::new("sh")
        .arg("-c")
        .arg(script)
        .arg(Path::new(&bin_dir).join("psql"))
        .arg(admin_url)
        .arg(database_prefix())
        .arg(std::process::id().to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("database reaper: {e}"))?;
    Ok(())
}

static SHARED: OnceCell<PgCluster> = OnceCell::const_new();

/// The cluster this process shares between its tests, started on first use.
pub async fn shared_cluster() -> TestResult<&'static PgCluster> {
    SHARED
        .get_or_try_init(|| async {
            tokio::task::spawn_blocking(PgCluster::start)
                .await
                .map_err(|e| format!("starting PostgreSQL: {e}"))?
        })
        .await
}

/// A fresh database for one test (see the module docs for where it lives).
pub async fn fresh_database_url() -> TestResult<String> {
    match std::env::var(DATABASE_URL_ENV) {
        Ok(url) if !url.trim().is_empty() => create_database_at(&url).await,
        _ => shared_cluster().await?.create_database().await,
    }
}

/// Makes the database of `url` read-only (`default_transaction_read_only`) or writable again, and
/// ends every other session on it, so pooled connections reconnect under the new setting (PG-12).
pub async fn set_read_only(url: &str, read_only: bool) -> TestResult<()> {
    let mut conn = PgConnection::connect(url)
        .await
        .map_err(|e| format!("connecting to the test database: {e}"))?;
    let (name,): (String,) = sqlx::query_as("SELECT current_database()")
        .fetch_one(&mut conn)
        .await
        .map_err(|e| format!("naming the test database: {e}"))?;
    // This session itself may have started read-only (the setting being undone).
    sqlx::query("SET default_transaction_read_only = off")
        .execute(&mut conn)
        .await
        .map_err(|e| format!("making the admin session writable: {e}"))?;
    let setting = if read_only {
        "SET default_transaction_read_only = on"
    } else {
        "RESET default_transaction_read_only"
    };
    sqlx::query(&format!("ALTER DATABASE \"{name}\" {setting}"))
        .execute(&mut conn)
        .await
        .map_err(|e| format!("changing {name}: {e}"))?;
    sqlx::query(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE datname = current_database() AND pid <> pg_backend_pid()",
    )
    .execute(&mut conn)
    .await
    .map_err(|e| format!("ending the sessions of {name}: {e}"))?;
    let _closed = conn.close().await;
    Ok(())
}

/// Ends every session on the database of `url` but the caller's own (`pg_terminate_backend`): the
/// store's pooled connections break under it, as when a PostgreSQL backend is killed. Returns how
/// many were ended.
pub async fn terminate_backends(url: &str) -> TestResult<u64> {
    let mut conn = PgConnection::connect(url)
        .await
        .map_err(|e| format!("connecting to the test database: {e}"))?;
    let ended: Vec<(bool,)> = sqlx::query_as(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE datname = current_database() AND pid <> pg_backend_pid()",
    )
    .fetch_all(&mut conn)
    .await
    .map_err(|e| format!("ending the sessions: {e}"))?;
    let _closed = conn.close().await;
    Ok(ended.iter().filter(|(ended,)| *ended).count() as u64)
}

#[cfg(test)]
mod tests {
    use super::with_database;

    #[test]
    fn database_name_is_replaced_and_query_kept() {
        assert_eq!(
            with_database("postgres://u@h:5/postgres?sslmode=disable", "x").unwrap(),
            "postgres://u@h:5/x?sslmode=disable"
        );
        assert_eq!(
            with_database("postgres://u@h:5", "x").unwrap(),
            "postgres://u@h:5/x"
        );
    }
}
