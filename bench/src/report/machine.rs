//! The machine a report was produced on: cores, memory, CPU model, kernel.

pub struct Machine {
    pub cores: usize,
    pub memory_gib: f64,
    pub cpu: String,
    pub kernel: String,
}

impl Machine {
    pub fn detect() -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu = cpuinfo
            .lines()
            .find(|line| line.starts_with("model name"))
            .and_then(|line| line.split_once(':'))
            .map(|(_, model)| model.trim().to_owned())
            .unwrap_or_else(|| "unknown CPU".to_owned());
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let memory_kib: f64 = meminfo
            .lines()
            .find(|line| line.starts_with("MemTotal:"))
            .and_then(|line| line.split_whitespace().nth(1))
            .and_then(|kib| kib.parse().ok())
            .unwrap_or(0.0);
        Machine {
            cores: std::thread::available_parallelism().map_or(0, usize::from),
            memory_gib: memory_kib / 1024.0 / 1024.0,
            cpu,
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .map(|kernel| kernel.trim().to_owned())
                .unwrap_or_default(),
        }
    }

    /// `2 cores (…), 23.5 GiB memory, Linux 6.x`.
    pub fn describe(&self) -> String {
        format!(
            "{} cores ({}), {:.1} GiB memory, Linux {}; server, PostgreSQL and load generator share the cores",
            self.cores, self.cpu, self.memory_gib, self.kernel
        )
    }

    /// `2 cores, 23.5 GiB`.
    pub fn short(&self) -> String {
        format!("{} cores, {:.1} GiB", self.cores, self.memory_gib)
    }
}
