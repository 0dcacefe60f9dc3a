//! What `/proc` says of a server process: its resident memory (`/proc/<pid>/status`, `VmRSS`,
//! in KiB) and the CPU time it used (`/proc/<pid>/stat`).

use anyhow::Context;

/// `VmRSS` of `pid` in KiB.
pub fn rss_kib(pid: u32) -> anyhow::Result<u64> {
    let path = format!("/proc/{pid}/status");
    let status = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    parse_vm_rss(&status).with_context(|| format!("no VmRSS line in {path}"))
}

/// CPU time `pid` used so far (user and system), in milliseconds.
pub fn cpu_ms(pid: u32) -> anyhow::Result<f64> {
    let path = format!("/proc/{pid}/stat");
    let stat = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    let ticks = parse_cpu_ticks(&stat).with_context(|| format!("no CPU times in {path}"))?;
    // `sysconf(_SC_CLK_TCK)` is 100 on every Linux the benchmark runs on.
    Ok(ticks as f64 * 10.0)
}

/// `utime + stime` (fields 14 and 15) of a `stat` line; the command name (field 2) may hold
/// spaces, so fields are counted after its closing parenthesis.
fn parse_cpu_ticks(stat: &str) -> Option<u64> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    let mut fields = after_name.split_whitespace().skip(11);
    let user: u64 = fields.next()?.parse().ok()?;
    let system: u64 = fields.next()?.parse().ok()?;
    Some(user + system)
}

fn parse_vm_rss(status: &str) -> Option<u64> {
    let line = status.lines().find(|line| line.starts_with("VmRSS:"))?;
    line.trim_start_matches("VmRSS:")
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

/// A named process whose memory a scenario reports (`--pid NAME=PID`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamedPid {
    pub name: String,
    pub pid: u32,
}

impl std::str::FromStr for NamedPid {
    type Err = String;

    fn from_str(value: &str) -> Result<NamedPid, String> {
        let (name, pid) = value
            .split_once('=')
            .ok_or_else(|| format!("{value:?} is not NAME=PID"))?;
        let pid = pid
            .parse()
            .map_err(|_| format!("{pid:?} is not a process id"))?;
        Ok(NamedPid {
            name: name.to_owned(),
            pid,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_ticks_are_counted_after_the_command_name() {
        let stat = "4242 (agent runtime) S 1 4242 4242 0 -1 4194560 900 0 0 0 250 75 0 0 20 0 9 0";
        assert_eq!(parse_cpu_ticks(stat), Some(325));
        assert_eq!(parse_cpu_ticks("4242 (x) S 1"), None);
    }

    #[test]
    fn reads_the_resident_set_of_a_status_file() {
        let status = "Name:\tagent-runtime\nVmPeak:\t  900 kB\nVmRSS:\t   12345 kB\nThreads:\t3\n";
        assert_eq!(parse_vm_rss(status), Some(12345));
        assert_eq!(parse_vm_rss("Name: x\n"), None);
    }

    #[test]
    fn reads_this_process() {
        assert!(rss_kib(std::process::id()).unwrap() > 0);
    }

    #[test]
    fn parses_named_pids() {
        let named: NamedPid = "gateway-1=42".parse().unwrap();
        assert_eq!(named.name, "gateway-1");
        assert_eq!(named.pid, 42);
        assert!("42".parse::<NamedPid>().is_err());
    }
}
