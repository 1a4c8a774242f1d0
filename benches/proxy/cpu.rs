//! CPU per proxied call: the `spendgate serve` child's CPU time (user + system, every
//! thread, from `/proc/<pid>/task/*/stat`) over the saturation phase of the chat
//! target and the wait until its calls are recorded, divided by the calls. The wait is
//! in the window because a call's record commits after its answer: a call's CPU is
//! whole only once its commit is done. Split by thread name, so the HTTP workers, the
//! accounting writer and its SQLite commits show apart.

use std::collections::BTreeMap;
use std::fs;

/// Clock ticks per second of `/proc/*/stat` times (`sysconf(_SC_CLK_TCK)`, 100 on Linux).
const TICKS_PER_SECOND: u64 = 100;

/// CPU ticks per thread group (threads named alike summed: `actix-rt|worker:0` and
/// `actix-rt|worker:1` are both "actix-rt").
#[derive(Default, Clone)]
pub struct Snapshot(BTreeMap<String, u64>);

impl Snapshot {
    /// The process's threads now; an empty snapshot where `/proc` cannot say.
    pub fn of(pid: u32) -> Self {
        let mut groups = BTreeMap::new();
        let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else { return Self::default() };
        for task in tasks.flatten() {
            let Ok(stat) = fs::read_to_string(task.path().join("stat")) else { continue };
            if let Some((name, ticks)) = parse(&stat) {
                *groups.entry(group(&name)).or_insert(0) += ticks;
            }
        }
        Self(groups)
    }

    /// µs of CPU per call between `self` and the later `after`, per thread group and in
    /// all. A thread that ended between the two is not counted (none do in the bench).
    pub fn per_call(&self, after: &Self, calls: u64) -> (f64, Vec<(String, f64)>) {
        let calls = calls.max(1) as f64;
        let us = |ticks: u64| ticks as f64 * 1e6 / TICKS_PER_SECOND as f64 / calls;
        let mut split: Vec<(String, f64)> = after
            .0
            .iter()
            .map(|(name, t)| (name.clone(), us(t.saturating_sub(self.0.get(name).copied().unwrap_or(0)))))
            .filter(|(_, v)| *v > 0.0)
            .collect();
        split.sort_by(|a, b| b.1.total_cmp(&a.1));
        (split.iter().map(|(_, v)| v).sum(), split)
    }
}

/// `(comm, utime + stime)` of one `/proc/<pid>/task/<tid>/stat` line. The name is in
/// parentheses and may hold spaces or parentheses itself, so fields are counted from
/// the last `)`.
fn parse(stat: &str) -> Option<(String, u64)> {
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let name = stat.get(open + 1..close)?.to_owned();
    let fields: Vec<&str> = stat.get(close + 2..)?.split_whitespace().collect();
    // After the name: state is field 3 of the line, utime 14, stime 15 (1-based).
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some((name, utime + stime))
}

/// A thread's group: its name up to a digit run or separator that numbers it.
fn group(name: &str) -> String {
    let base = name.split(['|', ':', '#']).next().unwrap_or(name);
    base.trim_end_matches(|c: char| c.is_ascii_digit() || c == '-' || c == '_').to_owned()
}
